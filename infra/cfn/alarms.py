"""CloudWatch alarms: one per failure mode, each notifying the optional seller SNS topic.

Business metrics are the EMF metrics of contract/src/metrics.rs, in the stack's
namespace (`AWSMP_METRICS_NAMESPACE`), with the dimensions the code emits: `Service` always,
plus `Reason`, `Exception`, `DedupKind` or `Producer` on some. A metric with an extra dimension
is alarmed through a Metrics Insights query summing over it
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-metrics-insights-alarms.html).
"""

from __future__ import annotations

from .base import NO_VALUE, get_att, if_, ref, sub

# The namespace of a product's business metrics: one per product and stage, so two products in
# one region never share an alarm.
NAMESPACE = "awsmp/${StageName}/${ProductCode}"

# Extra dimensions each business metric is emitted with (beyond `Service`); the test
# infra/tests/test_metrics_contract.py checks these against the emitting code.
EXTRA_DIMENSIONS = {
    "UsageRecordRejected": ["Reason"],
    "UsageQuantityAboveApiMaximum": ["Reason"],
    "BatchMeterUsageException": ["Exception"],
    "EventRejected": ["Reason"],
    "DedupHit": ["DedupKind"],
    "EventsAccepted": ["Producer"],
    "IngestMalformedPayload": ["Module"],
}


def actions() -> dict:
    topic = if_("HasAlarmTopic", [ref("AlarmTopicArn")], NO_VALUE)
    return {"AlarmActions": topic, "OKActions": topic}


def lambda_metric(function_id: str, name: str) -> dict:
    return {
        "Namespace": "AWS/Lambda",
        "MetricName": name,
        "Dimensions": [{"Name": "FunctionName", "Value": ref(function_id)}],
    }


def sqs_metric(queue_id: str, name: str) -> dict:
    return {
        "Namespace": "AWS/SQS",
        "MetricName": name,
        "Dimensions": [{"Name": "QueueName", "Value": get_att(queue_id, "QueueName")}],
    }


def emf_metric(name: str, service: str) -> dict:
    assert name not in EXTRA_DIMENSIONS, f"{name} has extra dimensions: use insights()"
    return {
        "Namespace": sub(NAMESPACE),
        "MetricName": name,
        "Dimensions": [{"Name": "Service", "Value": service}],
    }


def insights(name: str, where: str | None) -> str:
    """A Metrics Insights query summing `name` over all its dimensions (a `Fn::Sub` template),
    filtered by `where` (e.g. `Service = 'aggregator'`)."""
    dims = ", ".join(["Service", *EXTRA_DIMENSIONS.get(name, [])])
    where = f" WHERE {where}" if where else ""
    return f'SELECT SUM({name}) FROM SCHEMA("{NAMESPACE}", {dims}){where}'


def alarm(
    description: str,
    metric: dict,
    threshold: float,
    *,
    statistic: str = "Sum",
    period: int = 300,
    periods: int = 1,
    comparison: str = "GreaterThanOrEqualToThreshold",
    missing: str = "notBreaching",
    condition: str | None = None,
) -> dict:
    res = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmDescription": description,
            **metric,
            "Statistic": statistic,
            "Period": period,
            "EvaluationPeriods": periods,
            "Threshold": threshold,
            "ComparisonOperator": comparison,
            "TreatMissingData": missing,
            **actions(),
        },
    }
    if condition:
        res["Condition"] = condition
    return res


def query_alarm(
    description: str, query: str, threshold: float = 1, *, condition: str | None = None
) -> dict:
    res = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmDescription": description,
            "Metrics": [
                {"Id": "q", "Expression": sub(query), "Period": 300, "ReturnData": True}
            ],
            "EvaluationPeriods": 1,
            "Threshold": threshold,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            **actions(),
        },
    }
    if condition:
        res["Condition"] = condition
    return res


def errors(function_id: str, what: str, condition: str | None = None) -> dict:
    return alarm(f"{what} failed (Lambda Errors).", lambda_metric(function_id, "Errors"), 1, condition=condition)


def throttles(function_id: str, what: str, condition: str | None = None) -> dict:
    return alarm(f"{what} throttled.", lambda_metric(function_id, "Throttles"), 1, condition=condition)


def did_not_run(function_id: str, what: str, minutes: int, condition: str | None = None) -> dict:
    """No invocation for `minutes`: missing data breaches, so a stopped schedule alarms."""
    return alarm(
        f"{what} did not run for {minutes} minutes (its schedule stopped).",
        lambda_metric(function_id, "Invocations"),
        1,
        period=minutes * 60 // 2,
        periods=2,
        comparison="LessThanThreshold",
        missing="breaching",
        condition=condition,
    )


def dlq_depth(dlq_id: str, what: str, condition: str | None = None) -> dict:
    return alarm(
        f"Messages reached {what}: a stage failed them maxReceiveCount times; inspect and redrive.",
        sqs_metric(dlq_id, "ApproximateNumberOfMessagesVisible"),
        1,
        statistic="Maximum",
        condition=condition,
    )


def oldest_message(queue_id: str, what: str, seconds: int, condition: str | None = None) -> dict:
    return alarm(
        f"The oldest message of {what} waits over {seconds} s.",
        sqs_metric(queue_id, "ApproximateAgeOfOldestMessage"),
        seconds,
        statistic="Maximum",
        condition=condition,
    )


def business(name: str, service: str, description: str, condition: str | None = None) -> dict:
    if name in EXTRA_DIMENSIONS:
        return query_alarm(description, insights(name, f"Service = '{service}'"), condition=condition)
    return alarm(description, emf_metric(name, service), 1, condition=condition)
