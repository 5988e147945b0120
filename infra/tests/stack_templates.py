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


def load(stack: str, for_each: dict[str, list[str]] | None = None) -> dict:
    """A template with its `Fn::ForEach` loops expanded (AWS::LanguageExtensions), over the
    parameter's default list unless `for_each` gives one."""
    t = yaml.safe_load((INFRA / f"{stack}.yaml").read_text(encoding="utf-8"))
    for section in ("Resources", "Outputs"):
        if section in t:
            t[section] = expand(t[section], t.get("Parameters", {}), for_each or {})
    return t


def expand(section: dict, parameters: dict, for_each: dict[str, list[str]]) -> dict:
    out = {}
    for key, value in section.items():
        if not key.startswith("Fn::ForEach::"):
            out[key] = value
            continue
        ident, collection, fragment = value
        param = collection["Ref"]
        items = for_each.get(param) or str(parameters[param]["Default"]).split(",")
        for item in items:
            out.update(substitute(fragment, ident, item))
    return out


def substitute(node, ident: str, item: str):
    if isinstance(node, str):
        return node.replace("${" + ident + "}", item)
    if isinstance(node, list):
        return [substitute(v, ident, item) for v in node]
    if isinstance(node, dict):
        if node == {"Ref": ident}:
            return item
        if set(node) == {"Fn::Sub"} and isinstance(node["Fn::Sub"], str) and "${" not in node["Fn::Sub"].replace("${" + ident + "}", ""):
            return node["Fn::Sub"].replace("${" + ident + "}", item)
        return {substitute(k, ident, item): substitute(v, ident, item) for k, v in node.items()}
    return node


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
