"""The lifecycle from outside the code, on a seller's real shape: two products in two regions
(`awsmp-local up --products 2 --regions us-east-1,eu-west-1`, a stack this test starts in a
temporary directory and stops). A buyer subscribes (the Marketplace simulator's admin API),
registers through the page in headless Chromium, uses the product in both regions (rows written
with boto3), is deprovisioned mid-hour, and every unit up to the window's close is billed
exactly once in each region's simulator ledger, while a second product's buyer is billed
normally and never deprovisioned. `awsmp-local tick --at` runs every site's schedules.

docs/local-stack.md ("Many products, many regions") and docs/lifecycle.md (the test plan).
"""

import json
import os
import shlex
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import boto3
import pytest

from test_registration_browser import CHROMEDRIVER, CHROMIUM, LOCAL_BIN, Browser, http_json, marketplace_redirect

US, EU = "us-east-1", "eu-west-1"
HOUR = "2031-03-04T10"

pytestmark = [
    pytest.mark.skipif(
        not (os.environ.get("AWSMP_LOCAL_TOOLS_DIR") and Path(LOCAL_BIN).is_file()),
        reason="needs the built awsmp-local and the installed emulators (scripts/test)",
    ),
    pytest.mark.skipif(
        not (CHROMEDRIVER and CHROMIUM),
        reason="needs chromium and chromium-driver (scripts/test installs them)",
    ),
]


def read_env(path):
    out = {}
    for line in Path(path).read_text().splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key] = shlex.split(value)[0] if value else ""
    return out


class MultiStack:
    """The stack: its directory, topology and every site's env file."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="awsmp-multi-")
        self.env = dict(os.environ, AWSMP_LOCAL_DIR=str(Path(self.dir.name) / "stack"))
        self.local("up", "--ephemeral", "--products", "2", "--regions", f"{US},{EU}")
        topology = json.loads((Path(self.env["AWSMP_LOCAL_DIR"]) / "topology.json").read_text())
        self.products = [s["productCode"] for s in topology["sites"] if s["region"] == US]
        self.sites = {(s["productCode"], s["region"]): read_env(s["envFile"]) for s in topology["sites"]}

    def local(self, *args):
        done = subprocess.run([LOCAL_BIN, *args], env=self.env, check=True, capture_output=True, text=True)
        return done.stdout

    def tick(self, at):
        report = json.loads(self.local("tick", "--at", at))
        for label, site in report["sites"].items():
            assert site.get("submitterError") is None, (label, site)
        return report

    def site(self, product, region):
        return self.sites[(product, region)]

    def client(self, service, product, region):
        site = self.site(product, region)
        return boto3.client(
            service,
            region_name=region,
            endpoint_url=site[f"AWS_ENDPOINT_URL_{service.upper()}"],
            aws_access_key_id="awsmp-local",
            aws_secret_access_key="awsmp-local",
        )

    def admin(self, region, path, body):
        return http_json("POST", self.site(self.products[0], region)["AWSMP_SIM_ADMIN_URL"] + path, body)

    def set_clocks(self, at):
        for region in (US, EU):
            self.admin(region, "/_sim/clock", {"now": at})

    def billed(self, region, license_arn):
        url = self.site(self.products[0], region)["AWSMP_SIM_ADMIN_URL"] + "/_sim/ledger"
        with urllib.request.urlopen(url) as r:
            ledger = json.load(r)
        assert ledger["duplicates"] == [], ledger["duplicates"]
        return [(x["hour"], x["quantity"]) for x in ledger["records"] if x["licenseArn"] == license_arn]

    def use(self, product, region, sub, minute, quantity):
        """One usage row, as the seller's code writes it (the row contract, docs/row-contract.md)."""
        acct, ts = sub["customerAWSAccountId"], f"{HOUR}:{minute:02d}:00"
        self.client("dynamodb", product, region).put_item(
            TableName=self.site(product, region)["AWSMP_USAGE_TABLE"],
            Item={
                "licenseArn": {"S": sub["licenseArn"]},
                "customerAWSAccountId_dimension_timestamp": {"S": f"{acct}#api_calls#{ts}"},
                "customerAWSAccountId": {"S": acct},
                "dimension": {"S": "api_calls"},
                "timestamp": {"S": ts},
                "quantity": {"N": str(quantity)},
                "meteringPending": {"S": HOUR},
                "createdAt": {"S": ts + "Z"},
                "updatedAt": {"S": ts + "Z"},
            },
        )

    def subscriber(self, sub):
        key = {"licenseArn": {"S": sub["licenseArn"]}, "customerAWSAccountId": {"S": sub["customerAWSAccountId"]}}
        ddb = self.client("dynamodb", self.products[0], US)
        table = self.site(self.products[0], US)["AWSMP_SUBSCRIBERS_TABLE"]
        return ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]

    def close(self):
        subprocess.run([LOCAL_BIN, "down", "--wipe"], env=self.env, capture_output=True)
        self.dir.cleanup()


@pytest.fixture
def stack():
    s = MultiStack()
    yield s
    s.close()


@pytest.fixture
def browser():
    b = Browser()
    yield b
    b.close()


def register_through_the_page(stack, browser, token):
    proc = subprocess.Popen([LOCAL_BIN, "serve-register", "--listen", "127.0.0.1:0"], env=stack.env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on "), line
        marketplace_redirect(browser, line.removeprefix("listening on "), token)
        browser.wait_for("#registration")
        browser.type("#companyName", "Two Regions Ltd")
        browser.type("#contactEmail", "ops@two-regions.example")
        browser.click("#submit")
        assert browser.outcome() == "registered"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_deprovisioned_mid_hour_in_two_regions_billed_once_each_other_product_unaffected(stack, browser):
    p1, p2 = stack.products
    # GIVEN buyer A subscribes to product 1 and buyer C to product 2, at 10:00:30.
    stack.set_clocks(f"{HOUR}:00:30Z")
    a = stack.admin(US, "/_sim/subscribe", {"productCode": p1, "customerAWSAccountId": "613245000001"})
    c = stack.admin(US, "/_sim/subscribe", {"productCode": p2, "customerAWSAccountId": "613245000002"})
    report = stack.tick(f"{HOUR}:01:00Z")
    assert report["lifecycleEvents"] == 4 and report["mirrored"] == 2, report
    # AND A registers through the page (the in-region profile table gets the fields).
    register_through_the_page(stack, browser, a["registrationToken"]["token"])
    assert stack.subscriber(a)["registeredRegions"] == {"SS": [US]}
    # AND both use their product in both regions from minute 1.
    for product, sub, quantities in ((p1, a, {US: 5, EU: 7}), (p2, c, {US: 3, EU: 4})):
        for region, q in quantities.items():
            stack.use(product, region, sub, 1, q)
    # WHEN AWS deprovisions A at 10:02:30, and A goes on using the product until minute 50.
    stack.set_clocks(f"{HOUR}:02:30Z")
    closes = stack.admin(US, "/_sim/deprovision", {"licenseArn": a["licenseArn"]})["windowClosesAt"]
    assert closes == "2031-03-04T11:02:30Z"
    report = stack.tick(f"{HOUR}:03:00Z")
    assert report["mirrored"] == 1, report
    assert stack.subscriber(a)["subscriptionStatus"] == {"S": "deprovisioning"}
    stack.use(p1, US, a, 50, 10)
    stack.use(p1, EU, a, 50, 20)
    # THEN before the window closes, A's units are billed once in each region: its own units.
    stack.tick(f"{HOUR}:55:30Z")
    assert stack.billed(US, a["licenseArn"]) == [(HOUR, 15)]
    assert stack.billed(EU, a["licenseArn"]) == [(HOUR, 27)]
    # AND after the hour's lock C is billed normally in each region, never deprovisioned,
    # while A is finalized inactive and billed nothing more.
    stack.tick("2031-03-04T12:00:30Z")
    assert stack.billed(US, c["licenseArn"]) == [(HOUR, 3)]
    assert stack.billed(EU, c["licenseArn"]) == [(HOUR, 4)]
    assert stack.billed(US, a["licenseArn"]) == [(HOUR, 15)]
    assert stack.billed(EU, a["licenseArn"]) == [(HOUR, 27)]
    assert stack.subscriber(a)["subscriptionStatus"] == {"S": "inactive"}
    assert stack.subscriber(c)["subscriptionStatus"] == {"S": "active"}
    assert "deprovisioningPendingFlag" not in stack.subscriber(c)
