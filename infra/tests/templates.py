"""Helpers of the template tests: load the committed templates and walk their intrinsic
functions (the generator writes them in long form, `{"Ref": …}`, `{"Fn::Sub": …}`, so a plain
YAML loader reads them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

INFRA = Path(__file__).resolve().parent.parent
ROOT = INFRA.parent
STACKS = ("events", "ingest", "main")
SUB_VAR = re.compile(r"\$\{([A-Za-z0-9:]+)(?:\.[A-Za-z]+)?\}")


def load(stack: str) -> dict:
    return yaml.safe_load((INFRA / f"{stack}.yaml").read_text(encoding="utf-8"))


def templates() -> dict[str, dict]:
    return {s: load(s) for s in STACKS}


def resources_json() -> dict:
    return json.loads((INFRA / "resources.json").read_text(encoding="utf-8"))


def sub_text(value) -> str | None:
    """The template string of a `Fn::Sub`, else None."""
    if isinstance(value, dict) and "Fn::Sub" in value:
        s = value["Fn::Sub"]
        return s[0] if isinstance(s, list) else s
    return None


def refs(node, guards: frozenset = frozenset()):
    """Yield `(logical id, guarding conditions)` of every reference in `node`: `Ref`,
    `Fn::GetAtt` and `${…}` in `Fn::Sub`. The first branch of `Fn::If [C, a, b]` is guarded by C."""
    if isinstance(node, dict):
        if "Ref" in node and isinstance(node["Ref"], str):
            yield node["Ref"], guards
            return
        if "Fn::GetAtt" in node:
            target = node["Fn::GetAtt"]
            yield (target[0] if isinstance(target, list) else target.split(".")[0]), guards
            return
        if "Fn::Sub" in node:
            s = node["Fn::Sub"]
            text, variables = (s[0], s[1]) if isinstance(s, list) else (s, {})
            for name in SUB_VAR.findall(text):
                if name not in variables:
                    yield name, guards
            yield from refs(variables, guards)
            return
        if "Fn::If" in node:
            cond, then, otherwise = node["Fn::If"]
            yield from refs(then, guards | {cond})
            yield from refs(otherwise, guards)
            return
        for v in node.values():
            yield from refs(v, guards)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v, guards)


def functions(template: dict) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == "AWS::Serverless::Function"}
