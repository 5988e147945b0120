"""`scripts/deploy` for real, every step, against an emulated account on 127.0.0.1
(`emulated_account.py`: moto with CloudFormation's transforms), for two regions: the checks before
the first deploy refuse an account that is not ready; then the plan's own `sam deploy` commands
process and upload every template and zip, the change sets are reviewed and executed, and every
stack reaches CREATE_COMPLETE; what the stacks made is read back and compared with
`infra/resources.json`; a second deploy changes nothing; a template change that would replace a
table is refused until it is named with `--allow-replace`.

The zips hold the host's debug build of each binary (`cargo build --workspace --bins`, which
scripts/test runs first; AWSMP_BIN_DIR names the directory); what is deployed is never run here."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import boto3
import pytest
import yaml

from stack_templates import INFRA, ROOT, resources_json

sys.path.insert(0, str(INFRA))
from deploy import plan as deploy_plan  # noqa: E402
from deploy import tools  # noqa: E402

REGIONS = ["us-east-1", "eu-west-1"]
STAGE, PRODUCT = "emu", "abc123xyz"
TOPIC = "arn:aws:sns:{region}:123456789012:awsmp-oncall"


@pytest.fixture(scope="module")
def account(tmp_path_factory):
    """The emulated account's endpoint, and the environment that points every AWS client at it."""
    python = tools.ensure()
    log = tmp_path_factory.mktemp("emulated-account") / "server.log"
    print(f"emulated account log: {log}")
    proc = subprocess.Popen([str(python), str(INFRA / "tests" / "emulated_account.py"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on http://127.0.0.1:"), line
    url = line.removeprefix("listening on ")
    sam_home = tmp_path_factory.mktemp("sam-home")
    # SAM checks PyPI for a newer version once a week: tell it it just did, so it stays on 127.0.0.1.
    (sam_home / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    # Only this account: the suite's own environment points AWS_ENDPOINT_URL_<SERVICE> at the local
    # stack, and a service-specific endpoint would win over AWS_ENDPOINT_URL.
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env = {**inherited, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "SAM_CLI_TELEMETRY": "0",
           "__SAM_CLI_APP_DIR": str(sam_home)}
    env.pop("AWS_PROFILE", None)
    yield {"url": url, "env": env}
    proc.terminate()
    proc.wait(timeout=30)


def client(account, service: str, region: str):
    return boto3.client(service, region_name=region, endpoint_url=account["url"],
                        aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture(scope="module")
def lambda_dir(tmp_path_factory) -> Path:
    """A `bootstrap.zip` of each binary the templates name, from the host's debug build."""
    bin_dir = Path(os.environ.get("AWSMP_BIN_DIR") or ROOT / "target" / "debug")
    out = tmp_path_factory.mktemp("lambda")
    names = {b for s in deploy_plan.STACKS for b in deploy_plan.binaries(yaml.safe_load((INFRA / f"{s}.yaml").read_text()))}
    for name in sorted(names):
        binary = bin_dir / name
        assert binary.is_file(), f"{binary} is missing: cargo build --workspace --bins (scripts/test does)"
        (out / name).mkdir()
        with zipfile.ZipFile(out / name / "bootstrap.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            z.write(binary, "bootstrap")
    return out


def deploy(account, lambda_dir: Path, *extra: str, regions=REGIONS) -> subprocess.CompletedProcess:
    args = ["--product-code", PRODUCT, "--regions", ",".join(regions), "--stage-name", STAGE, "--skip-build",
            "--lambda-dir", str(lambda_dir), "--artifact-bucket", "awsmp-artifacts-{region}", "--param", f"AlarmTopicArn={TOPIC}", *extra]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "deploy"), *args], capture_output=True, text=True, cwd=ROOT, env=account["env"])
    print(r.stdout[-4000:], r.stderr[-8000:])
    return r


def ran(r: subprocess.CompletedProcess) -> list[str]:
    return [line.removeprefix("deploy: running: ") for line in r.stderr.splitlines() if line.startswith("deploy: running: ")]


def stacks(account) -> dict[tuple[str, str], str]:
    out = {}
    for region in REGIONS:
        for s in client(account, "cloudformation", region).describe_stacks()["Stacks"]:
            out[s["StackName"], region] = s["StackStatus"]
    return out


def set_lambda_concurrency(account, unreserved: int) -> None:
    body = json.dumps({"AccountLimit": {"ConcurrentExecutions": unreserved, "UnreservedConcurrentExecutions": unreserved}}).encode()
    urllib.request.urlopen(urllib.request.Request(account["url"] + "/_emulated/lambda-account-settings", data=body, method="POST"))


def test_an_account_not_ready_for_the_first_deploy_is_refused_with_each_fix(account, lambda_dir):
    # GIVEN a fresh account: no API Gateway logging role, no alarm topic, a new account's concurrency
    set_lambda_concurrency(account, 10)
    r = deploy(account, lambda_dir)
    # THEN every check names its problem and fix, and nothing was deployed
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    for region in REGIONS:
        assert f"refused [apigw-cloudwatch-role] {region}" in out and "update-account" in out
        assert f"refused [alarm-topic] {region}: the alarm topic {TOPIC.format(region=region)} does not exist" in out
        assert f"refused [lambda-concurrency] {region}" in out and "Service Quotas" in out
    assert "6 check(s) refused the deploy" in out and "nothing was changed" in out and ran(r) == []
    assert stacks(account) == {}


def prepare(account) -> None:
    """What docs/deploy.md's first steps set up: the artifact buckets, the API Gateway logging
    role, the on-call topic, a raised concurrency quota."""
    set_lambda_concurrency(account, 1000)
    for region in REGIONS:
        kw = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        client(account, "s3", region).create_bucket(Bucket=f"awsmp-artifacts-{region}", **kw)
        client(account, "apigateway", region).update_account(
            patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": "arn:aws:iam::123456789012:role/apigw-logs"}])
        client(account, "sns", region).create_topic(Name="awsmp-oncall")


def test_the_first_deploy_runs_the_plans_commands_and_creates_every_stack_in_both_regions(account, lambda_dir):
    prepare(account)
    dry = deploy(account, lambda_dir, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)["steps"]
    r = deploy(account, lambda_dir)
    assert r.returncode == 0, r.stderr
    assert ran(r) == [shlex.join(s["command"]) for s in planned]
    order = [line.removeprefix("deploy: ").removesuffix(": CREATE_COMPLETE") for line in r.stderr.splitlines() if line.endswith(": CREATE_COMPLETE")]
    assert order == [f"{s['name']} in {s['region']}" for s in planned]
    assert stacks(account) == {
        ("awsmp-emu-events", "us-east-1"): "CREATE_COMPLETE",
        **{(f"awsmp-emu-{PRODUCT}-{k}", region): "CREATE_COMPLETE" for region in REGIONS for k in ("ingest", "metering")},
    }
    # every zip and template went through SAM's upload (SAM names an object by its content's MD5)
    for region in REGIONS:
        here = [s["stack"] for s in planned if s["region"] == region]
        templates = {s: yaml.safe_load((INFRA / f"{s}.yaml").read_text()) for s in here}
        want = {hashlib.md5((lambda_dir / b / "bootstrap.zip").read_bytes()).hexdigest() for t in templates.values() for b in deploy_plan.binaries(t)}
        keys = [o["Key"] for o in client(account, "s3", region).list_objects_v2(Bucket=f"awsmp-artifacts-{region}")["Contents"]]
        assert {k for k in keys if not k.endswith(".template")} == want
        assert len([k for k in keys if k.endswith(".template")]) == len(here)


def physical(name: str, stack: str) -> str:
    return ("awsmp-emu" if stack == "events" else f"awsmp-emu-{PRODUCT}") + name[len("awsmp") :]


def key_schema(schema: list[dict], attrs: list[dict]) -> dict:
    types = {a["AttributeName"]: a["AttributeType"] for a in attrs}
    return {k["KeyType"]: {"name": k["AttributeName"], "type": types[k["AttributeName"]]} for k in schema}


def test_what_the_stacks_made_is_what_resources_json_says(account):
    rj = resources_json()
    for region in REGIONS:
        mine = lambda e: e["stack"] != "events" or region == "us-east-1"  # noqa: E731
        ddb, sqs = client(account, "dynamodb", region), client(account, "sqs", region)
        for e in filter(mine, rj["tables"]):
            t = ddb.describe_table(TableName=physical(e["name"], e["stack"]))["Table"]
            want = {"HASH": e["hashKey"], **({"RANGE": e["rangeKey"]} if "rangeKey" in e else {})}
            assert key_schema(t["KeySchema"], t["AttributeDefinitions"]) == want, e["logicalId"]
            got = {g["IndexName"]: g for g in t.get("GlobalSecondaryIndexes", [])}
            assert set(got) == {g["name"] for g in e["gsis"]}, e["logicalId"]
            for g in e["gsis"]:
                idx = got[g["name"]]
                assert key_schema(idx["KeySchema"], t["AttributeDefinitions"]) == {"HASH": g["hashKey"], **({"RANGE": g["rangeKey"]} if "rangeKey" in g else {})}
                assert idx["Projection"]["ProjectionType"] == g["projection"]["type"]
                assert sorted(idx["Projection"].get("NonKeyAttributes", [])) == sorted(g["projection"].get("nonKeyAttributes", []))
        for e in filter(mine, rj["queues"]):
            url = sqs.get_queue_url(QueueName=physical(e["name"], e["stack"]))["QueueUrl"]
            a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            assert int(a["VisibilityTimeout"]) == e["visibilityTimeoutSeconds"], e["logicalId"]
            if "dlq" in e:
                redrive = json.loads(a["RedrivePolicy"])
                assert redrive["deadLetterTargetArn"].endswith(":" + physical(e["dlq"]["name"], e["stack"]))
                assert int(redrive["maxReceiveCount"]) == e["dlq"]["maxReceiveCount"]
            else:
                assert "RedrivePolicy" not in a
        for e in rj["streams"]:
            s = client(account, "kinesis", region).describe_stream_summary(StreamName=physical(e["name"], e["stack"]))
            assert s["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE"
        buckets = {b["Name"] for b in client(account, "s3", region).list_buckets()["Buckets"]}
        for e in rj["buckets"]:
            # no BucketName in the template: CloudFormation names it after the stack and logical id
            assert [b for b in buckets if b.startswith(f"awsmp-emu-{PRODUCT}-ingest-{e['logicalId'].lower()}-")], buckets
        cf = client(account, "cloudformation", region)
        fn = cf.describe_stack_resource(StackName=f"awsmp-emu-{PRODUCT}-ingest", LogicalResourceId="MeterIngestFunction")
        name = fn["StackResourceDetail"]["PhysicalResourceId"]
        aliases = client(account, "lambda", region).list_aliases(FunctionName=name)["Aliases"]
        assert [a["Name"] for a in aliases] == ["default"]  # one per MeterIngestModules entry


def test_a_second_deploy_of_the_same_version_changes_nothing(account, lambda_dir):
    before = {k: client(account, "cloudformation", k[1]).describe_stack_events(StackName=k[0])["StackEvents"] for k in stacks(account)}
    r = deploy(account, lambda_dir)
    assert r.returncode == 0, r.stderr
    assert len(ran(r)) == 5
    assert r.stderr.count(": no changes") == 5, r.stderr
    after = {k: client(account, "cloudformation", k[1]).describe_stack_events(StackName=k[0])["StackEvents"] for k in stacks(account)}
    assert [len(v) for v in after.values()] == [len(v) for v in before.values()]


def changed_templates(tmp_path: Path, rename_table: bool) -> Path:
    """The committed templates, with the rejected-events table renamed (CloudFormation replaces a
    table whose name changes) and the consumer given more memory (an in-place update)."""
    out = tmp_path / "templates"
    out.mkdir(parents=True)
    for s in deploy_plan.STACKS:
        shutil.copy(INFRA / f"{s}.yaml", out / f"{s}.yaml")
    t = yaml.safe_load((out / "ingest.yaml").read_text())
    t["Resources"]["KinesisConsumerFunction"]["Properties"]["MemorySize"] += 128
    if rename_table:
        name = t["Resources"]["RejectedEventsTable"]["Properties"]["TableName"]
        name["Fn::Sub"] += "-v2"
    (out / "ingest.yaml").write_text(yaml.safe_dump(t, sort_keys=False))
    return out


def test_a_change_that_would_replace_a_table_is_refused_until_named(account, lambda_dir, tmp_path):
    table = physical("awsmp-rejected-events", "ingest")
    ddb = client(account, "dynamodb", "us-east-1")
    assert ddb.describe_table(TableName=table)["Table"]["TableStatus"] == "ACTIVE"
    one = ("--skip-events",)
    r = deploy(account, lambda_dir, "--templates", str(changed_templates(tmp_path / "a", True)), *one, regions=["us-east-1"])
    assert r.returncode == 2
    assert "RejectedEventsTable (AWS::DynamoDB::Table) would be replaced" in r.stderr
    assert "--allow-replace RejectedEventsTable" in r.stderr
    assert "Modify  KinesisConsumerFunction" in r.stderr  # the change set was shown whole
    cf = client(account, "cloudformation", "us-east-1")
    assert not [c for c in cf.list_change_sets(StackName=f"awsmp-emu-{PRODUCT}-ingest")["Summaries"]
                if c["StackName"] == f"awsmp-emu-{PRODUCT}-ingest" and c["ExecutionStatus"] == "AVAILABLE"]
    assert table in ddb.list_tables()["TableNames"] and table + "-v2" not in ddb.list_tables()["TableNames"]
    # an in-place change alone goes through without a flag
    r = deploy(account, lambda_dir, "--templates", str(changed_templates(tmp_path / "b", False)), *one, regions=["us-east-1"])
    assert r.returncode == 0, r.stderr
    assert f"awsmp-emu-{PRODUCT}-ingest in us-east-1: UPDATE_COMPLETE" in r.stderr
    # and the replacement, once named, runs
    r = deploy(account, lambda_dir, "--templates", str(changed_templates(tmp_path / "c", True)), *one, "--allow-replace", "RejectedEventsTable", regions=["us-east-1"])
    assert r.returncode == 0, r.stderr
    # (moto updates the table in place rather than making the renamed one: the stack is what says it ran)
    assert "Modify  RejectedEventsTable (AWS::DynamoDB::Table)" in r.stderr
    assert f"awsmp-emu-{PRODUCT}-ingest in us-east-1: UPDATE_COMPLETE" in r.stderr


def test_the_ingest_stack_without_language_extensions_crashes_inside_sam(account, lambda_dir):
    """The old command: SAM cannot read `Fn::ForEach` unless told `--language-extensions`."""
    dry = deploy(account, lambda_dir, "--dry-run", "--json")
    ingest = next(s for s in json.loads(dry.stdout)["steps"] if s["stack"] == "ingest")
    assert "--language-extensions" in ingest["command"]
    old = [a for a in ingest["command"] if a != "--language-extensions"]
    r = subprocess.run(old, capture_output=True, text=True, cwd=ROOT, env={**account["env"], "PATH": tools.bin_path()})
    assert r.returncode != 0 and "'list' object has no attribute 'get'" in r.stdout + r.stderr
