"""The hands-on end-to-end check, the way a seller runs it: write usage rows with boto3 (a client
that shares no code with awsmp) into the running local stack, run the pipeline's schedules with
`awsmp-local tick --at …`, then read back the raw rows, the aggregated record and the Marketplace
simulator's ledger.

Needs a running stack with its env file exported (scripts/test does both; by hand:
`awsmp-local up`, `set -a; . .awsmp-local/env; set +a`, and AWSMP_LOCAL_DIR if not the default).
Uses its own demo licenses and a year of its own (random per run, so a rerun on the same stack
starts fresh), so it never meets another test's rows.
"""

import json
import os
import random
import subprocess
import urllib.request
from pathlib import Path

import boto3
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
LOCAL_BIN = os.environ.get("AWSMP_LOCAL_BIN", str(REPO_ROOT / "target" / "debug" / "awsmp-local"))

pytestmark = pytest.mark.skipif(
    not os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"),
    reason="needs the local stack's env (awsmp-local up, then source its env file)",
)

DIMENSIONS = ["api_calls", "storage_gb_hours"]
YEAR = 2049 + 20 * random.randrange(350)
HOUR = f"{YEAR}-06-15T10"
TICK_AT = f"{YEAR}-06-15T12:05:00Z"


def license_arn(i):
    return f"arn:aws:license-manager::123456789012:license:l-{0xA11CE000 + i:032x}"


def account(i):
    return f"{210_000_000_000 + i:012d}"


def ledger():
    """The simulator's ledger, only this run's hour."""
    with urllib.request.urlopen(os.environ["AWSMP_SIM_ADMIN_URL"] + "/_sim/ledger") as r:
        whole = json.load(r)
    return {k: [x for x in whole[k] if x["hour"] == HOUR] for k in ("records", "duplicates")}


def put_row(ddb, lic, acct, dim, ts, quantity, allocations=None, sort_key=None):
    item = {
        "licenseArn": {"S": lic},
        "customerAWSAccountId_dimension_timestamp": {"S": sort_key or f"{acct}#{dim}#{ts}"},
        "customerAWSAccountId": {"S": acct},
        "dimension": {"S": dim},
        "timestamp": {"S": ts},
        "quantity": {"N": str(quantity)},
        "meteringPending": {"S": ts[:13]},
        "createdAt": {"S": ts + "Z"},
        "updatedAt": {"S": ts + "Z"},
    }
    if allocations is not None:
        item["usageAllocations"] = {"L": [
            {"M": {"AllocatedUsageQuantity": {"N": str(q)},
                   "Tags": {"L": [{"M": {"Key": {"S": k}, "Value": {"S": v}}} for k, v in tags]}}}
            for q, tags in allocations
        ]}
    ddb.put_item(TableName=os.environ["AWSMP_USAGE_TABLE"], Item=item)
    return item["customerAWSAccountId_dimension_timestamp"]["S"]


def raw_row(ddb, lic, sort_key):
    out = ddb.get_item(
        TableName=os.environ["AWSMP_USAGE_TABLE"],
        Key={"licenseArn": {"S": lic}, "customerAWSAccountId_dimension_timestamp": {"S": sort_key}},
        ConsistentRead=True,
    )
    return out["Item"]


def aggregated(ddb, lic, acct, dim):
    out = ddb.get_item(
        TableName=os.environ["AWSMP_AGGREGATED_USAGE_TABLE"],
        Key={"licenseArn": {"S": lic}, "account_dimension_hour": {"S": f"{acct}#{dim}#{HOUR}"}},
        ConsistentRead=True,
    )
    return out.get("Item")


def test_rows_written_with_boto3_are_aggregated_and_billed_once():
    ddb = boto3.client("dynamodb")
    lic, acct = license_arn(40), account(40)
    bad_lic, bad_acct = license_arn(41), account(41)

    # GIVEN conforming rows: one plain group, one with VMT allocations
    plain = [put_row(ddb, lic, acct, "api_calls", f"{HOUR}:{m:02d}:07", q)
             for m, q in [(0, 5), (17, 11), (59, 4)]]
    vmt = [
        put_row(ddb, lic, acct, "storage_gb_hours", f"{HOUR}:03:00", 7, [(4, [("team", "a")]), (3, [("team", "b")])]),
        put_row(ddb, lic, acct, "storage_gb_hours", f"{HOUR}:04:00", 2, [(2, [("team", "a")])]),
    ]
    # ... and a group a seller got wrong: a millisecond sort key
    bad = [
        put_row(ddb, bad_lic, bad_acct, "api_calls", f"{HOUR}:00:01", 3),
        put_row(ddb, bad_lic, bad_acct, "api_calls", f"{HOUR}:00:02", 3,
                sort_key=f"{bad_acct}#api_calls#{HOUR}:00:02.000"),
    ]

    # WHEN the pipeline's schedules run two hours later
    done = subprocess.run([LOCAL_BIN, "tick", "--at", TICK_AT], check=True, capture_output=True, text=True)
    report = json.loads(done.stdout)
    assert report.get("submitterError") is None, report

    # THEN the raw rows are Aggregated with the reference's reason text
    for sk in plain:
        row = raw_row(ddb, lic, sk)
        assert row["meteringStatus"]["S"] == "Aggregated"
        assert row["meteringStatusReason"]["S"] == "Aggregated total quantity 20 from 3 raw usage records"
        assert "meteringPending" not in row
    for sk in vmt:
        row = raw_row(ddb, lic, sk)
        assert row["meteringStatusReason"]["S"] == "Aggregated total quantity 9 from 2 raw usage records"
    # ... the contract-breaking group is rejected whole, with its reason, and not billed
    for sk in bad:
        row = raw_row(ddb, bad_lic, sk)
        assert row["meteringStatus"]["S"] == "RejectedClientSide"
        assert row["meteringStatusReason"]["S"] == "MalformedTimestamp"
    assert aggregated(ddb, bad_lic, bad_acct, "api_calls") is None
    assert "UsageRecordRejected[Reason=MalformedTimestamp]" in done.stderr

    # ... the aggregated records are Success and carry the ledger's MeteringRecordId
    billed = {(r["dimension"], r["hour"]): r for r in ledger()["records"] if r["licenseArn"] == lic}
    assert set(billed) == {(d, HOUR) for d in DIMENSIONS}
    assert billed[("api_calls", HOUR)]["quantity"] == 20
    assert billed[("storage_gb_hours", HOUR)]["quantity"] == 9
    allocs = {tuple((t["Key"], t["Value"]) for t in a["Tags"]): a["AllocatedUsageQuantity"]
              for a in billed[("storage_gb_hours", HOUR)]["usageAllocations"]}
    assert allocs == {(("team", "a"),): 6, (("team", "b"),): 3}
    for dim in DIMENSIONS:
        rec = aggregated(ddb, lic, acct, dim)
        assert rec["meteringStatus"]["S"] == "Success"
        assert rec["meteringRecordId"]["S"] == billed[(dim, HOUR)]["meteringRecordId"]
        assert "meteringPending" not in rec
    assert not [r for r in ledger()["records"] if r["licenseArn"] == bad_lic]

    # WHEN the schedules run again, THEN nothing is billed twice
    subprocess.run([LOCAL_BIN, "tick", "--at", f"{YEAR}-06-15T12:35:00Z"], check=True, capture_output=True)
    again = ledger()
    assert [r for r in again["records"] if r["licenseArn"] == lic] == list(billed.values())
    assert not [d for d in again["duplicates"] if d["licenseArn"] == lic]
