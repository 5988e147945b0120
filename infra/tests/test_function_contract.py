"""Each function's template agrees with its Rust binary in both directions.

Environment: the variables a function's template sets are exactly the `"AWSMP_…"` names its
configuration code reads (read here from the Rust sources, so a variable added to a config
module without its template entry fails, and so does a template entry nothing reads). Binaries
sharing a configuration (the pipeline's five, pipeline/src/config.rs; subscription and
deprovision-cleanup, lifecycle's `EventsConfig`) may leave unset an optional name only another
of them uses: UNSET lists each with its reason.

Grants: the role of each function listed in CALLS grants exactly the actions its adapters call
on each resource, and each SDK call named is in the adapter source given for it (the least
privilege test, infra/tests/test_least_privilege.py, proves no grant reaches beyond the
function's resources; this one proves none is missing and none is spare).
"""

from __future__ import annotations

import copy
import json
import re

import pytest

from stack_templates import INFRA, ROOT, functions, load, sub_text
from test_least_privilege import as_list, statements

LITERAL = re.compile(r'"(AWSMP_[A-Z0-9_]+)"')
CONST = re.compile(r'(?:pub\s+)?const\s+([A-Z0-9_]+)\s*:\s*&str\s*=\s*"([A-Z0-9_]+)"\s*;')
TOP_FN = re.compile(r"^(?:pub(?:\([a-z]+\))?\s+)?fn\s+([a-z0-9_]+)", re.M)

# Binary → (config source, the `impl` block its binary uses or None for the whole file): each
# stage's `config` in infra/stages.json.
ENV_SOURCES = {
    s["name"]: (s["config"]["source"], f"impl {s['config']['impl']}" if "impl" in s["config"] else None)
    for s in json.loads((INFRA / "stages.json").read_text(encoding="utf-8"))["stages"]
}

# (binary, optional name of its shared configuration it does not set): the reason.
FENCE = "only the discoverer's watermark fence names the stream (pipeline/src/handlers/discoverer.rs)"
UNSET = {
    **{(b, "AWSMP_USAGE_STREAM"): FENCE for b in ("aggregator", "cleanup", "submitter", "expiry")},
    ("deprovision-cleanup", "AWSMP_SUBSCRIPTION_DLQ_URL"): "only the subscription function dead-letters malformed events (lifecycle/src/bin/subscription.rs)",
}


def code(path: str) -> str:
    """The non-test code of a Rust source, without comments."""
    text = (ROOT / path).read_text(encoding="utf-8").split("#[cfg(test)]")[0]
    return re.sub(r"//[^\n]*", "", text)


def block(text: str, start: str) -> str:
    """From `start` to the closing brace at column 0."""
    i = text.index(start)
    return text[i : text.index("\n}", i) + 2]


def top_level_fns(text: str) -> dict[str, str]:
    return {m.group(1): text[m.start() : text.find("\n}", m.start()) + 2] for m in TOP_FN.finditer(text)}


def env_reads(binary: str) -> set[str]:
    """Every `"AWSMP_…"` the binary's configuration reads: literals and `const` names in its
    block and in the file's free functions it calls."""
    path, start = ENV_SOURCES[binary]
    text = code(path)
    consts = dict(CONST.findall(text))
    body = text if start is None else block(text, start)
    helpers = top_level_fns(text)
    seen: set[str] = set()
    todo = [body]
    while todo:
        part = todo.pop()
        for name, fn_body in helpers.items():
            if name not in seen and re.search(rf"\b{name}\(", part):
                seen.add(name)
                todo.append(fn_body)
        body += "".join(helpers[n] for n in seen)
    out = set(LITERAL.findall(body))
    out |= {v for k, v in consts.items() if v.startswith("AWSMP_") and re.search(rf"\b{k}\b", body.replace(f"const {k}", ""))}
    return out


def all_functions() -> list[tuple[str, str, dict]]:
    out = []
    for stack in ("events", "ingest", "main"):
        t = load(stack)
        for fid, fn in functions(t).items():
            out.append((stack, fid, fn))
    return out


def env_violations(fn: dict) -> list[str]:
    binary = fn["Metadata"]["BuildProperties"]["Binary"]
    reads = env_reads(binary)
    sets = set(fn["Properties"].get("Environment", {}).get("Variables", {}))
    out = [f"{binary}: sets {v}, which its configuration never reads" for v in sorted(sets - reads)]
    for v in sorted(reads - sets):
        if (binary, v) not in UNSET:
            out.append(f"{binary}: reads {v}, which its template function does not set")
    return out


def test_every_binary_of_the_templates_has_its_config_source():
    binaries = {fn["Metadata"]["BuildProperties"]["Binary"] for _, _, fn in all_functions()}
    assert binaries == set(ENV_SOURCES)


def test_every_unset_name_is_read_and_left_unset():
    by_binary = {fn["Metadata"]["BuildProperties"]["Binary"]: fn for _, _, fn in all_functions()}
    for binary, name in UNSET:
        assert name in env_reads(binary), (binary, name)
        assert name not in by_binary[binary]["Properties"]["Environment"]["Variables"], (binary, name)


def test_the_config_sources_are_read():
    assert {"AWSMP_SUBSCRIBERS_TABLE", "AWSMP_SUBSCRIPTION_DLQ_URL", "AWSMP_METRICS_NAMESPACE"} == env_reads("subscription")
    register = env_reads("register")
    assert {"AWSMP_CUSTOMER_PROFILE_TABLE", "AWSMP_SUBSCRIBERS_REGION", "AWSMP_RESOLVE_CUSTOMER_REGION"} <= register
    assert "AWSMP_SUBSCRIPTION_DLQ_URL" not in register
    assert {"AWSMP_INGEST_HELD_TABLE", "AWSMP_ALLOWED_ACCOUNTS", "AWSMP_ENVIRONMENT"} <= env_reads("meter-ingest")
    assert {"AWSMP_EVENTS_REGION", "AWSMP_SUBSCRIBERS_TABLE"} <= env_reads("submitter")


@pytest.mark.parametrize(("stack", "fid", "fn"), all_functions(), ids=[f for _, f, _ in all_functions()])
def test_each_function_sets_exactly_what_its_binary_reads(stack, fid, fn):
    assert env_violations(fn) == [], stack


def test_a_missing_or_spare_variable_is_caught():
    fn = copy.deepcopy(load("ingest")["Resources"]["MeterIngestFunction"])
    env = fn["Properties"]["Environment"]["Variables"]
    del env["AWSMP_INGEST_HELD_TABLE"]
    env["AWSMP_BILLING_ARCHIVE_BUCKET"] = {"Ref": "BillingArchiveBucket"}
    assert env_violations(fn) == [
        "meter-ingest: sets AWSMP_BILLING_ARCHIVE_BUCKET, which its configuration never reads",
        "meter-ingest: reads AWSMP_INGEST_HELD_TABLE, which its template function does not set",
    ]
    fn = copy.deepcopy(load("main")["Resources"]["SubmitterFunction"])
    del fn["Properties"]["Environment"]["Variables"]["AWSMP_EVENTS_REGION"]
    assert env_violations(fn) == ["submitter: reads AWSMP_EVENTS_REGION, which its template function does not set"]


# Function → {(resource, action): adapter source calling it, or None with Lambda's own use}.
# Resource keys: a logical id (`Fn::GetAtt [X, Arn]`), `X/index/i`, `X/*`, a physical-name
# template of another stack's table, or `*`.
SUBSCRIBERS = "lifecycle/src/adapters/dynamodb/subscribers.rs"
MAPPING = None  # granted for an event source mapping or an on-failure destination, not called
EVENTS_TABLE = "awsmp-${StageName}-subscribers"
CALLS = {
    ("events", "SubscriptionFunction"): {
        ("SubscribersTable", "dynamodb:UpdateItem"): SUBSCRIBERS,
        ("SubscribersTable", "dynamodb:GetItem"): SUBSCRIBERS,
        ("SubscribersTable/index/agreementId-index", "dynamodb:Query"): SUBSCRIBERS,
        ("SubscriptionEventsDeadLetterQueue", "sqs:SendMessage"): "lifecycle/src/adapters/sqs.rs",
        **{("SubscriptionEventsQueue", a): MAPPING for a in ("sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage")},
    },
    ("events", "DeprovisionCleanupFunction"): {
        ("SubscribersTable/index/deprovisioning-pending-index", "dynamodb:Query"): SUBSCRIBERS,
        ("SubscribersTable", "dynamodb:UpdateItem"): SUBSCRIBERS,
    },
    ("main", "RegisterFunction"): {
        ("CustomerProfileTable", "dynamodb:UpdateItem"): "lifecycle/src/adapters/dynamodb/profiles.rs",
        (EVENTS_TABLE, "dynamodb:UpdateItem"): SUBSCRIBERS,
        ("*", "aws-marketplace:ResolveCustomer"): "lifecycle/src/adapters/resolver.rs",
    },
    ("ingest", "MeterIngestFunction"): {
        ("IngestMappingTable", "dynamodb:GetItem"): "meter-ingest/src/adapters/dynamodb.rs",
        ("DedupTable", "dynamodb:PutItem"): "consumer/src/adapters/dedup_table.rs",
        ("DedupTable", "dynamodb:UpdateItem"): "meter-ingest/src/adapters/dynamodb.rs",
        ("IngestHeldTable", "dynamodb:PutItem"): "meter-ingest/src/adapters/dynamodb.rs",
        ("UsageStream", "kinesis:PutRecords"): "producer/src/sink/kinesis.rs",
        ("MeterIngestFailureQueue", "sqs:SendMessage"): MAPPING,
    },
    ("ingest", "KinesisConsumerFunction"): {
        ("awsmp-${StageName}-${ProductCode}-usage", "dynamodb:GetItem"): "consumer/src/adapters/dynamodb.rs",
        ("awsmp-${StageName}-${ProductCode}-usage", "dynamodb:UpdateItem"): "consumer/src/adapters/dynamodb.rs",
        ("awsmp-${StageName}-${ProductCode}-aggregated-usage", "dynamodb:BatchGetItem"): "consumer/src/adapters/dynamodb.rs",
        ("DedupTable", "dynamodb:GetItem"): "consumer/src/adapters/dedup_table.rs",
        ("DedupTable", "dynamodb:PutItem"): "consumer/src/adapters/dedup_table.rs",
        ("RejectedEventsTable", "dynamodb:PutItem"): "consumer/src/adapters/dynamodb.rs",
        ("IngestWatermarkTable", "dynamodb:UpdateItem"): "aws/src/watermark.rs",
        ("BillingArchiveBucket/*", "s3:PutObject"): "consumer/src/adapters/archive.rs",
        ("ConsumerFailureQueue", "sqs:SendMessage"): MAPPING,
        **{("UsageStream", a): MAPPING for a in ("kinesis:DescribeStream", "kinesis:DescribeStreamSummary", "kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:ListShards")},
    },
}


def resource_key(resource) -> str:
    if isinstance(resource, dict) and "Fn::GetAtt" in resource:
        return resource["Fn::GetAtt"][0]
    text = sub_text(resource)
    if text is None:
        return str(resource)
    m = re.fullmatch(r"\$\{([A-Za-z0-9]+)\.Arn\}(/.*)?", text)
    if m:
        return m.group(1) + (m.group(2) or "")
    m = re.fullmatch(r"arn:\$\{AWS::Partition\}:dynamodb:\$\{[A-Za-z:]+\}:\$\{AWS::AccountId\}:table/(.+)", text)
    return m.group(1) if m else text


def grants(template: dict, fid: str) -> set[tuple[str, str]]:
    """(resource key, action) of every Allow the role grants, but its own log group's."""
    res = template["Resources"]
    fn = res[fid]["Properties"]
    log_group = fn["LoggingConfig"]["LogGroup"]["Ref"]
    role = res[fn["Role"]["Fn::GetAtt"][0]]
    out = set()
    for st in statements(role):
        for action in as_list(st["Action"]):
            for resource in as_list(st["Resource"]):
                if resource_key(resource) != log_group:
                    out.add((resource_key(resource), action))
    return out


def sdk_method(action: str) -> str:
    """`dynamodb:BatchGetItem` → `.batch_get_item()`."""
    op = action.split(":", 1)[1]
    return "." + re.sub(r"(?<!^)([A-Z])", r"_\1", op).lower() + "()"


def grant_violations(template: dict, stack: str, fid: str) -> list[str]:
    want, have = set(CALLS[(stack, fid)]), grants(template, fid)
    return [f"{fid}: grants {a} on {r}, which it never calls" for r, a in sorted(have - want)] + [
        f"{fid}: calls {a} on {r}, which its role does not grant" for r, a in sorted(want - have)
    ]


@pytest.mark.parametrize(("stack", "fid"), sorted(CALLS))
def test_each_role_grants_exactly_the_calls_of_its_adapters(stack, fid):
    assert grant_violations(load(stack), stack, fid) == []


@pytest.mark.parametrize(("stack", "fid"), sorted(CALLS))
def test_each_declared_call_is_in_its_adapter(stack, fid):
    for (_, action), source in CALLS[(stack, fid)].items():
        if source is not None:
            assert sdk_method(action) in code(source), f"{fid}: {action} not in {source}"


def test_a_missing_or_spare_grant_is_caught():
    t = copy.deepcopy(load("events"))
    role = t["Resources"]["SubscriptionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    role[:] = [st for st in role if "dynamodb:Query" not in st["Action"]]
    role.append({"Effect": "Allow", "Action": ["dynamodb:PutItem"], "Resource": [{"Fn::GetAtt": ["SubscribersTable", "Arn"]}]})
    assert grant_violations(t, "events", "SubscriptionFunction") == [
        "SubscriptionFunction: grants dynamodb:PutItem on SubscribersTable, which it never calls",
        "SubscriptionFunction: calls dynamodb:Query on SubscribersTable/index/agreementId-index, which its role does not grant",
    ]
    assert sdk_method("dynamodb:BatchGetItem") == ".batch_get_item()"


def crate_binaries(crate: str) -> set[str]:
    """A crate's binaries: its `[[bin]]` names and the files of `src/bin/` (Cargo's auto-discovery)."""
    manifest = (ROOT / crate / "Cargo.toml").read_text(encoding="utf-8")
    named = set(re.findall(r'\[\[bin\]\]\s*name\s*=\s*"([a-z0-9-]+)"', manifest))
    return named | {p.stem for p in (ROOT / crate / "src/bin").glob("*.rs")}


# Binaries that are not Lambda functions: the operator CLI (docs/meterctl.md).
NOT_LAMBDAS = {"meterctl"}


def test_every_lambda_binary_is_deployed_from_its_crate():
    """scripts/build-lambdas builds what the templates name: no Lambda binary is left out."""
    deployed = {fn["Metadata"]["BuildProperties"]["Binary"]: fn["Properties"]["CodeUri"] for _, _, fn in all_functions()}
    for crate in ("pipeline", "consumer", "meter-ingest", "lifecycle"):
        for binary in crate_binaries(crate) - NOT_LAMBDAS:
            assert deployed.get(binary) == f"../{crate}", f"{crate}'s {binary} is not deployed from ../{crate}"
    assert {"subscription", "deprovision-cleanup", "register", "meter-ingest"} <= set(deployed)
