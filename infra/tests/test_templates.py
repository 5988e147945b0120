"""The templates are what infra/generate.py writes, pass cfn-lint, match infra/resources.json
in both directions, and never let an always-present resource refer to a gated one."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys

import pytest

from stack_templates import INFRA, STACKS, load, refs, resources_json, sub_text, templates

DATA_TYPES = {
    "tables": "AWS::DynamoDB::Table",
    "queues": "AWS::SQS::Queue",
    "streams": "AWS::Kinesis::Stream",
    "buckets": "AWS::S3::Bucket",
}


def physical(local: str, stack: str) -> str:
    prefix = "awsmp-${StageName}" if stack == "events" else "awsmp-${StageName}-${ProductCode}"
    return prefix + local[len("awsmp") :]


def test_committed_templates_are_what_the_generator_writes():
    r = subprocess.run([sys.executable, str(INFRA / "generate.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def cfn_lint() -> list[str]:
    exe = shutil.which("cfn-lint", path=str(__import__("pathlib").Path(sys.executable).parent)) or shutil.which("cfn-lint")
    assert exe, "cfn-lint is pinned in tools/requirements.lock"
    return [exe]


def test_cfn_lint_is_clean_on_every_template():
    r = subprocess.run([*cfn_lint(), *(str(INFRA / f"{s}.yaml") for s in STACKS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_cfn_lint_catches_a_broken_template(tmp_path):
    t = load("events")
    t["Resources"]["SubscribersTable"]["Properties"]["BillingMode"] = "SOMETIMES"
    bad = tmp_path / "bad.yaml"
    bad.write_text(__import__("yaml").safe_dump(t), encoding="utf-8")
    r = subprocess.run([*cfn_lint(), str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "SOMETIMES" in r.stdout


def keys(schema: list, attrs: dict) -> dict:
    return {k["KeyType"]: (k["AttributeName"], attrs[k["AttributeName"]]) for k in schema}


def check_table(e: dict, res: dict) -> None:
    p = res["Properties"]
    assert sub_text(p["TableName"]) == physical(e["name"], e["stack"])
    assert res["DeletionPolicy"] == "Retain" and p["SSESpecification"] == {"SSEEnabled": True}
    attrs = {a["AttributeName"]: a["AttributeType"] for a in p["AttributeDefinitions"]}
    want = {"HASH": (e["hashKey"]["name"], e["hashKey"]["type"])}
    if "rangeKey" in e:
        want["RANGE"] = (e["rangeKey"]["name"], e["rangeKey"]["type"])
    assert keys(p["KeySchema"], attrs) == want
    gsis = {g["IndexName"]: g for g in p.get("GlobalSecondaryIndexes", [])}
    assert set(gsis) == {g["name"] for g in e["gsis"]}
    for g in e["gsis"]:
        t = gsis[g["name"]]
        gw = {"HASH": (g["hashKey"]["name"], g["hashKey"]["type"])}
        if "rangeKey" in g:
            gw["RANGE"] = (g["rangeKey"]["name"], g["rangeKey"]["type"])
        assert keys(t["KeySchema"], attrs) == gw, g["name"]
        assert t["Projection"]["ProjectionType"] == g["projection"]["type"]
        assert t["Projection"].get("NonKeyAttributes", []) == g["projection"].get("nonKeyAttributes", [])
    ttl = p.get("TimeToLiveSpecification")
    if "Fn::If" in (ttl or {}):
        ttl = ttl["Fn::If"][1]
    assert (ttl or {}).get("AttributeName") == e.get("ttlAttribute"), e["logicalId"]
    # Every attribute defined is a key of the table or an index (DynamoDB refuses others).
    assert set(attrs) == {n for n, _ in want.values()} | {k["AttributeName"] for g in gsis.values() for k in g["KeySchema"]}


def check_queue(e: dict, res: dict, template: dict) -> None:
    p = res["Properties"]
    assert sub_text(p["QueueName"]) == physical(e["name"], e["stack"])
    assert p["VisibilityTimeout"] == e["visibilityTimeoutSeconds"] and p["SqsManagedSseEnabled"] is True
    if "dlq" in e:
        dlq_id = p["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        dlq = template["Resources"][dlq_id]["Properties"]
        assert sub_text(dlq["QueueName"]) == physical(e["dlq"]["name"], e["stack"])
        assert p["RedrivePolicy"]["maxReceiveCount"] == e["dlq"]["maxReceiveCount"]
    else:
        assert "RedrivePolicy" not in p


def test_every_resources_json_entry_is_in_its_stack_as_defined():
    ts, rj = templates(), resources_json()
    for kind, rtype in DATA_TYPES.items():
        for e in rj[kind]:
            res = ts[e["stack"]]["Resources"].get(e["logicalId"])
            assert res and res["Type"] == rtype, f"{e['logicalId']} missing from {e['stack']}.yaml"
            if kind == "tables":
                check_table(e, res)
            elif kind == "queues":
                check_queue(e, res, ts[e["stack"]])
            elif kind == "streams":
                p = res["Properties"]
                assert sub_text(p["Name"]) == physical(e["name"], e["stack"])
                assert p["StreamEncryption"]["EncryptionType"] == "KMS"
            else:
                lock = res["Properties"]["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]
                assert lock == {"Mode": {"Ref": "ArchiveObjectLockMode"}, "Days": {"Ref": "ArchiveRetentionDays"}}
                declared = ts[e["stack"]]["Parameters"]
                assert declared["ArchiveObjectLockMode"]["Default"] == e["objectLock"]["mode"]
                assert declared["ArchiveRetentionDays"]["Default"] == e["objectLock"]["retentionDays"]
                assert res["Properties"]["VersioningConfiguration"]["Status"] == ("Enabled" if e["versioned"] else "Suspended")


def test_every_data_resource_of_a_template_is_in_resources_json():
    rj = resources_json()
    known = {(e["stack"], e["logicalId"]) for kind in DATA_TYPES for e in rj[kind]}
    dlqs = {
        (q["stack"], t)
        for q in rj["queues"]
        if "dlq" in q
        for t in [q["logicalId"].replace("Queue", "DeadLetterQueue")]
    }
    for stack, t in templates().items():
        for lid, res in t["Resources"].items():
            if res["Type"] in DATA_TYPES.values():
                assert (stack, lid) in known | dlqs, f"{stack}.yaml {lid} is not in infra/resources.json"


def test_data_resources_are_retained_and_log_groups_explicit():
    for stack, t in templates().items():
        for lid, res in t["Resources"].items():
            if res["Type"] in ("AWS::DynamoDB::Table", "AWS::Kinesis::Stream", "AWS::S3::Bucket", "AWS::Logs::LogGroup"):
                assert res.get("DeletionPolicy") == "Retain", f"{stack} {lid}"
            if res["Type"] == "AWS::Logs::LogGroup":
                assert res["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
                assert "KmsKeyId" in res["Properties"]
            if res["Type"] == "AWS::Serverless::Function":
                lg = res["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
                assert t["Resources"][lg]["Type"] == "AWS::Logs::LogGroup"


def gating_violations(template: dict) -> list[str]:
    res = template["Resources"]
    out = []
    for lid, r in res.items():
        own = r.get("Condition")
        depends = r.get("DependsOn", [])
        found = list(refs(r.get("Properties", {}))) + [(d, frozenset()) for d in ([depends] if isinstance(depends, str) else depends)]
        for target, guards in found:
            cond = res.get(target, {}).get("Condition")
            if cond and cond != own and cond not in guards:
                out.append(f"{lid} (condition {own}) refers to {target} (condition {cond})")
    for oid, o in template.get("Outputs", {}).items():
        for target, guards in refs(o.get("Value")):
            cond = res.get(target, {}).get("Condition")
            if cond and cond != o.get("Condition") and cond not in guards:
                out.append(f"output {oid} refers to {target} (condition {cond})")
    return out


@pytest.mark.parametrize("stack", STACKS)
def test_no_resource_refers_to_a_resource_gated_by_another_condition(stack):
    assert gating_violations(load(stack)) == []


def test_the_gating_check_catches_a_planted_reference():
    t = copy.deepcopy(load("main"))
    t["Resources"]["SubmitterFunction"]["Properties"]["Environment"]["Variables"]["AWSMP_USAGE_TABLE"] = {"Ref": "UsageTable"}
    assert gating_violations(t) == ["SubmitterFunction (condition None) refers to UsageTable (condition IsFull)"]


def test_direct_submit_gates_the_raw_pipeline_only():
    res = load("main")["Resources"]
    gated = {lid for lid, r in res.items() if r.get("Condition") == "IsFull"}
    for lid in ("UsageTable", "WorkQueue", "CleanupQueue", "DeprovisionWorkQueue", "DiscovererFunction", "AggregatorFunction", "CleanupFunction", "FlushDeprovisioningRule"):
        assert lid in gated
    for lid in ("AggregatedUsageTable", "CustomerProfileTable", "SubmitterFunction", "ExpiryFunction", "RegisterFunction", "SubmitDispatchRule"):
        assert lid not in gated


def test_stage_name_is_required_and_parameters_validated():
    for t in templates().values():
        p = t["Parameters"]
        assert "Default" not in p["StageName"] and p["StageName"]["AllowedPattern"]
        assert "DryRunNeedsTestAccounts" in t["Rules"]
    main = load("main")["Parameters"]
    assert (main["MeteringLockHours"]["MinValue"], main["MeteringLockHours"]["MaxValue"]) == (1, 20)
    assert main["ProductCode"]["AllowedPattern"] and "Default" not in main["ProductCode"]


def test_expiry_leaves_an_attempt_to_a_submitter_run_for_longer_than_the_run_can_last():
    """Expiry leaves an attempt marked less than ATTEMPT_IN_FLIGHT_SECS ago to the submitter run
    that marked it (pipeline/src/handlers/expiry.rs): that must outlast the submitter's Lambda
    timeout, or expiry could reconcile a call whose answer is on its way."""
    import re

    source = (INFRA.parent / "pipeline/src/handlers/expiry.rs").read_text(encoding="utf-8")
    m = re.search(r"pub const ATTEMPT_IN_FLIGHT_SECS: i64 = ([0-9 +]+);", source)
    assert m, "ATTEMPT_IN_FLIGHT_SECS in pipeline/src/handlers/expiry.rs"
    in_flight = sum(int(x) for x in m.group(1).split("+"))
    timeout = load("main")["Resources"]["SubmitterFunction"]["Properties"]["Timeout"]
    assert in_flight >= timeout + 60, (in_flight, timeout)
