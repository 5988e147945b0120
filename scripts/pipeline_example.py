"""A seller's own writer, with boto3: seed the local usage table with conforming rows (and a
few that break the writer contract), tick the pipeline two hours later, and check what was
billed. Uses only boto3 and urllib — any DynamoDB client works.

    target/debug/awsmp-local down --wipe && target/debug/awsmp-local up
    set -a; . .awsmp-local/env; set +a
    AWSMP_LOCAL_BIN=target/debug/awsmp-local .awsmp-local/tools/venv/bin/python scripts/pipeline_example.py
"""

import datetime as dt
import json
import os
import random
import subprocess
import sys
import urllib.request
from collections import defaultdict

import boto3

LICENSES = 40
DIMENSIONS = ["api_calls", "storage_gb_hours", "compute_minutes"]
SECONDS_PER_GROUP = 30


def license_arn(i):
    return f"arn:aws:license-manager::123456789012:license:l-{0xA11CE000 + i:032x}"


def account(i):
    return f"{210_000_000_000 + i:012d}"


def main():
    env = os.environ
    ddb = boto3.client("dynamodb")
    table = env["AWSMP_USAGE_TABLE"]
    rng = random.Random(7)
    now = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    hour = now - dt.timedelta(hours=2)
    bucket = hour.strftime("%Y-%m-%dT%H")
    base = 0
    expected = defaultdict(int)
    written = 0
    for i in range(LICENSES):
        lic, acct = license_arn((base + i) % 200), account((base + i) % 200)
        for dim in DIMENSIONS:
            for s in rng.sample(range(3600), SECONDS_PER_GROUP):
                ts = (hour + dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%S")
                q = rng.randrange(0, 500)
                ddb.put_item(TableName=table, Item={
                    "licenseArn": {"S": lic},
                    "customerAWSAccountId_dimension_timestamp": {"S": f"{acct}#{dim}#{ts}"},
                    "customerAWSAccountId": {"S": acct}, "dimension": {"S": dim},
                    "timestamp": {"S": ts}, "quantity": {"N": str(q)},
                    "meteringPending": {"S": bucket},
                    "createdAt": {"S": now.isoformat()}, "updatedAt": {"S": now.isoformat()},
                })
                expected[(lic, acct, dim)] += q
                written += 1
    # Rows that break the writer contract: rejected client-side, never sent.
    bad_lic, bad_acct = license_arn(199), account(199)
    for dim, sk_ts, qty in [("api_calls", hour.strftime("%Y-%m-%dT%H:%M:%S") + ".000", "5"),
                            ("storage_gb_hours", hour.strftime("%Y-%m-%dT%H:%M:%S"), "2.5"),
                            ("compute_minutes", hour.strftime("%Y-%m-%dT%H:%M:%S"), "-3")]:
        ddb.put_item(TableName=table, Item={
            "licenseArn": {"S": bad_lic},
            "customerAWSAccountId_dimension_timestamp": {"S": f"{bad_acct}#{dim}#{sk_ts}"},
            "customerAWSAccountId": {"S": bad_acct}, "dimension": {"S": dim},
            "timestamp": {"S": sk_ts}, "quantity": {"N": qty}, "meteringPending": {"S": bucket},
        })
    print(f"wrote {written} conforming rows in {len(expected)} groups for hour {bucket}, plus 3 rows that break the contract")

    tick_at = (now + dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"awsmp-local tick --at {tick_at}")
    subprocess.run([env["AWSMP_LOCAL_BIN"], "tick", "--at", tick_at], check=True, stdout=subprocess.DEVNULL)

    with urllib.request.urlopen(env["AWSMP_SIM_ADMIN_URL"] + "/_sim/ledger") as r:
        ledger = json.load(r)
    billed = {(r["licenseArn"], r["customerAWSAccountId"], r["dimension"]): r["quantity"]
              for r in ledger["records"] if r["hour"] == bucket}
    statuses = defaultdict(int)
    for page in ddb.get_paginator("scan").paginate(TableName=table):
        for it in page["Items"]:
            if it["customerAWSAccountId_dimension_timestamp"]["S"].split("#")[-1].startswith(bucket):
                st = it.get("meteringStatus", {}).get("S", "pending")
                statuses[(st, it.get("meteringStatusReason", {}).get("S", "") if st != "Aggregated" else "")] += 1
    print("raw rows:", dict(statuses))
    missing = {k: v for k, v in expected.items() if billed.get(k) != v}
    print(f"billed {len(billed)} group-hours, {sum(billed.values())} units (written {sum(expected.values())})")
    if missing or any(k[0] == bad_lic for k in billed):
        print("MISMATCH:", missing)
        return 1
    print("verdict: every conforming unit billed exactly once; contract-breaking rows rejected with a reason")
    return 0


if __name__ == "__main__":
    sys.exit(main())
