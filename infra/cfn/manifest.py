"""`infra/functions.json`: every Lambda of the three templates as the template gives it, for hosts
that run the binaries outside CloudFormation (the local stack's Lambda host,
docs/local-stack.md, "Lambdas as processes").

It is read out of the built templates, never written by hand: per stack the parameters (their
defaults) and conditions, and per function its binary, timeout, memory, condition, environment
(intrinsics as the template has them), the schedules that target it (with each target's
constant input) and the event source mappings that feed it; per stack also its tables, queues,
streams and buckets with the physical name the template gives each (intrinsics as written) and
the local stack's name of it, so a host can tell which resource a name built by `Fn::Sub` in
another stack's environment means. The
host resolves the intrinsics against its own resources and parameter values.
"""

from __future__ import annotations

import json

from cfn.base import load_resources, local_name

FUNCTION = "AWS::Serverless::Function"

# The resource types a function's environment names, and the property holding the physical name.
NAMED = {
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::Kinesis::Stream": "Name",
    "AWS::S3::Bucket": "BucketName",
}


def _target_function(arn) -> str | None:
    """`{"Fn::GetAtt": [Fn, "Arn"]}` → `Fn`."""
    if isinstance(arn, dict) and isinstance(arn.get("Fn::GetAtt"), list):
        logical_id, attr = arn["Fn::GetAtt"]
        if attr == "Arn":
            return logical_id
    return None


def _schedules(resources: dict) -> dict[str, list]:
    out: dict[str, list] = {}
    for rule_id, rule in resources.items():
        props = rule.get("Properties", {})
        if rule["Type"] != "AWS::Events::Rule" or "ScheduleExpression" not in props:
            continue
        for target in props.get("Targets", []):
            function = _target_function(target.get("Arn"))
            if function is None:
                continue
            entry = {"rule": rule_id, "target": target["Id"], "expression": props["ScheduleExpression"]}
            if "Input" in target:
                entry["input"] = json.loads(target["Input"])
            if "Condition" in rule:
                entry["condition"] = rule["Condition"]
            out.setdefault(function, []).append(entry)
    return out


def _mappings(resources: dict) -> dict[str, list]:
    out: dict[str, list] = {}
    for mapping_id, mapping in resources.items():
        if mapping["Type"] != "AWS::Lambda::EventSourceMapping":
            continue
        props = mapping["Properties"]
        function = props["FunctionName"].get("Ref")
        source = _target_function(props["EventSourceArn"])
        entry = {"mapping": mapping_id, "source": source}
        for key in ("BatchSize", "FunctionResponseTypes", "MaximumBatchingWindowInSeconds"):
            if key in props:
                entry[key[0].lower() + key[1:]] = props[key]
        out.setdefault(function, []).append(entry)
    return out


def _local_names() -> dict[str, str]:
    """Logical id → local name, for the resources whose deployed name CloudFormation generates."""
    defs = load_resources()
    return {r["logicalId"]: r["name"] for kind in ("tables", "queues", "streams", "buckets") for r in defs[kind]}


def stack_manifest(template: dict) -> dict:
    # `Fn::ForEach::…` entries (the meter-ingest aliases) are not resources of their own here.
    resources = {k: v for k, v in template["Resources"].items() if isinstance(v, dict)}
    schedules, mappings = _schedules(resources), _mappings(resources)
    functions = []
    for logical_id, res in resources.items():
        if res["Type"] != FUNCTION:
            continue
        props = res["Properties"]
        functions.append(
            {
                "logicalId": logical_id,
                "binary": res["Metadata"]["BuildProperties"]["Binary"],
                "condition": res.get("Condition"),
                "timeout": props["Timeout"],
                "memory": props["MemorySize"],
                "environment": props.get("Environment", {}).get("Variables", {}),
                "schedules": schedules.get(logical_id, []),
                "mappings": mappings.get(logical_id, []),
            }
        )
    named = {}
    for logical_id, res in resources.items():
        if res["Type"] not in NAMED:
            continue
        name = res.get("Properties", {}).get(NAMED[res["Type"]])
        named[logical_id] = {
            "type": res["Type"],
            "name": name,
            # The local stack's name of it (infra/resources.json).
            "localName": local_name(name["Fn::Sub"]) if isinstance(name, dict) else _local_names()[logical_id],
        }
    return {
        "parameters": {name: p.get("Default") for name, p in template["Parameters"].items()},
        "conditions": template.get("Conditions", {}),
        "resources": named,
        "functions": functions,
    }


def render(templates: dict[str, dict]) -> str:
    body = {
        "_comment": "Generated by infra/generate.py from the templates (do not edit): every Lambda's "
        "environment, schedules and mappings, for the local Lambda host (docs/local-stack.md).",
        "stacks": {stack: stack_manifest(t) for stack, t in templates.items()},
    }
    return json.dumps(body, indent=2, sort_keys=False) + "\n"
