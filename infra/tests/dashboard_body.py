"""A check of a CloudWatch `DashboardBody` against CloudWatch's documented dashboard body
structure ("Dashboard Body Structure and Syntax",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/CloudWatch-Dashboard-Body-Structure.html),
and the reading of each metric widget's `metrics` array, its shorthand resolved. Every rule
below is one that page states, under the section each comment names; a field the page does not
document is reported as unknown. `problems` returns what a body breaks, empty when none."""

from __future__ import annotations

import re

# "Overall Structure": a `widgets` array (required) of between 0 and 500 widget objects, and
# the optional `variables` (0–25), `start`, `end` (only with `start`) and `periodOverride`.
MAX_WIDGETS = 500
MAX_VARIABLES = 25
TOP_LEVEL = {"widgets", "variables", "start", "end", "periodOverride"}
PERIOD_OVERRIDE = {"auto", "inherit"}
# "Widgets Array Structure": `type` and `properties` required; a 24-column grid: `x` 0–23
# (required when `y` is given, and the other way round), `y` 0 or higher, `width` 1–24,
# `height` 1–1000.
WIDGET_TYPES = {"metric", "text", "log", "alarm", "explorer"}
WIDGET_KEYS = {"type", "x", "y", "width", "height", "properties"}
GRID_COLUMNS = 24
MAX_HEIGHT = 1000
# "Properties of a Metric Widget Object".
METRIC_PROPERTIES = {
    "accountId", "annotations", "liveData", "legend", "metrics", "period", "region", "sparkline",
    "stacked", "stat", "table", "timezone", "title", "view", "yAxis",
}
VIEWS = {"timeSeries", "singleValue", "gauge", "bar", "pie", "table"}
LEGEND_POSITIONS = {"right", "bottom", "hidden"}
# `timezone`: + or - and four digits.
TIMEZONE = re.compile(r"^[+-]\d{4}$")
# `stat` (widget and metric): SampleCount | Average | Sum | Minimum | Maximum | p??.
STAT = re.compile(r"^(SampleCount|Average|Sum|Minimum|Maximum|p\d{1,2}(\.\d+)?)$")
# "Metric Widget: Format for Each Metric in the Array" and "Dashboard Widget Object: Rendering
# Properties Object Format": the fields of a line's properties object.
RENDERING = {"accountId", "color", "expression", "id", "label", "period", "region", "stat", "visible", "yAxis"}
# A line's `id` "must start with a lowercase letter".
ID = re.compile(r"^[a-z][A-Za-z0-9_]*$")
# "Dashboard Widget Object: Annotation Properties": a horizontal annotation's fields (`value`
# required, a float), `fill` above | below | none, `yAxis` left | right.
HORIZONTAL_ANNOTATION = {"value", "label", "color", "fill", "visible", "yAxis"}
FILLS = {"above", "below", "none"}
Y_AXES = {"left", "right"}
# Text widget: `markdown` required, `background` optional.
TEXT_PROPERTIES = {"markdown", "background"}


def valid_period(p) -> bool:
    """A widget's or a line's `period`: "Any multiple of 60, with 60 as the minimum"."""
    return isinstance(p, int) and not isinstance(p, bool) and p >= 60 and p % 60 == 0


def is_insights(expr) -> bool:
    return isinstance(expr, str) and expr.lstrip().upper().startswith("SELECT")


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


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def widget_problems(w: dict, where: str) -> list[str]:
    if not isinstance(w, dict):
        return [f"{where}: not an object"]
    out = [f"{where}: unknown key {k}" for k in sorted(set(w) - WIDGET_KEYS)]
    if w.get("type") not in WIDGET_TYPES:
        out.append(f"{where}: type {w.get('type')!r} is not one of {sorted(WIDGET_TYPES)}")
    for key, lo, hi in (("x", 0, GRID_COLUMNS - 1), ("width", 1, GRID_COLUMNS), ("height", 1, MAX_HEIGHT), ("y", 0, None)):
        if key in w:
            v = w[key]
            if not is_int(v) or v < lo or (hi is not None and v > hi):
                out.append(f"{where}: {key} {v!r} outside {lo}–{hi if hi is not None else '∞'}")
    if ("x" in w) != ("y" in w):
        out.append(f"{where}: x and y are given together or not at all")
    if is_int(w.get("x")) and is_int(w.get("width")) and w["x"] + w["width"] > GRID_COLUMNS:
        out.append(f"{where}: x + width {w['x'] + w['width']} passes the {GRID_COLUMNS}-column grid")
    props = w.get("properties")
    if not isinstance(props, dict):
        return out + [f"{where}: properties missing or not an object"]
    kind = w.get("type")
    if kind == "metric":
        out += metric_widget_problems(props, where)
    elif kind == "text":
        out += [f"{where}: unknown text widget property {k}" for k in sorted(set(props) - TEXT_PROPERTIES)]
        if not isinstance(props.get("markdown"), str):
            out.append(f"{where}: a text widget needs markdown")
    elif kind == "log" and not (isinstance(props.get("query"), str) and isinstance(props.get("region"), str)):
        out.append(f"{where}: a log widget needs query and region")
    return out


def annotation_problems(a: dict, where: str) -> list[str]:
    """"Dashboard Widget Object: Annotation Properties": one alarm, or horizontal / vertical
    annotations, never both; an alarm annotation excludes a `metrics` array."""
    if not isinstance(a, dict):
        return [f"{where}: annotations is not an object"]
    out = [f"{where}: unknown annotation kind {k}" for k in sorted(set(a) - {"alarms", "horizontal", "vertical"})]
    if "alarms" in a and ("horizontal" in a or "vertical" in a):
        out.append(f"{where}: an alarm annotation and horizontal or vertical ones together")
    if "alarms" in a and not (isinstance(a["alarms"], list) and len(a["alarms"]) <= 1):
        out.append(f"{where}: alarms holds 0–1 alarm ARNs")
    for item in a.get("horizontal", []):
        # A band is a pair of annotations.
        for h in item if isinstance(item, list) else [item]:
            if not isinstance(h, dict) or not is_number(h.get("value")):
                out.append(f"{where}: a horizontal annotation needs a numeric value: {h!r}")
                continue
            out += [f"{where}: unknown horizontal annotation field {k}" for k in sorted(set(h) - HORIZONTAL_ANNOTATION)]
            if "fill" in h and h["fill"] not in FILLS:
                out.append(f"{where}: annotation fill {h['fill']!r}")
            if "yAxis" in h and h["yAxis"] not in Y_AXES:
                out.append(f"{where}: annotation yAxis {h['yAxis']!r}")
    return out


def metric_widget_problems(p: dict, where: str) -> list[str]:
    out = [f"{where}: unknown metric widget property {k}" for k in sorted(set(p) - METRIC_PROPERTIES)]
    if not isinstance(p.get("region"), str) or not p["region"]:
        out.append(f"{where}: a metric widget needs region")
    if "view" in p and p["view"] not in VIEWS:
        out.append(f"{where}: view {p['view']!r} is not one of {sorted(VIEWS)}")
    if p.get("view") == "gauge":
        left = p.get("yAxis", {}).get("left", {}) if isinstance(p.get("yAxis"), dict) else {}
        if not (is_number(left.get("min")) and is_number(left.get("max"))):
            out.append(f"{where}: a gauge needs yAxis.left min and max")
    if "stat" in p and not (isinstance(p["stat"], str) and STAT.match(p["stat"])):
        out.append(f"{where}: stat {p['stat']!r} is not SampleCount, Average, Sum, Minimum, Maximum or p??")
    if "period" in p and not valid_period(p["period"]):
        out.append(f"{where}: period {p['period']!r} is not a multiple of 60 (60 at least)")
    if "legend" in p and (not isinstance(p["legend"], dict) or p["legend"].get("position") not in LEGEND_POSITIONS):
        out.append(f"{where}: legend position {p['legend']!r}")
    if "timezone" in p and not (isinstance(p["timezone"], str) and TIMEZONE.match(p["timezone"])):
        out.append(f"{where}: timezone {p['timezone']!r} is not ±HHMM")
    for key in ("liveData", "sparkline", "stacked"):
        if key in p and not isinstance(p[key], bool):
            out.append(f"{where}: {key} is not a boolean")
    annotations = p.get("annotations")
    if annotations is not None:
        out += annotation_problems(annotations, where)
    metrics = p.get("metrics")
    if metrics is None:
        if not (isinstance(annotations, dict) and annotations.get("alarms")):
            out.append(f"{where}: a metric widget needs a metrics array (or an alarm annotation)")
        return out
    if isinstance(annotations, dict) and "alarms" in annotations:
        out.append(f"{where}: an alarm annotation and a metrics array together")
    if not isinstance(metrics, list):
        return out + [f"{where}: metrics is not an array"]
    if len(metrics) > MAX_WIDGETS:
        out.append(f"{where}: more than {MAX_WIDGETS} metrics and expressions")
    for n, line in enumerate(metrics):
        if not isinstance(line, list) or not line:
            out.append(f"{where} metrics[{n}]: not a non-empty array")
        elif any(isinstance(x, dict) for x in line[:-1]):
            out.append(f"{where} metrics[{n}]: the rendering properties object must come last")
    lines = metric_lines([m for m in metrics if isinstance(m, list) and m])
    if sum(is_insights(opts.get("expression")) for _, opts in lines) > 1:
        out.append(f"{where}: more than one Metrics Insights query in one metrics array")
    ids: set = set()
    for n, (values, opts) in enumerate(lines):
        out += line_problems(values, opts, ids, f"{where} metrics[{n}]")
    return out


def line_problems(values: list, opts: dict, ids: set, at: str) -> list[str]:
    out = [f"{at}: unknown rendering property {k}" for k in sorted(set(opts) - RENDERING)]
    if "id" in opts:
        if not ID.match(str(opts["id"])):
            out.append(f"{at}: id {opts['id']!r} must start with a lowercase letter")
        if opts["id"] in ids:
            out.append(f"{at}: id {opts['id']!r} used twice")
        ids.add(opts["id"])
    if "stat" in opts and not STAT.match(str(opts["stat"])):
        out.append(f"{at}: stat {opts['stat']!r} is not SampleCount, Average, Sum, Minimum, Maximum or p??")
    if "period" in opts and not valid_period(opts["period"]):
        out.append(f"{at}: period {opts['period']!r} is not a multiple of 60 (60 at least)")
    if "yAxis" in opts and opts["yAxis"] not in Y_AXES:
        out.append(f"{at}: yAxis {opts['yAxis']!r}")
    if "visible" in opts and not isinstance(opts["visible"], bool):
        out.append(f"{at}: visible is not a boolean")
    if "expression" in opts:
        if values:
            out.append(f"{at}: an expression line holds only its properties object")
    elif len(values) < 2 or not all(isinstance(v, str) and v for v in values):
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
    if "variables" in body and not (isinstance(body["variables"], list) and len(body["variables"]) <= MAX_VARIABLES):
        out.append(f"variables: an array of at most {MAX_VARIABLES}")
    if "end" in body and "start" not in body:
        out.append("end without start")
    if "periodOverride" in body and body["periodOverride"] not in PERIOD_OVERRIDE:
        out.append(f"periodOverride {body['periodOverride']!r}")
    for n, w in enumerate(widgets):
        title = w.get("properties", {}).get("title", "") if isinstance(w, dict) else ""
        out += widget_problems(w, f"widget {n} ({title})")
    return out
