"""The Python producer's rows of scripts/bench (docs/benchmarks.md, "The Python producer"): one
workload — events over 300 groups, quantity `i % 97 + 1`, timestamped now — recorded three ways
from one thread into streams of the bench stack's Kinesis (kinesalite), each stream created for
its run (2 shards):

- python: the wheel's `Producer.record(...)` (and `Meter.record(...)`), called from Python;
- pure-python: what a Python service does without it — a v1 JSON payload per event with a
  uuid4 event id, packed with `aws_kinesis_agg`'s `RecordAggregator` (51,200-byte aggregates),
  sent with boto3 `put_records` (500 records and 5 MiB a call, failed entries sent again);
- rust: the Rust producer, `producer/examples/kinesis_throughput.rs` (its binary given as
  RUST_BIN), the same loop.

Each way runs the loop twice over half the events: first timed as a whole (events/s of the
loop), then each call timed (p50/p99 of one call, timer overhead included). Events per
CPU-second counts the process's CPU time (every thread: the Rust producers' background work
too) from the first call until everything is delivered; for the Rust binary, the whole
process's. Bytes on the stream: the data and partition keys Kinesis acknowledged.

Usage: python python_producer.py OUT_DIR RUST_BIN [--quick]. Needs the stack's env (the
caller's). Writes one figure file per figure: {"figure": id, "value": n, "unit": u, "detail": text}.
"""

import json
import os
import resource
import subprocess
import sys
import time
import uuid

import boto3
from aws_kinesis_agg.aggregator import RecordAggregator

GROUPS = 300
KPL_MAX_BYTES = 51_200  # the Rust producer's max_aggregate_bytes (producer/src/config.rs)
# PutRecords: at most 500 records and 5 MiB a call
# (https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecords.html).
MAX_RECORDS_PER_PUT = 500
MAX_BYTES_PER_PUT = 5 * 1024 * 1024


def groups():
    return [("arn:aws:license-manager::123456789012:license:l-{:032x}".format(g // 3),
             "{:012d}".format(210_987_654_321 + g // 3), "dim{}".format(g % 3)) for g in range(GROUPS)]


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def new_stream(kinesis):
    name = "awsmp-bench-py-" + uuid.uuid4().hex[:12]
    kinesis.create_stream(StreamName=name, ShardCount=2)
    while kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
        time.sleep(0.05)
    return name


def two_passes(n, call):
    """(loop events, loop seconds, per-call ns) of `call(i)` over n/2 events, twice."""
    half = n // 2
    t0 = time.perf_counter()
    for i in range(half):
        call(i)
    loop = time.perf_counter() - t0
    lat = [0] * half
    clock = time.perf_counter_ns
    for i in range(half):
        s = clock()
        call(i)
        lat[i] = clock() - s
    return half, loop, lat


def python_way(stream, n, meter):
    from awsmp_producer import Producer

    gs = groups()
    p = Producer(stream, producer_id="bench")
    cpu0 = time.process_time()
    if meter:
        meters = [p.meter(*g) for g in gs]
        call = lambda i: meters[i % GROUPS].record(i % 97 + 1, time.time())
    else:
        call = lambda i: p.record(*gs[i % GROUPS], i % 97 + 1, time.time())
    half, loop, lat = two_passes(n, call)
    outcome = p.shutdown()
    cpu = time.process_time() - cpu0
    assert outcome.is_complete, outcome.undelivered
    s = p.stats()
    return {"loop_events": half, "loop_seconds": loop, "cpu_seconds": cpu, "events": 2 * half,
            "p50_ns": percentile(lat, 0.5), "p99_ns": percentile(lat, 0.99),
            "bytes": s.bytes_acked, "events_acked": s.events_acked}


class PurePython:
    """A Python service's own producer: JSON, aws_kinesis_agg, boto3."""

    def __init__(self, stream):
        self.kinesis = boto3.client("kinesis")
        self.stream = stream
        self.agg = RecordAggregator(max_size=KPL_MAX_BYTES)
        self.batch = []
        self.batch_bytes = 0
        self.bytes = 0
        self.gs = groups()

    def record(self, i):
        lic, acct, dim = self.gs[i % GROUPS]
        t = time.time()
        payload = {"v": 1, "eventId": str(uuid.uuid4()), "licenseArn": lic, "customerAWSAccountId": acct,
                   "dimension": dim, "quantity": i % 97 + 1,
                   "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000),
                   "producerId": "bench"}
        full = self.agg.add_user_record("%s|%s|%s" % (lic, acct, dim),
                                        json.dumps(payload, separators=(",", ":")).encode())
        if full is not None:
            self.add(full)

    def add(self, aggregate):
        pk, ehk, data = aggregate.get_contents()
        entry = {"PartitionKey": pk, "Data": data}
        if ehk:
            entry["ExplicitHashKey"] = ehk
        size = len(data) + len(pk.encode())
        if len(self.batch) == MAX_RECORDS_PER_PUT or self.batch_bytes + size > MAX_BYTES_PER_PUT:
            self.put()
        self.batch.append(entry)
        self.batch_bytes += size

    def put(self):
        entries = self.batch
        self.batch, self.batch_bytes = [], 0
        while entries:
            resp = self.kinesis.put_records(StreamName=self.stream, Records=entries)
            failed = []
            for entry, result in zip(entries, resp["Records"]):
                if "ErrorCode" in result:
                    failed.append(entry)
                else:
                    self.bytes += len(entry["Data"]) + len(entry["PartitionKey"].encode())
            entries = failed
            if failed:
                time.sleep(0.1)

    def flush(self):
        if self.agg.get_num_user_records():
            self.add(self.agg.clear_and_get())
        if self.batch:
            self.put()


def pure_python_way(stream, n):
    way = PurePython(stream)
    cpu0 = time.process_time()
    half, loop, lat = two_passes(n, way.record)
    way.flush()
    cpu = time.process_time() - cpu0
    return {"loop_events": half, "loop_seconds": loop, "cpu_seconds": cpu, "events": 2 * half,
            "p50_ns": percentile(lat, 0.5), "p99_ns": percentile(lat, 0.99), "bytes": way.bytes,
            "events_acked": 2 * half}


def rust_way(binary, stream, n, meter):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([binary, stream, str(n)] + (["meter"] if meter else []), check=True,
                         capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = json.loads(out)
    r["cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    r["events"] = 2 * r["loop_events"]
    r["bytes"] = r["bytes_acked"]
    return r


def write(out, figure, value, unit, detail):
    with open(os.path.join(out, figure + ".json"), "w") as f:
        json.dump({"figure": figure, "value": value, "unit": unit, "detail": detail}, f)


def main():
    out, rust_bin = sys.argv[1], sys.argv[2]
    quick = "--quick" in sys.argv
    n_fast, n_slow = (100_000, 20_000) if quick else (400_000, 60_000)
    kinesis = boto3.client("kinesis")
    runs = {
        "python": lambda s: python_way(s, n_fast, meter=False),
        "python-meter": lambda s: python_way(s, n_fast, meter=True),
        "pure-python": lambda s: pure_python_way(s, n_slow),
        "rust": lambda s: rust_way(rust_bin, s, n_fast, meter=False),
        "rust-meter": lambda s: rust_way(rust_bin, s, n_fast, meter=True),
    }
    for name, run in runs.items():
        stream = new_stream(kinesis)
        try:
            print("python_producer.py: {} into {}".format(name, stream), file=sys.stderr)
            r = run(stream)
        finally:
            kinesis.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)
        assert r["events_acked"] == r["events"], r
        detail = "{} events over {} groups into kinesalite (2 shards), one thread".format(r["events"], GROUPS)
        prefix = "python-producer-bench-" + name
        write(out, prefix + "-events-per-second", r["loop_events"] / r["loop_seconds"], "events/s", detail)
        write(out, prefix + "-events-per-cpu-second", r["events"] / r["cpu_seconds"], "events/s", detail)
        write(out, prefix + "-p50", r["p50_ns"], "ns", detail)
        write(out, prefix + "-p99", r["p99_ns"], "ns", detail)
        write(out, prefix + "-bytes-per-event", r["bytes"] / r["events"], "bytes", detail)
        print("python_producer.py: {} {}".format(name, json.dumps(r)), file=sys.stderr)


if __name__ == "__main__":
    main()
