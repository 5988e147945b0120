"""The Lambdas of the three stacks, built from `infra/stages.json`, the one list of them
(docs/adding-a-lambda.md).

Per stage the list gives its binary and crate, stack, memory, timeout, reserved concurrency,
condition, trigger, environment (variable names), grants and alarms. What each name means in
CloudFormation stays here and in the stack modules: a stack module's `environment(stage)` gives
the value of every variable it knows (its parameters and resources), `arn()` below reads a
grant's resource, and the trigger kinds (`schedule`, `sqs`, `kinesis`, `invoke`, `api`) are
built by the functions below.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from . import alarms as al
from .base import INFRA, NO_VALUE, get_att, if_, index_arn, own_index_arn, ref, sub, table_arn
from .functions import Function, kinesis_consume, schedule, sqs_consume, sqs_send, statement

STAGES_JSON = INFRA / "stages.json"

# Targets per EventBridge rule (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html):
# a schedule with more constant inputs is split over numbered rules.
MAX_TARGETS_PER_RULE = 5

# The region a stack's tables are in, seen from another stack: the events stack is in
# `EventsRegion` (us-east-1), the others beside the stack naming them.
STACK_REGION = {"events": "${EventsRegion}"}


def load() -> dict:
    return json.loads(STAGES_JSON.read_text(encoding="utf-8"))


def of_stack(stack: str) -> list[dict]:
    return [s for s in load()["stages"] if s["stack"] == stack]


def stem(name: str) -> str:
    """`deprovision-cleanup` → `DeprovisionCleanup`: names its resources."""
    return "".join(part.capitalize() for part in name.split("-"))


def function_id(name: str) -> str:
    return f"{stem(name)}Function"


def environment_names(stage: dict) -> list[str]:
    """The stage's variables, each group of the list's `environmentGroups` expanded in place."""
    groups = load()["environmentGroups"]
    out: list[str] = []
    for entry in stage["environment"]:
        out.extend(groups[entry] if entry in groups else [entry])
    return out


def arn(resource: str):
    """A grant's resource: `*`; a logical id of the stack (`UsageTable`); one of its table's
    indexes (`UsageTable/index/metering_pending`); a bucket's objects (`Bucket/*`); or a table
    of another stack by its local name (`events:awsmp-subscribers`, optionally `/index/<name>`)."""
    if resource == "*":
        return "*"
    if ":" in resource:
        stack, name = resource.split(":", 1)
        region = STACK_REGION.get(stack, "${AWS::Region}")
        if "/index/" in name:
            table, index = name.split("/index/")
            return index_arn(table, stack, index, region)
        return table_arn(name, stack, region)
    if "/index/" in resource:
        return own_index_arn(*resource.split("/index/"))
    if resource.endswith("/*"):
        return sub(f"${{{resource[:-2]}.Arn}}/*")
    return get_att(resource, "Arn")


def grant(g: dict):
    if "sqsConsume" in g:
        return sqs_consume(g["sqsConsume"])
    if "kinesisConsume" in g:
        return kinesis_consume(g["kinesisConsume"])
    if "sqsSend" in g:
        return sqs_send(*g["sqsSend"])
    s = statement(g["allow"], [arn(r) for r in g["on"]])
    return if_(g["if"], s, NO_VALUE) if "if" in g else s


def function(stage: dict, environment: Callable[[dict], dict]) -> Function:
    values = environment(stage)
    missing = [v for v in environment_names(stage) if v not in values]
    assert not missing, f"{stage['name']}: no value for {missing} in its stack module's environment()"
    return Function(
        stem(stage["name"]),
        stage["name"],
        stage["crate"],
        stage["description"],
        {v: values[v] for v in environment_names(stage)},
        [grant(g) for g in stage["grants"]],
        memory=stage["memory"],
        timeout=stage["timeout"],
        reserved=stage.get("reservedConcurrency"),
        condition=stage.get("condition"),
    )


def target_id(stage: dict, payload: dict | None) -> str:
    """`submitter` without an input; `meter-1`, `ageout-0`, `flush-deprovisioning` with one."""
    return stage["name"] if payload is None else "-".join(str(v) for v in payload.values())


def schedules(stages: list[dict]) -> dict:
    """Every `schedule` trigger of `stages`: a rule per list entry (stages naming one rule share
    it), split into numbered rules past EventBridge's targets per rule."""
    rules: dict[str, dict] = {}
    for stage in stages:
        for s in stage["trigger"].get("schedule", []):
            rule = rules.setdefault(s["rule"], {**s, "targets": [], "condition": stage.get("condition")})
            assert (rule["rate"], rule["description"], rule["condition"]) == (s["rate"], s["description"], stage.get("condition")), s
            for payload in s.get("inputs", [None]):
                rule["targets"].append((target_id(stage, payload), function_id(stage["name"]), payload))
    out: dict = {}
    for name, rule in rules.items():
        targets, cond = rule["targets"], rule["condition"]
        if len(targets) <= MAX_TARGETS_PER_RULE:
            out.update(schedule(f"{name}Rule", rule["rate"], rule["description"], targets, cond))
            continue
        for i in range(0, len(targets), MAX_TARGETS_PER_RULE):
            chunk = targets[i : i + MAX_TARGETS_PER_RULE]
            description = f"{rule['description']} {i + 1}-{i + len(chunk)}"
            out.update(schedule(f"{name}{i // MAX_TARGETS_PER_RULE + 1}Rule", rule["rate"], description, chunk, cond))
    return out


def _value(v):
    """A number as it is, a string as the parameter it names."""
    return ref(v) if isinstance(v, str) else v


def sqs_mappings(stage: dict) -> dict:
    """SQS event sources: per-message failures (`ReportBatchItemFailures`)."""
    cond = {"Condition": stage["condition"]} if stage.get("condition") else {}
    return {
        m["mapping"]: {
            "Type": "AWS::Lambda::EventSourceMapping",
            **cond,
            "Properties": {
                "EventSourceArn": get_att(m["queue"], "Arn"),
                "FunctionName": ref(function_id(stage["name"])),
                "BatchSize": m["batchSize"],
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
                "ScalingConfig": {"MaximumConcurrency": m["maximumConcurrency"]},
            },
        }
        for m in stage["trigger"].get("sqs", [])
    }


def kinesis_mapping(stage: dict) -> dict:
    """The stream's event source mapping: from the oldest record, no record ever discarded for
    age, a failing batch bisected, per-record failures reported, then the on-failure queue."""
    k = stage["trigger"]["kinesis"]
    return {
        k["mapping"]: {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "EventSourceArn": get_att(k["stream"], "Arn"),
                "FunctionName": ref(function_id(stage["name"])),
                "StartingPosition": "TRIM_HORIZON",
                "BatchSize": _value(k["batchSize"]),
                "MaximumBatchingWindowInSeconds": _value(k["batchWindowSeconds"]),
                "ParallelizationFactor": _value(k["parallelizationFactor"]),
                "MaximumRetryAttempts": _value(k["maximumRetryAttempts"]),
                "MaximumRecordAgeInSeconds": -1,
                "BisectBatchOnFunctionError": True,
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
                "DestinationConfig": {"OnFailure": {"Destination": get_att(k["onFailure"], "Arn")}},
            },
        }
    }


def alias_arn(name: str) -> dict:
    return {"Fn::GetAtt": [sub(f"{stem(name)}Alias${{Module}}"), "AliasArn"]}


def invoke_config(stage: dict) -> dict:
    """An async-invoked function's retries and on-failure queue, and with `aliasPerModule` one
    alias per module (`Fn::ForEach`, AWS::LanguageExtensions): a module invokes its own alias,
    and the handler attributes usage by the invoked, qualified ARN, never by the payload
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference-foreach.html).
    Each alias has the same on-failure destination as the function."""
    i, name, s = stage["trigger"]["invoke"], stage["name"], stem(stage["name"])
    on_failure = {"OnFailure": {"Destination": get_att(i["onFailure"], "Arn")}}
    out = {
        i["config"]: {
            "Type": "AWS::Lambda::EventInvokeConfig",
            "Properties": {
                "FunctionName": ref(function_id(name)),
                "Qualifier": "$LATEST",
                "MaximumRetryAttempts": i["maximumRetryAttempts"],
                "DestinationConfig": on_failure,
            },
        }
    }
    if "aliasPerModule" not in i:
        return out
    out[f"Fn::ForEach::{s}ModuleAliases"] = [
        "Module",
        ref(i["aliasPerModule"]),
        {
            f"{s}Alias${{Module}}": {
                "Type": "AWS::Lambda::Alias",
                "Properties": {"FunctionName": ref(function_id(name)), "FunctionVersion": "$LATEST", "Name": ref("Module")},
            },
            # What the module's own role attaches: invoke its alias, nothing else.
            f"{s}InvokePolicy${{Module}}": {
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {
                    "Description": sub(f"Invoke the awsmp {name} alias of module ${{Module}}, only it"),
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [statement(["lambda:InvokeFunction"], [alias_arn(name)])],
                    },
                },
            },
            f"{s}InvokeConfig${{Module}}": {
                "Type": "AWS::Lambda::EventInvokeConfig",
                "Properties": {
                    "FunctionName": ref(function_id(name)),
                    # The alias name out of its ARN (…:function:<name>:<alias>): the config
                    # then waits for the alias.
                    "Qualifier": {"Fn::Select": [7, {"Fn::Split": [":", alias_arn(name)]}]},
                    "MaximumRetryAttempts": i["maximumRetryAttempts"],
                    "DestinationConfig": on_failure,
                },
            },
        },
    ]
    return out


def triggers(stages: list[dict]) -> dict:
    """The schedules, then per stage its event source mappings and invoke configurations (an
    `api` trigger is the stack's API: `cfn/api.py`)."""
    out = schedules(stages)
    for stage in stages:
        t = stage["trigger"]
        out.update(sqs_mappings(stage))
        if "kinesis" in t:
            out.update(kinesis_mapping(stage))
        if "invoke" in t:
            out.update(invoke_config(stage))
    return out


ALARMS = {"errors": al.errors, "throttles": al.throttles}
ALARM_ID = {"errors": "Errors", "throttles": "Throttles", "didNotRun": "DidNotRun"}


def alarm_resources(stages: list[dict]) -> dict:
    """Each stage's own alarms, under its condition."""
    out = {}
    for stage in stages:
        fid, cond = function_id(stage["name"]), stage.get("condition")
        for a in stage["alarms"]:
            alarm_id = a.get("id", f"{stem(stage['name'])}{ALARM_ID[a['kind']]}Alarm")
            if a["kind"] == "didNotRun":
                out[alarm_id] = al.did_not_run(fid, a["what"], a["minutes"], cond)
            else:
                out[alarm_id] = ALARMS[a["kind"]](fid, a["what"], cond)
    return out


def health(stages: list[dict]) -> list[tuple[str, str]]:
    """`(label, function logical id)` of each stage, for the dashboards' Lambda widgets."""
    return [(s["name"], function_id(s["name"])) for s in stages]
