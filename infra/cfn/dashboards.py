"""CloudWatch dashboards: the body is JSON inside a `Fn::Sub`, so `${Resource}` names the
stack's functions and queues and `${AWS::Region}` its region
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/CloudWatch-Dashboard-Body-Structure.html).
"""

from __future__ import annotations

import json

from .alarms import NAMESPACE, insights, sub


def metric_widget(title: str, metrics: list, stat: str = "Sum", period: int = 300) -> dict:
    return {
        "type": "metric",
        "width": 12,
        "height": 6,
        "properties": {
            "title": title,
            "region": "${AWS::Region}",
            "view": "timeSeries",
            "stat": stat,
            "period": period,
            "metrics": metrics,
        },
    }


def lambda_health(functions: list[tuple[str, str]]) -> list[dict]:
    """Errors, throttles, invocations and duration of each `(label, function logical id)`."""
    out = []
    for metric, stat in (("Errors", "Sum"), ("Throttles", "Sum"), ("Invocations", "Sum"), ("Duration", "p99")):
        out.append(
            metric_widget(
                f"Lambda {metric}",
                [["AWS/Lambda", metric, "FunctionName", f"${{{fid}}}", {"label": label}] for label, fid in functions],
                stat=stat,
            )
        )
    return out


def queue_health(queues: list[tuple[str, str]]) -> list[dict]:
    return [
        metric_widget(
            "Queue depth",
            [["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", f"${{{qid}.QueueName}}", {"label": label}] for label, qid in queues],
            stat="Maximum",
        ),
        metric_widget(
            "Oldest message age (s)",
            [["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", f"${{{qid}.QueueName}}", {"label": label}] for label, qid in queues],
            stat="Maximum",
        ),
    ]


def business_widget(title: str, series: list[tuple[str, str]], stat: str = "Sum") -> dict:
    """Business metrics without extra dimensions: `(metric name, service)`."""
    return metric_widget(
        title, [[NAMESPACE, name, "Service", service] for name, service in series], stat=stat
    )


def insights_widget(title: str, name: str, group_by: str, where: str | None = None) -> dict:
    query = insights(name, where) + f" GROUP BY {group_by}"
    return metric_widget(title, [[{"expression": query, "id": "q1", "label": title}]])


# Replaced, quotes included, by a number parameter after the body is serialized.
SHARE_PLACEHOLDER = "__SUBMITTER_CALLS_PER_SECOND__"


def submitter_throughput(share: bool) -> dict:
    """The submitter's records/s and BatchMeterUsage calls/s, against its quota share (the
    main stack's `SubmitterCallsPerSecond`) when `share`."""
    ns = NAMESPACE
    w = metric_widget("Submitter: records/s and BatchMeterUsage calls/s (quota use)", [
        [ns, "UsageRecordsFinalized", "Service", "submitter", {"id": "records", "visible": False}],
        [ns, "BatchMeterUsageCalls", "Service", "submitter", {"id": "calls", "visible": False}],
        [{"expression": "records/PERIOD(records)", "id": "recordsps", "label": "records/s"}],
        [{"expression": "calls/PERIOD(calls)", "id": "callsps", "label": "calls/s"}],
    ], period=300)
    if share:
        w["properties"]["annotations"] = {"horizontal": [{"label": "quota share (calls/s)", "value": SHARE_PLACEHOLDER}]}
    return w


def dashboard(name_template: str, dashboard_body: dict, condition: str) -> dict:
    return {
        "Type": "AWS::CloudWatch::Dashboard",
        "Condition": condition,
        "Properties": {"DashboardName": sub(name_template), "DashboardBody": dashboard_body},
    }


def body(widgets: list[dict]) -> dict:
    text = json.dumps({"widgets": widgets}, indent=1)
    return sub(text.replace(f'"{SHARE_PLACEHOLDER}"', "${SubmitterCallsPerSecond}"))
