"""The registration page in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`, which scripts/test installs when missing) driven through chromedriver's W3C
WebDriver HTTP API with the standard library only. The buyer subscribes through the Marketplace
simulator's admin API, AWS Marketplace's redirect is a form post carrying the token, the buyer
fills the page in and submits it; the expired-token page is shown for a token past its life.

Needs a running stack with its env file exported (scripts/test does both) and
`awsmp-local serve-register` (started here on a free 127.0.0.1 port).
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import boto3
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
LOCAL_BIN = os.environ.get("AWSMP_LOCAL_BIN", str(REPO_ROOT / "target" / "debug" / "awsmp-local"))
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"),
        reason="needs the local stack's env (awsmp-local up, then source its env file)",
    ),
    pytest.mark.skipif(
        not (CHROMEDRIVER and CHROMIUM),
        reason="needs chromium and chromium-driver (scripts/test installs them)",
    ),
]


def http_json(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """A chromedriver session: just the WebDriver commands this test needs."""

    def __init__(self):
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="awsmp-chromium-")
        self.driver = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self.port}", "--allowed-ips=127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                http_json("GET", f"{self.base}/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": CHROMIUM,
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={self.profile}"],
                    },
                }
            }
        }
        self.session = http_json("POST", f"{self.base}/session", caps)["value"]["sessionId"]
        self.url = f"{self.base}/session/{self.session}"

    def cmd(self, method, path, body=None):
        return http_json(method, f"{self.url}{path}", body)["value"]

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def find(self, css):
        element = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(element.values()))

    def type(self, css, text):
        self.cmd("POST", f"/element/{self.find(css)}/value", {"text": text})

    def click(self, css):
        self.cmd("POST", f"/element/{self.find(css)}/click", {})

    def run(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_for(self, css, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                return self.find(css)
            except urllib.error.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"{css} never appeared: {self.cmd('GET', '/source')[:500]}")

    def outcome(self):
        self.wait_for("#outcome")
        return self.run("return document.getElementById('outcome').dataset.outcome;")

    def close(self):
        try:
            http_json("DELETE", self.url)
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture
def browser():
    b = Browser()
    yield b
    b.close()


@pytest.fixture
def register_url():
    proc = subprocess.Popen([LOCAL_BIN, "serve-register", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    yield line.removeprefix("listening on ")
    proc.terminate()
    proc.wait(timeout=10)


def marketplace_redirect(browser, register_url, token):
    """What AWS Marketplace does: the buyer's browser posts the token to the fulfillment URL."""
    browser.go("about:blank")
    browser.run(
        """const f = document.createElement('form');
           f.method = 'POST'; f.action = arguments[0];
           const i = document.createElement('input');
           i.type = 'hidden'; i.name = 'x-amzn-marketplace-token'; i.value = arguments[1];
           f.appendChild(i); document.body.appendChild(f); f.submit();""",
        register_url,
        token,
    )


def subscribe(account):
    admin = os.environ["AWSMP_SIM_ADMIN_URL"]
    product = os.environ["AWSMP_PRODUCT_CODE"]
    return http_json("POST", f"{admin}/_sim/subscribe", {"productCode": product, "customerAWSAccountId": account})


def test_a_buyer_registers_through_the_page(browser, register_url):
    sub = subscribe("812345678901")
    marketplace_redirect(browser, register_url, sub["registrationToken"]["token"])
    browser.wait_for("#registration")
    browser.type("#companyName", "Acme Browsers")
    browser.type("#contactName", "Ada")
    browser.type("#contactEmail", "ada@acme.example")
    browser.type("#useCase", "Testing\nin a real browser")
    browser.click("#submit")
    assert browser.outcome() == "registered"
    # The PII went to the in-region profile table, the subscriber row got only the region.
    ddb = boto3.client("dynamodb")
    key = {"licenseArn": {"S": sub["licenseArn"]}, "customerAWSAccountId": {"S": "812345678901"}}
    profile = ddb.get_item(TableName=os.environ["AWSMP_CUSTOMER_PROFILE_TABLE"], Key=key, ConsistentRead=True)["Item"]
    data = profile["registrationData"]["M"]
    assert data["companyName"] == {"S": "Acme Browsers"}
    assert data["contactEmail"] == {"S": "ada@acme.example"}
    assert data["useCase"]["S"].replace("\r\n", "\n") == "Testing\nin a real browser"
    subscriber = ddb.get_item(TableName=os.environ["AWSMP_SUBSCRIBERS_TABLE"], Key=key, ConsistentRead=True)["Item"]
    assert subscriber["registeredRegions"] == {"SS": [os.environ["AWS_REGION"]]}
    assert not any(k in subscriber for k in ("registrationData", "companyName", "contactEmail"))


def test_an_expired_link_shows_what_to_do(browser, register_url):
    admin = os.environ["AWSMP_SIM_ADMIN_URL"]
    sub = subscribe("912345678901")
    token = http_json("POST", f"{admin}/_sim/tokens", {"licenseArn": sub["licenseArn"], "ttlSeconds": -1})["token"]
    marketplace_redirect(browser, register_url, token)
    assert browser.outcome() == "ExpiredToken"
    text = browser.run("return document.body.innerText;")
    assert "expired" in text.lower()
    assert "Set up your account" in text
