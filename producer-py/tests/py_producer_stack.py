"""What the Python producer's tests share: the local stack (its env file exported, as
`scripts/test` does), fresh licenses from the Marketplace simulator, the pipeline's tick, the
billed ledger, and streams of their own read back with `aws_kinesis_agg`.

By hand: `target/debug/awsmp-local up`, `set -a; . .awsmp-local/env; set +a`,
`AWSMP_LOCAL_BIN=target/debug/awsmp-local`, the wheel installed (producer-py/README.md), then
`python -m pytest producer-py/tests`.
"""

import base64
import datetime as dt
import json
import os
import random
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import boto3
from aws_kinesis_agg.deaggregator import iter_deaggregate_records

REPO = Path(__file__).resolve().parents[2]
LOCAL_BIN = os.environ.get("AWSMP_LOCAL_BIN", str(REPO / "target" / "debug" / "awsmp-local"))
# The demo catalog's product (local-stack/src/local/mod.rs, DEMO_PRODUCT_CODE).
DEMO_PRODUCT_CODE = "awsmpdemo0product0code0001"



def utc_hour(t):
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H")


class Stack:
    """The running local stack, as a seller's test would drive it."""

    def __init__(self):
        self.env = os.environ
        self.kinesis = boto3.client("kinesis")

    def admin(self, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.env["AWSMP_SIM_ADMIN_URL"] + path, data=data,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req) as r:
            return json.load(r)

    def fresh_license(self):
        """(license ARN, account) of a license subscribed now: no other test bills it."""
        account = "{:012d}".format(random.randrange(10**11, 10**12))
        code = self.env.get("AWSMP_PRODUCT_CODE", DEMO_PRODUCT_CODE)
        got = self.admin("/_sim/subscribe", {"productCode": code, "customerAWSAccountId": account})
        return got["licenseArn"], account

    def bill_hours_of_now(self, started):
        """Runs the pipeline's schedules late enough to bill the hour `started` is in and the
        next one (a test may cross an hour), as `awsmp-local tick --at` does."""
        top = started.astimezone(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
        at = (top + dt.timedelta(hours=3, minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = subprocess.run([LOCAL_BIN, "tick", "--at", at], check=True, capture_output=True, text=True)
        report = json.loads(done.stdout)
        assert report.get("submitterError") is None, report
        return report

    def billed(self, license_arn):
        """{(dimension, hour): quantity} the simulator billed for `license_arn`, and how many
        DuplicateRecord answers it gave for it."""
        ledger = self.admin("/_sim/ledger")
        billed = Counter()
        for r in ledger["records"]:
            if r["licenseArn"] == license_arn:
                key = (r["dimension"], r["hour"])
                assert key not in billed, "a group-hour billed twice: %r" % (r,)
                billed[key] = r["quantity"]
        duplicates = [d for d in ledger["duplicates"] if d.get("licenseArn") == license_arn]
        return dict(billed), duplicates

    def new_stream(self, shards=2):
        name = "awsmp-py-%s" % uuid.uuid4().hex
        self.kinesis.create_stream(StreamName=name, ShardCount=shards)
        for _ in range(200):
            summary = self.kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
            if summary["StreamStatus"] == "ACTIVE":
                return name
            time.sleep(0.05)
        raise AssertionError("stream %s never became active" % name)

    def user_records(self, stream):
        """Every user record on `stream`, deaggregated by aws_kinesis_agg: (partition key, the
        user record's bytes, whether it came out of an aggregate)."""
        out = []
        for shard in self.kinesis.list_shards(StreamName=stream)["Shards"]:
            it = self.kinesis.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"],
                                                 ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            while it:
                resp = self.kinesis.get_records(ShardIterator=it, Limit=10000)
                for u in iter_deaggregate_records(resp["Records"], data_format="Boto3"):
                    k = u["kinesis"]
                    aggregated = bool(k.get("aggregated"))
                    # The library base64-encodes what it split out of an aggregate and passes
                    # a plain record through as boto3 gave it.
                    data = base64.b64decode(k["data"]) if aggregated else k["data"]
                    out.append((k["partitionKey"], data, aggregated))
                it = resp.get("NextShardIterator") if resp["Records"] else None
        return out

    def v1_events(self, stream):
        """The v1 JSON events on `stream` (a producer with wire_version=1)."""
        return [json.loads(data) for _, data, _ in self.user_records(stream)]


class KinesisGate:
    """A pass-through to the stack's Kinesis on its own 127.0.0.1 port that holds every
    PutRecords call while closed: what a stalled stream looks like to a producer (its buffer
    fills), opened again at will. Other calls (ListShards) pass at once."""

    def __init__(self):
        import http.client
        import http.server
        from urllib.parse import urlparse

        upstream = urlparse(os.environ["AWS_ENDPOINT_URL_KINESIS"])
        self.open_ = threading.Event()
        self.held = 0
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if "PutRecords" in self.headers.get("x-amz-target", ""):
                    gate.held += 1
                    gate.open_.wait()
                conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request("POST", self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def open(self):
        self.open_.set()

    def close(self):
        self.open_.set()
        self.server.shutdown()
        self.server.server_close()
