"""A check of a CloudWatch `DashboardBody` against CloudWatch's documented dashboard body
structure, for the widget types the templates use
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/CloudWatch-Dashboard-Body-Structure.html),
and the reading of each metric widget's `metrics` array, its shorthand resolved. Every rule
below is one that page states; `problems` returns what a body breaks, empty when none."""

from __future__ import annotations

import re

# "Overall Structure": a `widgets` array of between 0 and 500 widget objects, plus a few
# optional top-level parameters.
MAX_WIDGETS = 500
TOP_LEVEL = {"widgets", "variables", "start", "end", "periodOverride"}
PERIOD_OVERRIDE = {"auto", "inherit"}
# "Widgets Array Structure": the widget types and the grid. The dashboard is 24 columns wide:
# `x` 0–23, `width` 1–24; `height` 1–1000; `y` a non-negative row.
WIDGET_TYPES = {"metric", "text", "log", "alarm", "explorer", "custom"}
WIDGET_KEYS = {"type", "x", "y", "width", "height", "properties"}
GRID_COLUMNS = 24
MAX_HEIGHT = 1000
# "Properties of a Metric Widget Object".
METRIC_PROPERTIES = {
    "accountId", "annotations", "liveData", "legend", "metrics", "period", "region", "stacked",
    "sparkline", "stat", "timezone", "title", "view", "yAxis", "setPeriodToTimeRange", "start",
    "end", "table", "singleValueFullPrecision", "labels", "trend",
}
VIEWS = {"timeSeries", "singleValue", "gauge", "bar", "pie", "table"}
LEGEND_POSITIONS = {"right", "bottom", "hidden"}
# A statistic: the five plain ones, or a percentile / trimmed / winsorized one.
STAT = re.compile(r"^(SampleCount|Average|Sum|Minimum|Maximum|IQM|(p|tm|wm|tc|ts)\d{1,2}(\.\d{1,2})?)$")
# "Metric Widget: Format for Each Metric in the Array": the rendering properties object.
RENDERING = {"color", "expression", "id", "label", "period", "region", "stat", "visible", "yAxis", "accountId"}
# An `id` starts with a lowercase letter (MetricDataQuery Id:
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDataQuery.html).
ID = re.compile(r"^[a-z][A-Za-z0-9_]*$")
# Periods: 1, 5, 10, 30 (high resolution) or a multiple of 60.
HIGH_RESOLUTION_PERIODS = {1, 5, 10, 30}


def valid_period(p) -> bool:
    return isinstance(p, int) and not isinstance(p, bool) and (p in HIGH_RESOLUTION_PERIODS or (p > 0 and p % 60 == 0))


def metric_lines(metrics: list) -> list[tuple[list, dict]]:
    """Each line of a `metrics` array as `(values, rendering properties)`, the shorthand
    resolved: `"."` takes the previous line's value at the same position, `"..."` (first)
    the previous line's values up to where this line's remaining values align with its end."""
    out: list[tuple[list, dict]] = []
    prev: list = []
    for line in metrics:
        has_opts = bool(line) and isinstance(line[-1], dict)
        opts = line[-1] if has_opts else {}
        values = list(line[:-1] if has_opts else line)
        if values and values[0] == "...":
            rest = values[1:]
            values = prev[: len(prev) - len(rest)] + rest
        values = [prev[i] if v == "." and i < len(prev) else v for i, v in enumerate(values)]
        out.append((values, opts))
        if values:
            prev = values
    return out


def widget_problems(w: dict, where: str) -> list[str]:
    out = []
    if not isinstance(w, dict):
        return [f"{where}: not an object"]
    out += [f"{where}: unknown key {k}" for k in sorted(set(w) - WIDGET_KEYS)]
    if w.get("type") not in WIDGET_TYPES:
        out.append(f"{where}: type {w.get('type')!r} is not one of {sorted(WIDGET_TYPES)}")
    for key, lo, hi in (("x", 0, GRID_COLUMNS - 1), ("width", 1, GRID_COLUMNS), ("height", 1, MAX_HEIGHT), ("y", 0, None)):
        if key in w:
            v = w[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
                out.append(f"{where}: {key} {v!r} outside {lo}–{hi if hi is not None else '∞'}")
    if "x" in w and "width" in w and isinstance(w["x"], int) and isinstance(w["width"], int) and w["x"] + w["width"] > GRID_COLUMNS:
        out.append(f"{where}: x + width {w['x'] + w['width']} passes the {GRID_COLUMNS}-column grid")
    props = w.get("properties")
    if not isinstance(props, dict):
        return out + [f"{where}: properties missing or not an object"]
    kind = w.get("type")
    if kind == "metric":
        out += metric_widget_problems(props, where)
    elif kind == "text" and not isinstance(props.get("markdown"), str):
        out.append(f"{where}: a text widget needs markdown")
    elif kind == "alarm" and not (isinstance(props.get("alarms"), list) and props["alarms"]):
        out.append(f"{where}: an alarm widget needs alarms")
    elif kind == "log" and not (isinstance(props.get("query"), str) and isinstance(props.get("region"), str)):
        out.append(f"{where}: a log widget needs query and region")
    return out


def metric_widget_problems(p: dict, where: str) -> list[str]:
    out = [f"{where}: unknown metric widget property {k}" for k in sorted(set(p) - METRIC_PROPERTIES)]
    if not isinstance(p.get("region"), str) or not p["region"]:
        out.append(f"{where}: a metric widget needs region")
    if "view" in p and p["view"] not in VIEWS:
        out.append(f"{where}: view {p['view']!r} is not one of {sorted(VIEWS)}")
    if "stat" in p and not (isinstance(p["stat"], str) and STAT.match(p["stat"])):
        out.append(f"{where}: stat {p['stat']!r} is not a statistic")
    if "period" in p and not valid_period(p["period"]):
        out.append(f"{where}: period {p['period']!r} is not 1, 5, 10, 30 or a multiple of 60")
    if "legend" in p and p["legend"].get("position") not in LEGEND_POSITIONS:
        out.append(f"{where}: legend position {p['legend'].get('position')!r}")
    for a in p.get("annotations", {}).get("horizontal", []):
        if not isinstance(a, dict) or not isinstance(a.get("value"), (int, float)) or isinstance(a.get("value"), bool):
            out.append(f"{where}: a horizontal annotation needs a numeric value: {a!r}")
    metrics = p.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        return out + [f"{where}: a metric widget needs a non-empty metrics array"]
    if len(metrics) > MAX_WIDGETS:
        out.append(f"{where}: more than {MAX_WIDGETS} metrics")
    ids = set()
    for n, line in enumerate(metrics):
        if not isinstance(line, list) or not line:
            out.append(f"{where} metrics[{n}]: not a non-empty array")
            continue
        if any(isinstance(x, dict) for x in line[:-1]):
            out.append(f"{where} metrics[{n}]: the rendering properties object must come last")
    for n, (values, opts) in enumerate(metric_lines([m for m in metrics if isinstance(m, list) and m])):
        at = f"{where} metrics[{n}]"
        out += [f"{at}: unknown rendering property {k}" for k in sorted(set(opts) - RENDERING)]
        if "id" in opts:
            if not ID.match(str(opts["id"])):
                out.append(f"{at}: id {opts['id']!r} must start with a lowercase letter")
            if opts["id"] in ids:
                out.append(f"{at}: id {opts['id']!r} used twice")
            ids.add(opts["id"])
        if "stat" in opts and not STAT.match(str(opts["stat"])):
            out.append(f"{at}: stat {opts['stat']!r} is not a statistic")
        if "period" in opts and not valid_period(opts["period"]):
            out.append(f"{at}: period {opts['period']!r}")
        if "expression" in opts:
            if values:
                out.append(f"{at}: an expression line holds only its rendering properties object")
            continue
        if len(values) < 2 or not all(isinstance(v, str) and v for v in values):
            out.append(f"{at}: needs namespace, metric name and dimension name/value strings: {values!r}")
        elif len(values) % 2:
            out.append(f"{at}: a dimension name without its value: {values!r}")
    return out


def problems(body: dict) -> list[str]:
    """What `body` (a parsed DashboardBody) breaks of the documented structure."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    out = [f"unknown top-level key {k}" for k in sorted(set(body) - TOP_LEVEL)]
    widgets = body.get("widgets")
    if not isinstance(widgets, list):
        return out + ["the body needs a widgets array"]
    if len(widgets) > MAX_WIDGETS:
        out.append(f"{len(widgets)} widgets: at most {MAX_WIDGETS}")
    if "periodOverride" in body and body["periodOverride"] not in PERIOD_OVERRIDE:
        out.append(f"periodOverride {body['periodOverride']!r}")
    for n, w in enumerate(widgets):
        title = w.get("properties", {}).get("title", "") if isinstance(w, dict) else ""
        out += widget_problems(w, f"widget {n} ({title})")
    return out
