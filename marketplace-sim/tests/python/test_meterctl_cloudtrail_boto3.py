"""The simulator's CloudTrail checked with boto3, a client that shares no code with awsmp: every
BatchMeterUsage call is logged as the event AWS writes (docs/meterctl.md, "CloudTrail: what is
read, pacing, lag") and served by LookupEvents in CloudTrail's own protocol, paginated and
delayed by the configured delivery lag.

Run: `pytest marketplace-sim/tests/python` after `cargo build -p awsmp-marketplace-sim --bin marketplace-sim`.
"""

import json

import boto3
from botocore.config import Config

from test_sim_boto3 import ACCOUNT, L1, ca, sim  # noqa: F401  (sim is a fixture)

SOURCE = [{"AttributeKey": "EventSource", "AttributeValue": "metering-marketplace.amazonaws.com"}]


def cloudtrail(url):
    return boto3.client(
        "cloudtrail",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="awsmp-test",
        aws_secret_access_key="awsmp-test",
        config=Config(retries={"total_max_attempts": 4, "mode": "standard"}),
    )


def test_a_call_is_logged_in_the_documented_shape(sim):
    billed = sim.client.batch_meter_usage(UsageRecords=[ca(quantity=42)])["Results"][0]
    events = cloudtrail(sim.url).lookup_events(LookupAttributes=SOURCE, MaxResults=50)["Events"]
    assert len(events) == 1
    assert events[0]["EventName"] == "BatchMeterUsage"
    event = json.loads(events[0]["CloudTrailEvent"])
    assert event["eventSource"] == "metering-marketplace.amazonaws.com"
    assert event["eventTime"].endswith("Z")
    record = event["requestParameters"]["usageRecords"][0]
    assert record["licenseArn"] == L1 and record["customerAWSAccountID"] == ACCOUNT
    assert record["quantity"] == 42
    # "Apr 19, 2018 4:32:50 PM": month, day, year, 12-hour clock.
    month, day, year, clock, half = record["timestamp"].replace(",", "").split(" ")
    assert len(month) == 3 and half in ("AM", "PM") and clock.count(":") == 2
    result = event["responseElements"]["results"][0]
    assert result["status"] == "Success"
    assert result["meteringRecordId"] == billed["MeteringRecordId"]
    assert event["responseElements"]["unprocessedRecords"] == []


def test_lookup_events_pages_fifty_at_a_time(sim):
    for q in range(1, 61):
        sim.client.batch_meter_usage(UsageRecords=[ca(quantity=q)])
    pages = list(
        cloudtrail(sim.url).get_paginator("lookup_events").paginate(LookupAttributes=SOURCE, PaginationConfig={"PageSize": 50})
    )
    assert [len(p["Events"]) for p in pages] == [50, 10]
    ids = {e["EventId"] for p in pages for e in p["Events"]}
    assert len(ids) == 60


def test_events_wait_for_the_delivery_lag(sim):
    status, _ = sim.post("/_sim/cloudtrail", {"lagSeconds": 900})
    assert status == 200
    sim.client.batch_meter_usage(UsageRecords=[ca(quantity=1)])
    assert cloudtrail(sim.url).lookup_events(LookupAttributes=SOURCE)["Events"] == []
    status, _ = sim.post("/_sim/cloudtrail", {"lagSeconds": 0})
    assert len(cloudtrail(sim.url).lookup_events(LookupAttributes=SOURCE)["Events"]) == 1
    status, body = sim.post("/_sim/cloudtrail", {"lag": 1})
    assert status == 400, body
