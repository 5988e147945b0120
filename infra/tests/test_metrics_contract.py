"""Every business metric an alarm or dashboard of the templates reads is one the code emits,
with the dimensions it emits it with and a service that exists: names from
contract/src/metrics.rs, dimensions from the `.with(metrics::…)` calls of the emitting
code, services from the binaries' `services_from_env("…")` and the consumer's metrics sink."""

from __future__ import annotations

import json
import re
import sys

from stack_templates import INFRA, ROOT, STACKS, load, sub_text

sys.path.insert(0, str(INFRA))
from cfn.alarms import EXTRA_DIMENSIONS, NAMESPACE  # noqa: E402

METRICS_RS = ROOT / "contract/src/metrics.rs"
CONST_METRIC = re.compile(r'pub const ([A-Z_]+): MetricName =\s*MetricName(?:::\w+\(|\s*\{\s*name:\s*)"(\w+)"')
CONST_DIM = re.compile(r'pub const ([A-Z_]+): &str = "(\w+)";')
WITH = re.compile(r"metrics::([A-Z_]+)\b(?:(?!metrics::)[^;]){0,200}?\.with\(\s*metrics::([A-Z_]+)")
DIMENSION_FIELD = re.compile(r"name: metrics::([A-Z_]+),\s*dimension: Some\(\(metrics::([A-Z_]+)")
QUERY = re.compile(r'SUM\((\w+)\) FROM SCHEMA\("([^"]+)", ([^)]*)\)(?: WHERE Service (?:=|!=) \'([a-z-]+)\')?')
SEARCH = re.compile(r'MetricName=\\?"(\w+)\\?"')


def contract() -> tuple[dict[str, str], dict[str, str]]:
    text = METRICS_RS.read_text(encoding="utf-8")
    return dict(CONST_METRIC.findall(text)), dict(CONST_DIM.findall(text))


def rust_sources() -> str:
    files = [p for crate in ("pipeline", "consumer", "meter-ingest") for p in (ROOT / crate / "src").rglob("*.rs")]
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


def emitted_extra_dimensions() -> dict[str, set[str]]:
    metrics, dims = contract()
    src = rust_sources()
    out: dict[str, set[str]] = {}
    for m, d in WITH.findall(src) + DIMENSION_FIELD.findall(src):
        if m in metrics and d in dims:
            out.setdefault(metrics[m], set()).add(dims[d])
    return out


def services() -> set[str]:
    found = set()
    for p in (ROOT / "pipeline/src/bin").glob("*.rs"):
        found |= set(re.findall(r'services_from_env\("([a-z-]+)"\)', p.read_text(encoding="utf-8")))
    consumer = (ROOT / "consumer/src/adapters/dynamodb.rs").read_text(encoding="utf-8")
    found |= set(re.findall(r'MetricsSink::stdout\(\s*[^,]+,\s*"([a-z-]+)",?\s*\)', consumer))
    return found


def used_metrics(template: dict):
    """(metric, dimension names, service or None) of every business metric the template reads."""
    for res in template["Resources"].values():
        p = res.get("Properties", {})
        if res["Type"] == "AWS::CloudWatch::Alarm":
            if sub_text(p.get("Namespace")) == NAMESPACE:
                dims = {d["Name"]: d["Value"] for d in p["Dimensions"]}
                yield p["MetricName"], set(dims), dims.get("Service")
            for m in p.get("Metrics", []):
                yield from from_query(sub_text(m.get("Expression")) or "")
        if res["Type"] == "AWS::CloudWatch::Dashboard":
            body = p["DashboardBody"]
            bodies = body["Fn::If"][1:] if "Fn::If" in body else [body]
            for b in bodies:
                # A number parameter stands unquoted in the body: parse it as a number.
                text = re.sub(r"(:\s*)\$\{[A-Za-z]+\}", r"\g<1>0", sub_text(b))
                for widget in json.loads(text)["widgets"]:
                    for line in widget["properties"]["metrics"]:
                        if line and line[0] == NAMESPACE:
                            names = [x for x in line[2:] if isinstance(x, str)]
                            dims = dict(zip(names[::2], names[1::2]))
                            yield line[1], set(dims), dims.get("Service")
                        for x in line:
                            if isinstance(x, dict) and "expression" in x:
                                yield from from_query(x["expression"])


def from_query(expression: str):
    for name, ns, dims, service in QUERY.findall(expression):
        assert ns == NAMESPACE, expression
        yield name, {d.strip() for d in dims.split(",")}, service or None
    for name in SEARCH.findall(expression):
        yield name, {"Service", *EXTRA_DIMENSIONS.get(name, [])}, None


def test_extra_dimensions_are_those_the_code_emits():
    assert {k: set(v) for k, v in EXTRA_DIMENSIONS.items()} == emitted_extra_dimensions()


def test_alarms_and_dashboards_read_emitted_metrics_with_their_dimensions():
    names = set(contract()[0].values())
    known_services = services()
    assert {"discoverer", "aggregator", "cleanup", "submitter", "expiry", "kinesis-consumer"} <= known_services
    seen = set()
    for stack in STACKS:
        for name, dims, service in used_metrics(load(stack)):
            seen.add(name)
            assert name in names, f"{stack}: {name} is not in contract/src/metrics.rs"
            assert dims == {"Service", *EXTRA_DIMENSIONS.get(name, [])}, f"{stack}: {name} read with {dims}"
            assert service is None or service in known_services, f"{stack}: {name} of unknown service {service}"
    # The failure-mode metrics are all alarmed or charted.
    assert {"UsageRecordRejected", "UsageAggregationExpired", "UsageSubmissionExpired", "UsageRecordUnprocessed",
            "CustomerNotSubscribed", "BatchMeterUsageException", "EventRejected", "LateUsage",
            "IngestWatermarkStalled", "DedupHit", "RowsWritten", "WriteAmplification",
            "UsageRecordsFinalized", "BatchMeterUsageCalls"} <= seen


def test_the_cross_check_catches_a_misspelt_metric():
    t = load("main")
    t["Resources"]["CustomerNotSubscribedAlarm"]["Properties"]["MetricName"] = "CustomerNotSubscribd"
    names = set(contract()[0].values())
    assert [n for n, _, _ in used_metrics(t) if n not in names] == ["CustomerNotSubscribd"]
