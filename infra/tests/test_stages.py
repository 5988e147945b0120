"""infra/stages.json, the one list of the Lambdas, and the committed templates agree in both
directions: every function of a template is a stage of that stack and every stage is a
function of its stack, with the list's binary, crate, description, memory, timeout, reserved
concurrency, condition and environment variables (in order); each stage's schedules (rate and
constant inputs), event source mappings, async-invoke configuration, API methods and alarms are
the template's, and the template has no other trigger or Lambda alarm for it.

Read from the YAML the generator wrote, not from the generator, so a template edited by hand or
a generator change that drops a field fails here."""

from __future__ import annotations

import json

import pytest

from stack_templates import INFRA, ROOT, STACKS, functions, load, sub_text

LIST = json.loads((INFRA / "stages.json").read_text(encoding="utf-8"))
STAGES = LIST["stages"]
ALARM_METRIC = {"errors": "Errors", "throttles": "Throttles", "didNotRun": "Invocations"}


def function_id(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("-")) + "Function"


def env_names(stage: dict) -> list[str]:
    groups = LIST["environmentGroups"]
    return [v for e in stage["environment"] for v in (groups[e] if e in groups else [e])]


def of_type(template: dict, kind: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def arn_of(value) -> str | None:
    """`{"Fn::GetAtt": [X, "Arn"]}` → X."""
    if isinstance(value, dict) and isinstance(value.get("Fn::GetAtt"), list) and value["Fn::GetAtt"][1] == "Arn":
        return value["Fn::GetAtt"][0]
    return None


def by_stage() -> list[tuple[dict, dict]]:
    templates = {s: load(s) for s in STACKS}
    return [(stage, templates[stage["stack"]]) for stage in STAGES]


def test_the_templates_have_exactly_the_listed_functions():
    for stack in STACKS:
        have = set(functions(load(stack)))
        want = {function_id(s["name"]) for s in STAGES if s["stack"] == stack}
        assert have == want, stack
    assert len({s["name"] for s in STAGES}) == len(STAGES), "stage names are unique"


@pytest.mark.parametrize(("stage", "template"), by_stage(), ids=[s["name"] for s in STAGES])
def test_each_function_is_configured_as_listed(stage: dict, template: dict):
    fn = template["Resources"][function_id(stage["name"])]
    props = fn["Properties"]
    assert fn["Metadata"]["BuildProperties"]["Binary"] == stage["name"]
    assert props["CodeUri"] == f"../{stage['crate']}"
    assert props["Description"] == stage["description"]
    assert (props["MemorySize"], props["Timeout"]) == (stage["memory"], stage["timeout"])
    assert props.get("ReservedConcurrentExecutions") == stage.get("reservedConcurrency")
    assert fn.get("Condition") == stage.get("condition")
    assert list(props["Environment"]["Variables"]) == env_names(stage)


@pytest.mark.parametrize(("stage", "template"), by_stage(), ids=[s["name"] for s in STAGES])
def test_each_function_has_exactly_its_listed_schedules(stage: dict, template: dict):
    fid = function_id(stage["name"])
    have = sorted(
        (rule["Properties"]["ScheduleExpression"], json.dumps(json.loads(t["Input"]) if "Input" in t else None), rule.get("Condition"))
        for rule in of_type(template, "AWS::Events::Rule").values()
        for t in rule["Properties"].get("Targets", [])
        if arn_of(t["Arn"]) == fid
    )
    want = sorted(
        (s["rate"], json.dumps(payload), stage.get("condition"))
        for s in stage["trigger"].get("schedule", [])
        for payload in s.get("inputs", [None])
    )
    assert have == want
    if want and "reservedConcurrency" in stage:
        # Rules on rate() keep their own phases, so every target may fire in the same minute.
        assert stage["reservedConcurrency"] >= len(want), "one reserved execution per schedule target"


@pytest.mark.parametrize(("stage", "template"), by_stage(), ids=[s["name"] for s in STAGES])
def test_each_function_has_exactly_its_listed_mappings(stage: dict, template: dict):
    fid = function_id(stage["name"])
    mine = {k: m["Properties"] for k, m in of_type(template, "AWS::Lambda::EventSourceMapping").items() if m["Properties"]["FunctionName"] == {"Ref": fid}}
    trigger = stage["trigger"]
    want = {m["mapping"]: (m["queue"], m["batchSize"], m["maximumConcurrency"]) for m in trigger.get("sqs", [])}
    if "kinesis" in trigger:
        k = trigger["kinesis"]
        want[k["mapping"]] = (k["stream"], {"Ref": k["batchSize"]}, None)
        assert arn_of(mine[k["mapping"]]["DestinationConfig"]["OnFailure"]["Destination"]) == k["onFailure"]
    have = {k: (arn_of(p["EventSourceArn"]), p["BatchSize"], p.get("ScalingConfig", {}).get("MaximumConcurrency")) for k, p in mine.items()}
    assert have == want


@pytest.mark.parametrize(("stage", "template"), by_stage(), ids=[s["name"] for s in STAGES])
def test_async_invoke_and_api_triggers_are_the_listed_ones(stage: dict, template: dict):
    fid = function_id(stage["name"])
    configs = [c["Properties"] for c in of_type(template, "AWS::Lambda::EventInvokeConfig").values() if c["Properties"]["FunctionName"] == {"Ref": fid}]
    aliases = [a for a in of_type(template, "AWS::Lambda::Alias").values() if a["Properties"]["FunctionName"] == {"Ref": fid}]
    invoke = stage["trigger"].get("invoke")
    if invoke is None:
        assert configs == [] and aliases == []
    else:
        # The function's own ($LATEST) and one per module alias (the parameter's default list).
        assert len(configs) == 1 + len(aliases) and (len(aliases) > 0) == ("aliasPerModule" in invoke)
        for c in configs:
            assert c["MaximumRetryAttempts"] == invoke["maximumRetryAttempts"]
            assert arn_of(c["DestinationConfig"]["OnFailure"]["Destination"]) == invoke["onFailure"]
    methods = sorted(
        m["Properties"]["HttpMethod"]
        for m in of_type(template, "AWS::ApiGateway::Method").values()
        if f"${{{fid}.Arn}}" in (sub_text(m["Properties"].get("Integration", {}).get("Uri")) or "")
    )
    api = stage["trigger"].get("api")
    assert methods == (sorted(api["methods"]) if api else [])
    if api:
        paths = [r["Properties"]["PathPart"] for r in of_type(template, "AWS::ApiGateway::Resource").values()]
        assert api["path"].lstrip("/") in paths


@pytest.mark.parametrize(("stage", "template"), by_stage(), ids=[s["name"] for s in STAGES])
def test_each_function_has_exactly_its_listed_lambda_alarms(stage: dict, template: dict):
    fid = function_id(stage["name"])
    have = sorted(
        (a["Properties"]["MetricName"], a.get("Condition"))
        for a in of_type(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Namespace") == "AWS/Lambda" and a["Properties"]["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": fid}}]
    )
    assert have == sorted((ALARM_METRIC[a["kind"]], stage.get("condition")) for a in stage["alarms"])


@pytest.mark.parametrize("stage", STAGES, ids=[s["name"] for s in STAGES])
def test_each_stage_has_its_binary_config_source_and_sample_event(stage: dict):
    assert (ROOT / stage["crate"] / "src" / "bin" / f"{stage['name']}.rs").is_file()
    assert (ROOT / stage["config"]["source"]).is_file()
    assert any((INFRA / "events").glob(f"{stage['name']}*.json")), f"no infra/events/{stage['name']}*.json"
    assert stage["clock"] in {"virtual", "wall"}
