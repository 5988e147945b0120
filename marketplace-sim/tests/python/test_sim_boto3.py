"""marketplace-sim checked with boto3, a client that shares no code with awsmp.

Run: `pytest marketplace-sim/tests/python` after `cargo build -p awsmp-marketplace-sim --bin marketplace-sim`
(or point MARKETPLACE_SIM_BIN at the binary).
"""

import json
import os
import subprocess
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

REPO_ROOT = Path(__file__).resolve().parents[3]
SIM_BIN = Path(os.environ.get("MARKETPLACE_SIM_BIN", REPO_ROOT / "target" / "debug" / "marketplace-sim"))

L1 = "arn:aws:license-manager::123456789012:license:l-11111111111111111111111111111111"
L2_ENDED = "arn:aws:license-manager::123456789012:license:l-22222222222222222222222222222222"
L3_OTHER_PRODUCT = "arn:aws:license-manager::123456789012:license:l-33333333333333333333333333333333"
ACCOUNT = "111111111111"
OTHER_ACCOUNT = "222222222222"


def _catalog() -> dict:
    now = datetime.now(timezone.utc)
    return {
        "windowHours": 24,
        "requestsPerSecond": 1000,
        "products": [
            {
                "productCode": "prod1",
                "dimensions": ["requests", "storage"],
                "licenses": [
                    {"licenseArn": L1, "customerAWSAccountId": ACCOUNT, "status": "active"},
                    {"licenseArn": L2_ENDED, "customerAWSAccountId": OTHER_ACCOUNT, "status": "ended"},
                ],
                "registrationTokens": [
                    {
                        "token": "tok-good",
                        "licenseArn": L1,
                        "customerAWSAccountId": ACCOUNT,
                        "expiresAt": (now + timedelta(hours=4)).isoformat(),
                    },
                    {
                        "token": "tok-expired",
                        "licenseArn": L1,
                        "customerAWSAccountId": ACCOUNT,
                        "expiresAt": (now - timedelta(minutes=1)).isoformat(),
                    },
                ],
            },
            {
                "productCode": "prod2",
                "dimensions": ["seats"],
                "licenses": [{"licenseArn": L3_OTHER_PRODUCT, "customerAWSAccountId": ACCOUNT, "status": "active"}],
            },
        ],
    }


def usage_hour_base() -> datetime:
    """30 minutes into the hour before last: every record built from it shares one known hour."""
    t = datetime.now(timezone.utc) - timedelta(hours=1)
    return t.replace(minute=30, second=0, microsecond=0)


class Sim:
    """A running simulator: a boto3 client (retries off) plus the admin API."""

    def __init__(self, url: str, proc: subprocess.Popen):
        self.url = url
        self.proc = proc
        self.client = boto3.client(
            "meteringmarketplace",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="awsmp-test",
            aws_secret_access_key="awsmp-test",
            config=Config(retries={"total_max_attempts": 1}),
        )

    def _admin(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def ledger(self) -> dict:
        status, body = self._admin("GET", "/_sim/ledger")
        assert status == 200, body
        return body

    def post(self, path: str, body: dict):
        return self._admin("POST", path, body)

    def faults(self, **faults):
        status, body = self.post("/_sim/faults", faults)
        assert status == 200, body


@pytest.fixture
def sim(tmp_path):
    if not SIM_BIN.is_file():
        pytest.fail(f"{SIM_BIN} not found: run `cargo build -p awsmp-marketplace-sim --bin marketplace-sim` or set MARKETPLACE_SIM_BIN")
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(_catalog()))
    proc = subprocess.Popen(
        [str(SIM_BIN), "--listen", "127.0.0.1:0", "--catalog", str(catalog)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), f"unexpected first line {line!r}"
        yield Sim(line.removeprefix("listening on "), proc)
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=10) == 0, "marketplace-sim exits cleanly on SIGTERM"
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()



def ca(license_arn=L1, dimension="requests", quantity=1, account=ACCOUNT, at=None):
    """A Concurrent-Agreements record. boto3 sends only the members given (no CustomerIdentifier)."""
    return {
        "Timestamp": at or usage_hour_base(),
        "Dimension": dimension,
        "Quantity": quantity,
        "CustomerAWSAccountId": account,
        "LicenseArn": license_arn,
    }


def error_of(excinfo):
    err = excinfo.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def test_identical_retry_is_success_with_the_same_metering_record_id(sim):
    rec = ca(quantity=42)
    first = sim.client.batch_meter_usage(UsageRecords=[rec])
    result = first["Results"][0]
    assert result["Status"] == "Success"
    assert result["UsageRecord"]["Quantity"] == 42
    assert result["UsageRecord"]["LicenseArn"] == L1
    assert result["UsageRecord"]["Timestamp"] == rec["Timestamp"]
    assert first["UnprocessedRecords"] == []

    again = sim.client.batch_meter_usage(UsageRecords=[rec])
    assert again["Results"][0]["Status"] == "Success"
    assert again["Results"][0]["MeteringRecordId"] == result["MeteringRecordId"]

    ledger = sim.ledger()
    assert len(ledger["records"]) == 1
    billed = ledger["records"][0]
    assert billed["quantity"] == 42
    assert billed["meteringRecordId"] == result["MeteringRecordId"]
    assert billed["hour"] == rec["Timestamp"].strftime("%Y-%m-%dT%H")
    assert ledger["counters"]["success"] == 1
    assert ledger["counters"]["identicalRetries"] == 1


def test_different_quantity_is_duplicate_record_and_the_first_stays_billed(sim):
    first = sim.client.batch_meter_usage(UsageRecords=[ca(quantity=10)])
    record_id = first["Results"][0]["MeteringRecordId"]
    later = ca(quantity=11, at=usage_hour_base() + timedelta(seconds=5))
    out = sim.client.batch_meter_usage(UsageRecords=[later])
    assert out["Results"][0]["Status"] == "DuplicateRecord"
    assert out["Results"][0]["MeteringRecordId"] == record_id

    ledger = sim.ledger()
    assert [r["quantity"] for r in ledger["records"]] == [10]
    dup = ledger["duplicates"][0]
    assert (dup["billedQuantity"], dup["attemptedQuantity"]) == (10, 11)
    assert dup["meteringRecordId"] == record_id


def test_unsubscribed_customers_get_customer_not_subscribed(sim):
    out = sim.client.batch_meter_usage(
        UsageRecords=[ca(L2_ENDED, account=OTHER_ACCOUNT), ca(L1, account=OTHER_ACCOUNT), ca(L1)]
    )
    statuses = [r["Status"] for r in out["Results"]]
    assert statuses == ["CustomerNotSubscribed", "CustomerNotSubscribed", "Success"]
    assert "MeteringRecordId" not in out["Results"][0]
    assert sim.ledger()["counters"]["customerNotSubscribed"] == 2


def test_customer_identifier_with_account_id_is_a_validation_exception(sim):
    rec = dict(ca(), CustomerIdentifier="")
    with pytest.raises(ClientError) as excinfo:
        sim.client.batch_meter_usage(UsageRecords=[rec])
    assert error_of(excinfo) == ("ValidationException", 400)
    assert "mutually exclusive" in excinfo.value.response["Error"]["Message"]
    assert sim.ledger()["records"] == []


def test_unknown_dimension_fails_the_whole_call(sim):
    with pytest.raises(sim.client.exceptions.InvalidUsageDimensionException):
        sim.client.batch_meter_usage(UsageRecords=[ca(), ca(dimension="Requests")])
    assert sim.ledger()["records"] == []


def test_timestamp_outside_the_window_fails_the_whole_call(sim):
    stale = ca(at=datetime.now(timezone.utc) - timedelta(hours=25))
    with pytest.raises(sim.client.exceptions.TimestampOutOfBoundsException):
        sim.client.batch_meter_usage(UsageRecords=[ca(), stale])
    future = ca(at=datetime.now(timezone.utc) + timedelta(minutes=10))
    with pytest.raises(sim.client.exceptions.TimestampOutOfBoundsException):
        sim.client.batch_meter_usage(UsageRecords=[future])
    assert sim.ledger()["records"] == []


def test_invalid_license(sim):
    with pytest.raises(sim.client.exceptions.InvalidLicenseException):
        sim.client.batch_meter_usage(UsageRecords=[ca("arn:aws:license-manager::123456789012:license:l-nothex")])
    with pytest.raises(sim.client.exceptions.InvalidLicenseException):
        sim.client.batch_meter_usage(UsageRecords=[ca(L1), ca(L3_OTHER_PRODUCT, dimension="seats")])


def test_more_than_25_records_is_a_validation_exception(sim):
    records = [ca(quantity=i) for i in range(26)]
    with pytest.raises(ClientError) as excinfo:
        sim.client.batch_meter_usage(UsageRecords=records)
    assert error_of(excinfo) == ("ValidationException", 400)
    # 25 is fine (one key, so the rest are retries or duplicates).
    out = sim.client.batch_meter_usage(UsageRecords=records[:25])
    assert len(out["Results"]) == 25


def test_allocation_rules(sim):
    with pytest.raises(sim.client.exceptions.InvalidUsageAllocationsException):
        sim.client.batch_meter_usage(
            UsageRecords=[dict(ca(quantity=5), UsageAllocations=[{"AllocatedUsageQuantity": 4, "Tags": [{"Key": "k", "Value": "v"}]}])]
        )
    ok = dict(ca(quantity=5), UsageAllocations=[{"AllocatedUsageQuantity": 5, "Tags": [{"Key": "k", "Value": "v"}]}])
    assert sim.client.batch_meter_usage(UsageRecords=[ok])["Results"][0]["Status"] == "Success"
    assert sim.ledger()["records"][0]["usageAllocations"] == ok["UsageAllocations"]


def test_throttling_fault(sim):
    sim.faults(throttleRate=1.0)
    with pytest.raises(sim.client.exceptions.ThrottlingException):
        sim.client.batch_meter_usage(UsageRecords=[ca()])
    assert sim.ledger()["counters"]["throttled"] == 1
    assert sim.ledger()["records"] == []


def test_unprocessed_fault(sim):
    sim.faults(unprocessedRate=1.0, seed=9)
    out = sim.client.batch_meter_usage(UsageRecords=[ca(quantity=3)])
    assert out["Results"] == []
    assert out["UnprocessedRecords"][0]["Quantity"] == 3
    assert sim.ledger()["records"] == []


def test_apply_then_fail_bills_although_the_caller_sees_a_500(sim):
    sim.faults(applyThenFailRate=1.0)
    with pytest.raises(sim.client.exceptions.InternalServiceErrorException) as excinfo:
        sim.client.batch_meter_usage(UsageRecords=[ca(quantity=9)])
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    ledger = sim.ledger()
    assert [r["quantity"] for r in ledger["records"]] == [9]
    assert ledger["counters"]["applyThenFail"] == 1
    sim.faults()
    retry = sim.client.batch_meter_usage(UsageRecords=[ca(quantity=9)])
    assert retry["Results"][0]["MeteringRecordId"] == ledger["records"][0]["meteringRecordId"]


def test_admin_clock_ledger_and_reset(sim):
    status, body = sim.post("/_sim/clock", {"now": "2026-06-15T12:30:00Z"})
    assert status == 200 and body == {"now": "2026-06-15T12:30:00.000Z", "fixed": True}
    at = datetime(2026, 6, 15, 12, 0, tzinfo=timezone.utc)
    out = sim.client.batch_meter_usage(UsageRecords=[ca(at=at, quantity=4)])
    assert out["Results"][0]["Status"] == "Success"
    with pytest.raises(sim.client.exceptions.TimestampOutOfBoundsException):
        sim.client.batch_meter_usage(UsageRecords=[ca()])  # real "an hour ago" is the sim's future
    ledger = sim.ledger()
    assert ledger["records"][0]["hour"] == "2026-06-15T12"
    assert ledger["records"][0]["firstSeen"] == "2026-06-15T12:30:00.000Z"
    assert ledger["counters"]["requestErrors"] == {"TimestampOutOfBoundsException": 1}

    status, body = sim.post("/_sim/clock", {"now": None})
    assert status == 200 and body["fixed"] is False
    assert sim.post("/_sim/clock", {"now": "not a time"})[0] == 400

    sim.faults(throttleRate=0.5)
    status, body = sim.post("/_sim/reset", {})
    assert status == 200
    assert body["records"] == [] and body["duplicates"] == []
    assert body["counters"]["requests"] == 0
    assert sim._admin("GET", "/_sim/faults")[1]["throttleRate"] == 0.0
    # Catalog survives the reset.
    assert sim.client.batch_meter_usage(UsageRecords=[ca()])["Results"][0]["Status"] == "Success"


def test_resolve_customer_outcomes(sim):
    out = sim.client.resolve_customer(RegistrationToken="tok-good")
    assert out["CustomerAWSAccountId"] == ACCOUNT
    assert out["LicenseArn"] == L1
    assert out["ProductCode"] == "prod1"
    assert "CustomerIdentifier" not in out
    with pytest.raises(sim.client.exceptions.ExpiredTokenException):
        sim.client.resolve_customer(RegistrationToken="tok-expired")
    with pytest.raises(sim.client.exceptions.InvalidTokenException):
        sim.client.resolve_customer(RegistrationToken="tok-unknown")
