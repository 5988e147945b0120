"""Writes KPL aggregated records with the independent Python `aws_kinesis_agg` library.

The committed output (fixtures/*.bin + fixtures/python_records.json) is decoded event for event
by the Rust test `producer/tests/integration/interop.rs`. Regenerate with:

    python3 -m venv /tmp/prodvenv && /tmp/prodvenv/bin/pip install -q -r tools/requirements.lock
    /tmp/prodvenv/bin/python producer/tests/interop/make_fixtures.py

Everything is deterministic (fixed ids and times), so regenerating gives the same bytes.
"""

import hashlib
import json
import os

from aws_kinesis_agg.aggregator import RecordAggregator

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")

ARNS = [
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
    "arn:aws-us-gov:license-manager::210987654321:license:l-ffffffffffffffffffffffffffffffff",
]


def partition_key(event):
    return "%s|%s|%s" % (event["licenseArn"], event["customerAWSAccountId"], event["dimension"])


def explicit_hash_key(pk):
    return str(int.from_bytes(hashlib.md5(pk.encode("utf-8")).digest(), "big"))


def events():
    out = []
    dims = ["requests", "gb-hours", "caf\u00e9-\u00fcnits \u2603"]
    for i in range(12):
        e = {
            "v": 1,
            "eventId": "py-%04d" % i,
            "licenseArn": ARNS[i % 2],
            "customerAWSAccountId": "%012d" % (100000000000 + i % 3),
            "dimension": dims[i % 3],
            "quantity": [0, 1, 42, 18446744073709551615][i % 4],
            "timestamp": "2026-11-30T12:%02d:%02d.%03dZ" % (i, i * 3 % 60, i * 77 % 1000),
        }
        if i % 3 == 0:
            e["producerId"] = "python-svc"
        if i % 4 == 2:
            e["usageAllocations"] = [
                {"AllocatedUsageQuantity": 40, "Tags": [{"Key": "team", "Value": "a"}]},
                {"AllocatedUsageQuantity": 2, "Tags": [{"Key": "team", "Value": "b"}, {"Key": "env", "Value": "prod"}]},
            ]
        out.append(e)
    return out


def write_aggregates(name, evs, max_size, with_ehk):
    """Aggregates `evs`, one file per aggregated record; returns the manifest entries."""
    agg = RecordAggregator(max_size=max_size)
    done = []
    pending = []

    def finish(rec, users):
        pk, ehk, data = rec.get_contents()
        fname = "%s-%d.bin" % (name, len(done))
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(data)
        done.append({"file": fname, "partitionKey": pk, "explicitHashKey": ehk, "userRecords": users})

    for e in evs:
        data = json.dumps(e, separators=(",", ":"))  # ensure_ascii: escapes non-ASCII, also valid
        pk = partition_key(e)
        ehk = explicit_hash_key(pk) if with_ehk else None
        full = agg.add_user_record(pk, data, ehk)
        if full is not None:
            finish(full, pending[:])
            pending.clear()
        pending.append({"partitionKey": pk, "explicitHashKey": ehk, "data": data})
    last = agg.clear_and_get()
    if last is not None:
        finish(last, pending)
    return done


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".bin"):
            os.remove(os.path.join(OUT, f))
    evs = events()
    manifest = []
    # One aggregate holding every event, user records without explicit hash keys.
    manifest += write_aggregates("py-agg", evs, 1024 * 1024, with_ehk=False)
    # Small aggregates (the size limit splits them), every user record with an explicit hash key.
    manifest += write_aggregates("py-agg-ehk", evs, 900, with_ehk=True)
    # A plain record, as a boto3 producer without aggregation writes it.
    plain = json.dumps(evs[2], separators=(",", ":"))
    with open(os.path.join(OUT, "py-plain-0.bin"), "wb") as f:
        f.write(plain.encode("utf-8"))
    manifest.append({
        "file": "py-plain-0.bin",
        "partitionKey": partition_key(evs[2]),
        "explicitHashKey": None,
        "userRecords": [{"partitionKey": None, "explicitHashKey": None, "data": plain}],
    })
    with open(os.path.join(OUT, "python_records.json"), "w") as f:
        json.dump({"generator": "aws_kinesis_agg (tools/requirements.lock)", "records": manifest}, f, indent=1)
        f.write("\n")
    print("wrote %d records to %s" % (len(manifest), OUT))


if __name__ == "__main__":
    main()
