"""Records written by awsmp-producer deaggregate with the independent `aws_kinesis_agg` library.

Runs the Rust example `encode_fixture` (the real producer against an in-memory stream) — or the
binary named by AWSMP_ENCODE_FIXTURE_BIN — and checks, with aws_kinesis_agg's deaggregator, every
event, partition key and explicit hash key: in v1 (JSON user records) and in v2 (binary user
records, decoded here by a few lines written from docs/wire-format.md alone).

    python3 -m venv /tmp/prodvenv && /tmp/prodvenv/bin/pip install -q -r tools/requirements.lock
    /tmp/prodvenv/bin/python -m pytest producer/tests/interop/test_kpl_interop.py
"""

import base64
import collections
import hashlib
import json
import os
import subprocess

import pytest
from aws_kinesis_agg import MAGIC
from aws_kinesis_agg.deaggregator import iter_deaggregate_records

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def group_key(event):
    joined = "%s|%s|%s" % (event["licenseArn"], event["customerAWSAccountId"], event["dimension"])
    if len(joined) <= 256:
        return joined
    return "g:" + hashlib.md5(joined.encode("utf-8")).hexdigest()


def md5_int(s):
    return int.from_bytes(hashlib.md5(s.encode("utf-8")).digest(), "big")


def run_example(out, *extra):
    prebuilt = os.environ.get("AWSMP_ENCODE_FIXTURE_BIN")
    if prebuilt:
        cmd = [prebuilt, out, *extra]
    else:
        cmd = ["cargo", "run", "-q", "-p", "awsmp-producer", "--example", "encode_fixture", "--", out, *extra]
    subprocess.run(cmd, cwd=REPO, check=True)
    with open(out) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    return run_example(str(tmp_path_factory.mktemp("kpl") / "produced.json"), "--wire", "1")


@pytest.fixture(scope="module")
def produced_v2(tmp_path_factory):
    return run_example(str(tmp_path_factory.mktemp("kpl") / "produced-v2.json"))


def shard_of(shards, h):
    for s in shards:
        if int(s["startingHashKey"]) <= h <= int(s["endingHashKey"]):
            return s["shardId"]
    raise AssertionError("hash %d outside every shard" % h)


def lambda_record(i, r):
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "sequenceNumber": str(i),
            "approximateArrivalTimestamp": 0,
            "partitionKey": r["partitionKey"],
            "data": r["data"],
        }
    }


def test_every_event_deaggregates_with_aws_kinesis_agg(produced):
    records = produced["records"]
    assert any(base64.b64decode(r["data"]).startswith(MAGIC) for r in records), "aggregates were written"
    got = []
    for i, r in enumerate(records):
        raw = base64.b64decode(r["data"])
        users = list(iter_deaggregate_records(lambda_record(i, r)))
        if raw.startswith(MAGIC):
            # The library silently passes through an aggregate whose MD5 or protobuf is bad;
            # demand that it really deaggregated ours.
            assert all(u["kinesis"].get("aggregated") for u in users), "record %d not deaggregated" % i
            assert len(users) > 1, "lone user records are sent plain"
        else:
            assert len(users) == 1 and not users[0]["kinesis"].get("aggregated")
        for u in users:
            event = json.loads(base64.b64decode(u["kinesis"]["data"]))
            got.append(event)
            # Partition key of the user record is its event's group.
            assert u["kinesis"]["partitionKey"] == group_key(event)
            # Every user record lands on the shard its own partition key maps to.
            route = int(r["explicitHashKey"]) if r["explicitHashKey"] else md5_int(r["partitionKey"])
            assert shard_of(produced["shards"], route) == r["shardId"]
            assert shard_of(produced["shards"], md5_int(u["kinesis"]["partitionKey"])) == r["shardId"]
        # The explicit hash key is only used when an aggregate mixes partition keys, and then it
        # is the first user record's hash.
        pks = [u["kinesis"]["partitionKey"] for u in users]
        assert r["partitionKey"] == pks[0]
        if r["explicitHashKey"] is None:
            assert len(set(pks)) == 1
        else:
            assert len(set(pks)) > 1
            assert int(r["explicitHashKey"]) == md5_int(pks[0])
    want = produced["events"]
    assert len(got) == len(want)
    key = lambda e: json.dumps(e, sort_keys=True)
    assert collections.Counter(map(key, got)) == collections.Counter(map(key, want))


def test_payloads_are_v1_with_integer_quantities(produced):
    allowed = {"v", "eventId", "licenseArn", "customerAWSAccountId", "dimension", "quantity",
               "timestamp", "producerId", "usageAllocations"}
    for e in produced["events"]:
        assert e["v"] == 1
        assert set(e) <= allowed
        assert isinstance(e["quantity"], int) and e["quantity"] >= 0
        assert e["timestamp"].endswith("Z") and len(e["timestamp"]) == 24


@pytest.mark.skipif(not os.environ.get("AWS_ENDPOINT_URL_KINESIS"), reason="needs the local stack (awsmp-local up)")
def test_a_stream_written_by_the_producer_reads_back_with_aws_kinesis_agg(tmp_path):
    import time
    import uuid

    import boto3

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    kinesis = boto3.client("kinesis", region_name=region)
    name = "awsmp-interop-%s" % uuid.uuid4().hex
    kinesis.create_stream(StreamName=name, ShardCount=2)
    try:
        for _ in range(100):
            if kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                break
            time.sleep(0.1)
        want = run_example(str(tmp_path / "events.json"), "--stream", name, "--wire", "1")["events"]
        got = []
        for shard in kinesis.list_shards(StreamName=name)["Shards"]:
            it = kinesis.get_shard_iterator(StreamName=name, ShardId=shard["ShardId"],
                                            ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            while it:
                resp = kinesis.get_records(ShardIterator=it, Limit=10000)
                for u in iter_deaggregate_records(resp["Records"], data_format="Boto3"):
                    # The library base64-encodes the user records it splits out and passes plain
                    # records through as boto3 gave them.
                    data = u["kinesis"]["data"]
                    event = json.loads(base64.b64decode(data) if u["kinesis"].get("aggregated") else data)
                    assert u["kinesis"]["partitionKey"] == group_key(event)
                    lo, hi = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
                    assert lo <= md5_int(group_key(event)) <= hi, "group on its own shard"
                    got.append(event)
                it = resp.get("NextShardIterator") if resp["Records"] else None
        key = lambda e: json.dumps(e, sort_keys=True)
        assert collections.Counter(map(key, got)) == collections.Counter(map(key, want))
    finally:
        kinesis.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def _varint(b, i):
    v = shift = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if x < 0x80:
            return v, i


def _fields(b):
    """(field, value) pairs of a protobuf message: ints for varints, bytes for the rest."""
    i, out = 0, []
    while i < len(b):
        key, i = _varint(b, i)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, i = _varint(b, i)
        else:
            assert wire_type == 2, "v2 uses varints and length-delimited fields only"
            n, i = _varint(b, i)
            value, i = b[i:i + n], i + n
        out.append((field, value))
    return out


def _v2_event(data, partition_key, table):
    """One v2 single or ref as its v1 JSON object (docs/wire-format.md)."""
    import datetime

    assert data[0] == 0x02 and data[1] in (0x01, 0x02)
    fields = _fields(data[2:])
    one = {f: v for f, v in fields if f != 8}
    entry = dict(_fields(one[1])) if data[1] == 0x01 else table[one.get(2, 0)]
    if 1 in entry:
        license_arn, account, dimension = (entry[f].decode("utf-8") for f in (1, 2, 3))
    else:
        license_arn, account, dimension = partition_key.split("|", 2)
    ts = datetime.datetime.fromtimestamp(one[4] / 1000, tz=datetime.timezone.utc)
    event = {
        "v": 1,
        "eventId": one[7].decode("utf-8") if 7 in one
        else "p:%032x:%d:%d" % (int.from_bytes(entry[5], "big"), one.get(5, 0), one[6]),
        "licenseArn": license_arn,
        "customerAWSAccountId": account,
        "dimension": dimension,
        "quantity": one.get(3, 0),
        "timestamp": ts.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (one[4] % 1000),
    }
    if 4 in entry:
        event["producerId"] = entry[4].decode("utf-8")
    allocations = []
    for f, v in fields:
        if f == 8:
            a = _fields(v)
            tags = []
            for tf, tv in a:
                if tf == 2:
                    kv = dict(_fields(tv))
                    tags.append({"Key": kv[1].decode("utf-8"), "Value": kv[2].decode("utf-8")})
            allocations.append({"AllocatedUsageQuantity": dict(a).get(1, 0), "Tags": tags})
    if allocations:
        event["usageAllocations"] = allocations
    return event


def test_v2_aggregates_deaggregate_with_aws_kinesis_agg(produced_v2):
    records = produced_v2["records"]
    got = []
    for i, r in enumerate(records):
        raw = base64.b64decode(r["data"])
        users = list(iter_deaggregate_records(lambda_record(i, r)))
        datas = [base64.b64decode(u["kinesis"]["data"]) for u in users]
        table = None
        if raw.startswith(MAGIC):
            assert all(u["kinesis"].get("aggregated") for u in users), "record %d not deaggregated" % i
            # The first user record is the entry table; the others refer to it.
            assert datas[0][:2] == bytes([0x02, 0x00])
            table = [dict(_fields(e)) for f, e in _fields(datas[0][2:])]
            users, datas = users[1:], datas[1:]
            assert all(d[:2] == bytes([0x02, 0x02]) for d in datas)
        else:
            assert len(users) == 1 and datas[0][:2] == bytes([0x02, 0x01])
        for u, d in zip(users, datas):
            pk = u["kinesis"]["partitionKey"]
            event = _v2_event(d, pk, table)
            # Partition key of the user record is its event's group, as in v1.
            assert pk == group_key(event)
            assert shard_of(produced_v2["shards"], md5_int(pk)) == r["shardId"]
            got.append(event)
    want = produced_v2["events"]
    assert len(got) == len(want)
    key = lambda e: json.dumps(e, sort_keys=True)
    assert collections.Counter(map(key, got)) == collections.Counter(map(key, want))
    # v2 is the compact one: fewer bytes on the stream for the same events.
    assert sum(len(base64.b64decode(r["data"])) for r in records) * 2 < sum(len(json.dumps(e)) for e in want)
