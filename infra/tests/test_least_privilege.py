"""Least privilege, proven: every function role of every template grants no wildcard action, no
`dynamodb:Scan`, and no resource beyond the function's own — the tables, indexes, queues,
streams, buckets and log group it is configured with (its environment variables, its event
source mapping, its on-failure destination, its log group). The few exceptions are listed in
EXCEPTIONS with their reason (docs/deploy.md, "IAM exceptions"); an unused exception fails too.
"""

from __future__ import annotations

import copy
import re

import pytest

from stack_templates import STACKS, functions, load, refs, resources_json, sub_text

EXCEPTIONS = [
    {
        "stack": "main",
        "function": "SubmitterFunction",
        "action": "aws-marketplace:BatchMeterUsage",
        "resource": "*",
        "reason": "BatchMeterUsage has no resource type: IAM accepts only `*`.",
        "url": "https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsmarketplacemeteringservice.html",
    },
    {
        "stack": "main",
        "function": "RegisterFunction",
        "action": "aws-marketplace:ResolveCustomer",
        "resource": "*",
        "reason": "ResolveCustomer has no resource type: IAM accepts only `*`.",
        "url": "https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsmarketplacemeteringservice.html",
    },
    {
        "stack": "ingest",
        "function": "KinesisConsumerFunction",
        "action": "s3:PutObject",
        "resource": {"Fn::Sub": "${BillingArchiveBucket.Arn}/*"},
        "reason": "Object ARNs name a key; `<its own bucket>/*` is the narrowest grant for keys it creates.",
        "url": "https://docs.aws.amazon.com/AmazonS3/latest/userguide/s3-arn-format.html",
    },
]

TABLE_ARN = re.compile(
    r"^arn:\$\{AWS::Partition\}:dynamodb:\$\{[A-Za-z:]+\}:\$\{AWS::AccountId\}:table/([^/]+)(?:/index/([^/]+))?$"
)


def statements(role: dict):
    for policy in role["Properties"].get("Policies", []):
        for st in policy["PolicyDocument"]["Statement"]:
            if isinstance(st, dict) and "Fn::If" in st:
                yield from (b for b in st["Fn::If"][1:] if b != {"Ref": "AWS::NoValue"})
            else:
                yield st


def as_list(v):
    return v if isinstance(v, list) else [v]


def owned(template: dict, fid: str) -> tuple[set[str], set[str]]:
    """(logical ids, physical-name templates) the function is configured with."""
    res = template["Resources"]
    fn = res[fid]["Properties"]
    ids = {t for t, _ in refs(fn.get("Environment", {}))} | {fn["LoggingConfig"]["LogGroup"]["Ref"]}
    names = set()
    for value in fn.get("Environment", {}).get("Variables", {}).values():
        for v in [value, *(value.get("Fn::If", [])[1:] if isinstance(value, dict) else [])]:
            text = sub_text(v)
            if text:
                m = TABLE_ARN.match(text)
                names.add(m.group(1) if m else text)
    for r in res.values():
        p = r.get("Properties", {})
        if r["Type"] in ("AWS::Lambda::EventSourceMapping", "AWS::Lambda::EventInvokeConfig") and p.get("FunctionName") == {"Ref": fid}:
            ids |= {t for t, _ in refs({k: p.get(k) for k in ("EventSourceArn", "DestinationConfig")})}
    return {i for i in ids if i in res}, names


def gsis_by_name() -> dict[str, set[str]]:
    """Physical-name template → its index names, from infra/resources.json."""
    out = {}
    for t in resources_json()["tables"]:
        prefix = "awsmp-${StageName}" if t["stack"] == "events" else "awsmp-${StageName}-${ProductCode}"
        out[prefix + t["name"][len("awsmp") :]] = {g["name"] for g in t["gsis"]}
    return out


def resource_is_own(resource, template: dict, ids: set[str], names: set[str]) -> bool:
    res = template["Resources"]
    if isinstance(resource, dict) and "Fn::GetAtt" in resource:
        target, attr = resource["Fn::GetAtt"]
        return target in ids and attr == "Arn"
    text = sub_text(resource)
    if text is None:
        return False
    m = re.fullmatch(r"\$\{([A-Za-z0-9]+)\.Arn\}/index/([A-Za-z0-9_.-]+)", text)
    if m:
        target, index = m.groups()
        gsis = res.get(target, {}).get("Properties", {}).get("GlobalSecondaryIndexes", [])
        return target in ids and index in {g["IndexName"] for g in gsis}
    m = TABLE_ARN.match(text)
    if m:
        table, index = m.groups()
        return table in names and (index is None or index in gsis_by_name().get(table, set()))
    return False


def violations(template: dict, stack: str, used: set[int] | None = None) -> list[str]:
    out = []
    for fid, fn in functions(template).items():
        role = template["Resources"][fn["Properties"]["Role"]["Fn::GetAtt"][0]]
        ids, names = owned(template, fid)
        for st in statements(role):
            if st.get("Effect") != "Allow":
                continue
            for action in as_list(st["Action"]):
                if "*" in action:
                    out.append(f"{fid}: wildcard action {action}")
                for resource in as_list(st["Resource"]):
                    exc = [i for i, e in enumerate(EXCEPTIONS) if (e["stack"], e["function"], e["action"], e["resource"]) == (stack, fid, action, resource)]
                    if exc:
                        if used is not None:
                            used.update(exc)
                        continue
                    if action.lower() == "dynamodb:scan":
                        out.append(f"{fid}: dynamodb:Scan on {resource}")
                    elif not resource_is_own(resource, template, ids, names):
                        out.append(f"{fid}: {action} on {resource}, not one of its own resources")
    return out


def test_no_role_is_wider_than_its_function_and_every_exception_is_needed():
    used: set[int] = set()
    for stack in STACKS:
        assert violations(load(stack), stack, used) == [], stack
    assert used == set(range(len(EXCEPTIONS))), "an exception no template needs: remove it"


def test_every_exception_has_a_reason_and_an_aws_page():
    for e in EXCEPTIONS:
        assert e["reason"] and e["url"].startswith("https://docs.aws.amazon.com/")


def planted(stack: str, fid: str, st: dict) -> list[str]:
    t = copy.deepcopy(load(stack))
    role = t["Resources"][t["Resources"][fid]["Properties"]["Role"]["Fn::GetAtt"][0]]
    role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"].append(st)
    return violations(t, stack)


@pytest.mark.parametrize(
    ("stack", "fid", "statement", "expected"),
    [
        ("main", "AggregatorFunction", {"Effect": "Allow", "Action": "dynamodb:*", "Resource": {"Fn::GetAtt": ["UsageTable", "Arn"]}}, "wildcard action dynamodb:*"),
        ("main", "SubmitterFunction", {"Effect": "Allow", "Action": "aws-marketplace:*", "Resource": "*"}, "wildcard action aws-marketplace:*"),
        ("main", "CleanupFunction", {"Effect": "Allow", "Action": "dynamodb:Scan", "Resource": {"Fn::GetAtt": ["UsageTable", "Arn"]}}, "dynamodb:Scan on"),
        ("main", "DiscovererFunction", {"Effect": "Allow", "Action": "dynamodb:Scan", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/awsmp-${StageName}-${ProductCode}-ingest-watermarks"}}, "dynamodb:Scan on"),
        ("ingest", "StreamHeartbeatFunction", {"Effect": "Allow", "Action": "dynamodb:Scan", "Resource": {"Fn::GetAtt": ["IngestWatermarkTable", "Arn"]}}, "dynamodb:Scan on"),
        ("main", "ExpiryFunction", {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": "*"}, "dynamodb:GetItem on *"),
        ("main", "ExpiryFunction", {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": {"Fn::GetAtt": ["CustomerProfileTable", "Arn"]}}, "not one of its own"),
        ("main", "RegisterFunction", {"Effect": "Allow", "Action": "dynamodb:Query", "Resource": {"Fn::Sub": "${CustomerProfileTable.Arn}/index/*"}}, "not one of its own"),
        ("events", "DeprovisionCleanupFunction", {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["SubscriptionEventsQueue", "Arn"]}}, "not one of its own"),
        ("ingest", "StreamHeartbeatFunction", {"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/awsmp-${StageName}-${ProductCode}-usage"}}, "not one of its own"),
    ],
)
def test_a_planted_grant_is_caught(stack, fid, statement, expected):
    found = planted(stack, fid, statement)
    assert found and expected in found[0] and all(f.startswith(fid) for f in found), found



def module_policy_violations(template: dict, modules: list[str]) -> list[str]:
    """Each module's invoke policy grants `lambda:InvokeFunction` on its own alias, nothing else."""
    out = []
    for m in modules:
        own = {"Fn::GetAtt": [f"MeterIngestAlias{m}", "AliasArn"]}
        policy = template["Resources"][f"MeterIngestInvokePolicy{m}"]["Properties"]["PolicyDocument"]
        for st in policy["Statement"]:
            for action in as_list(st["Action"]):
                for resource in as_list(st["Resource"]):
                    if (action, resource) != ("lambda:InvokeFunction", own):
                        out.append(f"{m}: {action} on {resource}")
    return out


MODULES = ["checkout", "search", "billing"]


def test_each_module_policy_invokes_only_its_own_alias():
    t = load("ingest", {"MeterIngestModules": MODULES})
    assert module_policy_violations(t, MODULES) == []
    assert {f"MeterIngestAlias{m}" for m in MODULES} <= set(t["Resources"])


def test_the_module_policy_check_catches_a_sibling_alias():
    t = load("ingest", {"MeterIngestModules": MODULES})
    st = t["Resources"]["MeterIngestInvokePolicycheckout"]["Properties"]["PolicyDocument"]["Statement"][0]
    st["Resource"].append({"Fn::GetAtt": ["MeterIngestAliassearch", "AliasArn"]})
    assert module_policy_violations(t, MODULES) == [
        "checkout: lambda:InvokeFunction on {'Fn::GetAtt': ['MeterIngestAliassearch', 'AliasArn']}"
    ]
