"""Every alarm and every dashboard widget of the templates reads a metric that exists.

Our metrics (a namespace some function of the templates is configured with,
`AWSMP_METRICS_NAMESPACE`) must be among the EMF lines the code emits on real paths: the
collector `awsmp-emf-collect` (simulation/src/bin/awsmp-emf-collect/) runs the deterministic
simulation's sweep and drives the rare paths, and writes every distinct metric it saw with its
dimension names and values. A read matches when the name, the exact set of dimension names and
every dimension value the template fixes agree; its `Service` must be a function configured
with the read's namespace. AWS-vended metrics are checked against the documented table
(aws_vended_metrics.py) instead, and each dashboard body against CloudWatch's documented
structure (dashboard_body.py). docs/operations.md, "Metrics the alarms read"."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aws_vended_metrics import vended_problem
from dashboard_body import metric_lines, problems
from stack_templates import ROOT, STACKS, load, sub_text

COLLECTOR = "awsmp-emf-collect"


@dataclass
class Read:
    """One metric an alarm or a widget reads: `dims` maps each dimension name to the value the
    template fixes (None: any value, e.g. a `${Resource}`); `not_equal` the values a
    Metrics Insights `!=` excludes."""

    where: str
    namespace: str
    name: str
    dims: dict[str, str | None]
    exact: bool = True
    not_equal: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        dims = ", ".join(f"{k}={v if v is not None else '*'}" for k, v in sorted(self.dims.items()))
        ne = "".join(f", {k}!={v}" for k, v in self.not_equal.items())
        return f"{self.namespace} {self.name} {{{dims}{ne}}}"


# ---- the collector -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def emitted(tmp_path_factory) -> list[dict]:
    """Run the collector: the one scripts/test built (`AWSMP_BIN_DIR`), else built here."""
    bin_dir = os.environ.get("AWSMP_BIN_DIR")
    if bin_dir:
        binary = Path(bin_dir) / COLLECTOR
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
        subprocess.run(["cargo", "build", "--quiet", "-p", "awsmp-simulation", "--bin", COLLECTOR], cwd=ROOT, check=True)
        binary = target.resolve() / "debug" / COLLECTOR
    out = tmp_path_factory.mktemp("emf") / "emitted.json"
    subprocess.run([str(binary), "--out", str(out)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["lines"] > 0 and doc["metrics"], "the collector saw no EMF line"
    return doc["metrics"]


# ---- what the templates read ---------------------------------------------------------------

# Metrics Insights (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-metrics-insights-querylanguage.html):
# SELECT FUNCTION(metric) FROM namespace | SCHEMA(namespace[, key...]) [WHERE ...] [GROUP BY ...]
# [ORDER BY ...] [LIMIT n]. SCHEMA with keys selects the metrics with exactly those dimensions.
INSIGHTS = re.compile(
    r'^SELECT\s+(?:AVG|COUNT|MAX|MIN|SUM)\((?P<metric>\w+|"[^"]+")\)\s+FROM\s+'
    r'(?:SCHEMA\((?P<schema>"[^"]+"|[\w/.-]+)(?P<keys>(?:\s*,\s*\w+)*)\)|(?P<ns>"[^"]+"|[\w/.-]+))'
    r'(?:\s+WHERE\s+(?P<where>.+?))?(?:\s+GROUP BY\s+(?P<group>[\w\s,]+?))?'
    r'(?:\s+ORDER BY\s+\w+\(\)(?:\s+(?:ASC|DESC))?)?(?:\s+LIMIT\s+\d+)?$'
)
CONDITION = re.compile(r"^(\w+)\s*(=|!=)\s*'([^']*)'$")
# SEARCH('{namespace,dim,...} MetricName="X" ...', 'Stat', period)
# (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/search-expression-syntax.html).
SEARCH = re.compile(r"SEARCH\(\s*'\{(?P<schema>.*?)\}\s+(?P<terms>[^']*)'")
TERM = re.compile(r'(\w+)\s*=\s*"?([^"\s]+)"?')
# Metric math: an identifier starting with a lowercase letter is the id of another query.
MATH_ID = re.compile(r"\b[a-z][A-Za-z0-9_]*\b")


def unquote(s: str) -> str:
    return s[1:-1] if s.startswith('"') and s.endswith('"') else s


def from_insights(q: str, where: str) -> Read:
    m = INSIGHTS.match(q.strip())
    assert m, f"{where}: a Metrics Insights query this check cannot read (extend it): {q}"
    keys = [k.strip() for k in (m["keys"] or "").split(",") if k.strip()]
    read = Read(where, unquote(m["schema"] or m["ns"]), unquote(m["metric"]), {k: None for k in keys}, exact=bool(m["schema"]))
    for cond in re.split(r"\s+AND\s+", m["where"] or "") if m["where"] else []:
        c = CONDITION.match(cond.strip())
        assert c, f"{where}: a WHERE condition this check cannot read: {cond}"
        key, op, value = c.groups()
        assert not read.exact or key in read.dims, f"{where}: WHERE {key} is not a dimension of the schema {keys}"
        if op == "=":
            read.dims[key] = value
        else:
            read.not_equal[key] = value
    for key in [k.strip() for k in (m["group"] or "").split(",") if k.strip()]:
        assert key in read.dims, f"{where}: GROUP BY {key} is not a dimension of the schema {keys}"
    return read


def from_expression(expr: str, ids: set[str], where: str) -> list[Read]:
    if expr.lstrip().upper().startswith("SELECT"):
        return [from_insights(expr, where)]
    reads = []
    for s in SEARCH.finditer(expr):
        parts = [unquote(p.strip()) for p in s["schema"].split(",")]
        terms = dict(TERM.findall(s["terms"]))
        assert "MetricName" in terms, f"{where}: a SEARCH without MetricName: {expr}"
        dims = {k: terms.get(k) for k in parts[1:]}
        reads.append(Read(where, parts[0], terms["MetricName"], dims))
    if not reads:
        stripped = re.sub(r"\b[A-Z_]+\(", "(", expr)  # functions: PERIOD(, SUM(, ...
        unknown = set(MATH_ID.findall(stripped)) - ids
        assert not unknown, f"{where}: the expression {expr!r} names no query {sorted(unknown)} (ids: {sorted(ids)})"
    return reads


def literal(value) -> str | None:
    """A dimension value the template fixes, or None (a reference, a `${…}`)."""
    if isinstance(value, str) and "${" not in value:
        return value
    text = sub_text(value)
    return text if text is not None and "${" not in text else None


def alarm_reads(stack: str, rid: str, p: dict) -> list[Read]:
    where = f"{stack} alarm {rid}"
    if "MetricName" in p:
        ns = sub_text(p["Namespace"]) or p["Namespace"]
        return [Read(where, ns, p["MetricName"], {d["Name"]: literal(d["Value"]) for d in p.get("Dimensions", [])})]
    out = []
    ids = {m["Id"] for m in p["Metrics"]}
    for m in p["Metrics"]:
        if "MetricStat" in m:
            metric = m["MetricStat"]["Metric"]
            ns = sub_text(metric["Namespace"]) or metric["Namespace"]
            out.append(Read(where, ns, metric["MetricName"], {d["Name"]: literal(d["Value"]) for d in metric.get("Dimensions", [])}))
        else:
            out += from_expression(sub_text(m["Expression"]) or m["Expression"], ids, where)
    return out


def dashboard_bodies(p: dict) -> list[str]:
    body = p["DashboardBody"]
    branches = body["Fn::If"][1:] if isinstance(body, dict) and "Fn::If" in body else [body]
    return [sub_text(b) or b for b in branches]


def parse_body(text: str) -> dict:
    # A number parameter (`${SubmitterCallsPerSecond}`) stands unquoted: read it as a number.
    return json.loads(re.sub(r"(:\s*)\$\{[A-Za-z]+\}", r"\g<1>1", text))


def dashboard_reads(stack: str, rid: str, body: dict) -> list[Read]:
    out = []
    for n, w in enumerate(body["widgets"]):
        if w.get("type") != "metric":
            continue
        where = f"{stack} dashboard {rid} widget {n} ({w['properties'].get('title', '')})"
        lines = metric_lines(w["properties"]["metrics"])
        ids = {o["id"] for _, o in lines if "id" in o}
        for values, opts in lines:
            if "expression" in opts:
                out += from_expression(opts["expression"], ids, where)
            else:
                dims = dict(zip(values[2::2], (literal(v) for v in values[3::2])))
                out.append(Read(where, values[0], values[1], dims))
    return out


def template_reads(templates: dict[str, dict]) -> list[Read]:
    out = []
    for stack, t in templates.items():
        for rid, res in t["Resources"].items():
            if res["Type"] == "AWS::CloudWatch::Alarm":
                out += alarm_reads(stack, rid, res["Properties"])
            elif res["Type"] == "AWS::CloudWatch::Dashboard":
                for text in dashboard_bodies(res["Properties"]):
                    out += dashboard_reads(stack, rid, parse_body(text))
    return out


def function_namespaces(templates: dict[str, dict]) -> dict[str, str]:
    """Each function's binary (the `Service` its metrics carry) → its AWSMP_METRICS_NAMESPACE."""
    out = {}
    for t in templates.values():
        for res in t["Resources"].values():
            if res["Type"] != "AWS::Serverless::Function":
                continue
            binary = res.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
            env = res["Properties"].get("Environment", {}).get("Variables", {})
            ns = env.get("AWSMP_METRICS_NAMESPACE")
            if binary and ns is not None:
                out[binary] = sub_text(ns) or ns
    return out


# ---- the check -----------------------------------------------------------------------------


def matches(read: Read, m: dict) -> bool:
    if m["name"] != read.name:
        return False
    if read.exact and set(m["dimensions"]) != set(read.dims):
        return False
    values = m["values"]
    if any(v is not None and values.get(k) != v for k, v in read.dims.items()):
        return False
    return all(values.get(k) != v for k, v in read.not_equal.items())


def read_problem(read: Read, emitted: list[dict], namespaces: dict[str, str]) -> str | None:
    """Why `read` reads no existing metric, or None."""
    if read.namespace not in set(namespaces.values()):
        problem = vended_problem(read.namespace, read.name, set(read.dims))
        return f"{read.where}: {read.text()}: {problem}" if problem else None
    found = [m for m in emitted if matches(read, m)]
    if not found:
        same = sorted({f"{{{', '.join(f'{k}={v}' for k, v in m['values'].items())}}}" for m in emitted if m["name"] == read.name})
        instead = f"emitted with {', '.join(same)}" if same else "never emitted"
        return f"{read.where}: reads {read.text()}, but {read.name} is {instead}"
    for m in found:
        service = m["values"].get("Service")
        if namespaces.get(service) != read.namespace:
            return (f"{read.where}: reads {read.text()}; its Service {service} is a function configured with "
                    f"namespace {namespaces.get(service)!r}, not {read.namespace!r}")
    return None


def check(templates: dict[str, dict], emitted: list[dict]) -> list[str]:
    namespaces = function_namespaces(templates)
    return [p for r in template_reads(templates) if (p := read_problem(r, emitted, namespaces))]


@pytest.fixture(scope="module")
def templates() -> dict[str, dict]:
    return {s: load(s) for s in STACKS}


def test_every_alarm_and_widget_reads_a_metric_that_exists(templates, emitted):
    reads = template_reads(templates)
    # Every alarm and every metric widget was read (a new shape is not skipped silently).
    alarms = {f"{s} alarm {r}" for s, t in templates.items() for r, v in t["Resources"].items() if v["Type"] == "AWS::CloudWatch::Alarm"}
    assert alarms <= {r.where for r in reads}
    assert len(reads) > 100
    assert check(templates, emitted) == []


def test_dashboard_bodies_have_the_documented_structure(templates):
    bodies = [(f"{s} {r}", parse_body(text)) for s, t in templates.items() for r, v in t["Resources"].items()
              if v["Type"] == "AWS::CloudWatch::Dashboard" for text in dashboard_bodies(v["Properties"])]
    assert len(bodies) >= 4
    assert [f"{name}: {p}" for name, body in bodies for p in problems(body)] == []


# ---- the check can fail ----------------------------------------------------------------------


def added(templates, emitted, changed_templates, changed_emitted=None) -> list[str]:
    """What the check finds after a change (the unchanged run finds nothing: asserted)."""
    assert check(templates, emitted) == []
    return check(changed_templates, changed_emitted or emitted)


def test_a_renamed_metric_fails(templates, emitted):
    t = json.loads(json.dumps(templates))
    t["main"]["Resources"]["WriteBackConflictAlarm"]["Properties"]["MetricName"] = "WriteBackConflicts"
    assert added(templates, emitted, t) == ["main alarm WriteBackConflictAlarm: reads awsmp/${StageName}/${ProductCode} "
                                 "WriteBackConflicts {Service=submitter}, but WriteBackConflicts is never emitted"]


def test_a_wrong_service_or_dimension_fails(templates, emitted):
    t = json.loads(json.dumps(templates))
    dims = t["main"]["Resources"]["UsageAggregationExpiredAlarm"]["Properties"]["Dimensions"]
    dims[0]["Value"] = "expiry"
    q = t["ingest"]["Resources"]["EventRejectedAlarm"]["Properties"]["Metrics"][0]
    q["Expression"]["Fn::Sub"] = q["Expression"]["Fn::Sub"].replace(", Reason)", ")")
    found = added(templates, emitted, t)
    assert len(found) == 2, found
    assert found[0].startswith("ingest alarm EventRejectedAlarm: reads ") and "{Reason=" in found[0]
    assert found[1].startswith("main alarm UsageAggregationExpiredAlarm: reads ") and "emitted with {Service=discoverer}" in found[1]


def test_a_dropped_dimension_in_the_code_fails(templates, emitted):
    # What the check sees when the consumer stops emitting DedupHit's DedupKind.
    code = [dict(m, dimensions=["Service"], values={"Service": m["values"]["Service"]}) if m["name"] == "DedupHit" else m
            for m in emitted]
    found = added(templates, emitted, templates, code)
    assert found and all("DedupHit" in p and "emitted with {Service=kinesis-consumer}" in p for p in found), found


def test_a_misspelt_vended_metric_or_dimension_fails(templates, emitted):
    t = json.loads(json.dumps(templates))
    t["main"]["Resources"]["SubmitterErrorsAlarm"]["Properties"]["MetricName"] = "Error"
    t["main"]["Resources"]["WorkDlqAlarm"]["Properties"]["Dimensions"][0]["Name"] = "Queue"
    found = added(templates, emitted, t)
    assert [p.split(":")[0] for p in found] == ["main alarm SubmitterErrorsAlarm", "main alarm WorkDlqAlarm"], found
    assert "AWS/Lambda documents no metric Error" in found[0]


def test_the_structure_check_fails_on_a_broken_body():
    body = {"end": "2026-12-01T00:00:00.000Z", "widgets": [
        {"type": "metric", "width": 25, "height": 6, "x": 0, "properties": {
            "metrics": [["ns", "M", "Dim"], [{"expression": "SELECT SUM(a) FROM b", "id": "q1"}],
                        [{"expression": "SELECT SUM(c) FROM d", "id": "Q2", "period": 30}]],
            "stat": "Total", "period": 90, "setPeriodToTimeRange": True, "view": "gauge"}},
        {"type": "graph", "properties": {}},
        {"type": "custom", "properties": {}},
        {"type": "metric", "properties": {"region": "us-east-1", "metrics": [["ns", "M"]],
                                          "annotations": {"alarms": ["arn"], "horizontal": [{"value": "high"}]}}},
    ]}
    found = problems(body)
    expected = ["end without start", "width 25", "x and y", "needs region", "stat 'Total'", "period 90", "period 30",
                "without its value", "type 'graph'", "type 'custom'", "unknown metric widget property setPeriodToTimeRange",
                "more than one Metrics Insights query", "id 'Q2'", "gauge needs yAxis.left", "alarm annotation and horizontal",
                "alarm annotation and a metrics array", "numeric value"]
    assert [e for e in expected if not any(e in p for p in found)] == [], found


def test_the_documented_example_body_passes():
    # The example body of the documentation page passes (the check is no stricter than it).
    example = {"start": "-PT6H", "periodOverride": "inherit", "widgets": [
        {"type": "metric", "x": 0, "y": 0, "width": 12, "height": 6, "properties": {
            "metrics": [["AWS/EC2", "CPUUtilization", "InstanceId", "i-012345"]], "period": 300, "stat": "Average",
            "region": "us-east-1", "title": "EC2 Instance CPU", "liveData": False, "legend": {"position": "right"}}},
        {"type": "metric", "x": 0, "y": 0, "width": 12, "height": 6, "properties": {
            "metrics": [["AWS/EC2", "DiskReadBytes", "InstanceId", "i-123", {"id": "m1"}], [".", ".", ".", "i-abc", {"id": "m2"}],
                        [{"expression": "SUM(METRICS())", "label": "Sum of DiskReadbytes", "id": "e3"}]],
            "view": "timeSeries", "stacked": False, "period": 300, "stat": "Average", "region": "us-east-1"}},
        {"type": "text", "x": 0, "y": 7, "width": 3, "height": 3, "properties": {"markdown": "Hello world"}},
    ]}
    assert problems(example) == []


def test_the_shorthand_repeats_the_previous_line():
    lines = metric_lines([["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", "a"], [".", ".", ".", "b", {"label": "b"}], ["...", "c"]])
    assert [v for v, _ in lines] == [["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", x] for x in "abc"]
