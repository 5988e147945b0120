"""The ingest stack (per region, for one product): the usage stream, the consumer and its
event source mapping, the dedup, rejected-events, watermark and mapping tables, the stream
heartbeat, the meter-ingest function with its on-failure queue, the billing archive, alarms and
the ingest-throughput dashboard.

It is deployed before the main stack: the consumer writes the main stack's usage tables by
their deterministic names (`awsmp-<stage>-<product>-usage`), so neither stack imports the other.
"""

from __future__ import annotations

from . import alarms as al
from . import params, stages
from .base import (
    PRODUCT_PREFIX,
    if_,
    bucket,
    entries,
    entry,
    equals,
    get_att,
    physical_name,
    queues,
    ref,
    stream,
    sub,
    table,
)
from .dashboards import body, dashboard, insights_widget, lambda_health, metric_widget, submitter_throughput
from .functions import resources


def _num(default: int, lo: int, hi: int, description: str) -> dict:
    return {"Type": "Number", "Default": default, "MinValue": lo, "MaxValue": hi, "Description": description}


def parameters() -> dict:
    p = {**params.common(), **params.product(), **params.time_rules()}
    p.update(
        {
            "StreamMode": {"Type": "String", "AllowedValues": ["ON_DEMAND", "PROVISIONED"], "Default": "ON_DEMAND",
                           "Description": "Kinesis capacity mode of the usage stream."},
            "ShardCount": _num(2, 1, 500, "Shards when StreamMode is PROVISIONED."),
            # Long enough to replay past the lock after a consumer outage.
            "StreamRetentionHours": _num(168, 24, 8760, "Usage stream retention in hours."),
            # Batch settings: up to 10,000 records or 6 MB a batch
            # (https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html); 500 keeps one
            # invocation's row writes well inside its timeout, a 1 s window adds at most 1 s.
            "ConsumerBatchSize": _num(500, 1, 10000, "Records per consumer invocation."),
            "ConsumerBatchWindowSeconds": _num(1, 0, 300, "Seconds the mapping gathers a batch."),
            # Refused above 1: concurrent batches of one shard make the shard's ingest watermark
            # inexact (Lambda's event names the shard, not the partition-key lane), so an hour
            # could be aggregated before a lagging lane's usage (docs/guarantees.md).
            "ConsumerParallelizationFactor": {**_num(1, 1, 1, "Concurrent batches per shard (1: the ingest watermark is exact only then)."),
                                              "ConstraintDescription": "1: with more, the shard watermark cannot tell which lane lags (docs/guarantees.md)"},
            # -1: never discard. A finite value lets Lambda drop records after sending only their
            # metadata to the on-failure queue; the consumer never fails a batch for a malformed
            # record, so only an outage retries, and iterator age alarms on it instead.
            "ConsumerMaximumRetryAttempts": _num(-1, -1, 10000, "Retries of a failing batch (-1: until it succeeds)."),
            "TimestampPolicy": {"Type": "String", "AllowedValues": ["arrival", "server", "trusted-client"], "Default": "arrival",
                                "Description": "Billing time of an event (docs/guarantees.md, \"Billing time\")."},
            "MaxClockSkewSeconds": _num(60, 1, 3600, "Client vs arrival time bound."),
            "AllowedProducers": {"Type": "String", "Default": "", "AllowedPattern": "^$|^[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*$",
                                 "Description": "Comma-separated producer ids (empty: any)."},
            "DedupTtlHours": _num(48, 24, 72, "Dedup claim lifetime in hours."),
            "RejectedEventsTtlDays": _num(400, 0, 3650, "Rejected-events retention in days (0: keep)."),
            "ConsumerConcurrency": _num(16, 1, 256, "Concurrent store calls per consumer invocation."),
            "MeterIngestAllowedAccounts": {"Type": "String", "Default": "", "AllowedPattern": "^$|^[0-9]{12}(,[0-9]{12})*$",
                                           "Description": "Comma-separated accounts whose meter-ingest aliases may be invoked (empty: this stack's account)."},
            "MeterIngestMappingCacheSeconds": _num(30, 0, 3600, "How long meter-ingest caches a mapping entry."),
            "MeterIngestModules": {"Type": "CommaDelimitedList", "Default": "default",
                                   "Description": "Platform modules calling meter-ingest; each gets its own alias, whose ARN is its identity."},
        }
    )
    return p


def conditions() -> dict:
    return {
        **params.common_conditions(),
        "IsProvisionedStream": equals(ref("StreamMode"), "PROVISIONED"),
        "MeterIngestOwnAccountOnly": equals(ref("MeterIngestAllowedAccounts"), ""),
    }


def environment(stage: dict) -> dict:
    """The value of every variable an ingest-stack function may get (infra/stages.json names
    which it gets): what consumer/src/config.rs, meter-ingest/src/config.rs and the
    heartbeat read. The main stack's usage tables by their deterministic names."""
    return {
        "AWSMP_USAGE_TABLE": sub(physical_name("awsmp-usage", "main")),
        "AWSMP_AGGREGATED_USAGE_TABLE": sub(physical_name("awsmp-aggregated-usage", "main")),
        "AWSMP_DEDUP_TABLE": ref("DedupTable"),
        "AWSMP_REJECTED_EVENTS_TABLE": ref("RejectedEventsTable"),
        "AWSMP_INGEST_WATERMARK_TABLE": ref("IngestWatermarkTable"),
        "AWSMP_TIMESTAMP_POLICY": ref("TimestampPolicy"),
        "AWSMP_MAX_CLOCK_SKEW_SECONDS": ref("MaxClockSkewSeconds"),
        "AWSMP_ALLOWED_PRODUCERS": ref("AllowedProducers"),
        "AWSMP_DEDUP_TTL_HOURS": ref("DedupTtlHours"),
        "AWSMP_USAGE_TABLE_TTL_DAYS": ref("UsageTableTtlDays"),
        "AWSMP_REJECTED_EVENTS_TTL_DAYS": ref("RejectedEventsTtlDays"),
        "AWSMP_BILLABLE_WINDOW_HOURS": ref("BillableWindowHours"),
        "AWSMP_CONSUMER_CONCURRENCY": ref("ConsumerConcurrency"),
        "AWSMP_BILLING_ARCHIVE_BUCKET": ref("BillingArchiveBucket"),
        "AWSMP_METRICS_NAMESPACE": sub(al.NAMESPACE),
        "AWSMP_USAGE_STREAM": ref("UsageStream"),
        "AWSMP_INGEST_MAPPING_TABLE": ref("IngestMappingTable"),
        "AWSMP_INGEST_HELD_TABLE": ref("IngestHeldTable"),
        "AWSMP_ENVIRONMENT": ref("StageName"),
        "AWSMP_ALLOWED_ACCOUNTS": if_("MeterIngestOwnAccountOnly", ref("AWS::AccountId"), ref("MeterIngestAllowedAccounts")),
        "AWSMP_INGEST_MAPPING_CACHE_SECONDS": ref("MeterIngestMappingCacheSeconds"),
    }


def alarm_resources() -> dict:
    """The stack's own alarms (each function's are in infra/stages.json)."""
    # IteratorAge is in milliseconds: alarm at half the lock, while the lock still holds.
    iterator_age = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmDescription": "The consumer lags the stream by over half the metering lock: hours may be aggregated before their usage is applied.",
            "Metrics": [
                {"Id": "age", "ReturnData": False, "MetricStat": {"Metric": {"Namespace": "AWS/Lambda", "MetricName": "IteratorAge",
                 "Dimensions": [{"Name": "FunctionName", "Value": ref("KinesisConsumerFunction")}]}, "Period": 60, "Stat": "Maximum"}},
                {"Id": "halfHours", "Expression": "age / 1800000", "Label": "iterator age in half-hours", "ReturnData": True},
            ],
            "EvaluationPeriods": 5,
            "Threshold": ref("MeteringLockHours"),
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            **al.actions(),
        },
    }
    throttles = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmDescription": "The dedup table throttles reads or writes.",
            "Metrics": [
                *[{"Id": i, "ReturnData": False, "MetricStat": {"Metric": {"Namespace": "AWS/DynamoDB", "MetricName": m,
                   "Dimensions": [{"Name": "TableName", "Value": ref("DedupTable")}]}, "Period": 300, "Stat": "Sum"}}
                  for i, m in (("reads", "ReadThrottleEvents"), ("writes", "WriteThrottleEvents"))],
                {"Id": "throttles", "Expression": "reads + writes", "ReturnData": True},
            ],
            "EvaluationPeriods": 1,
            "Threshold": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            **al.actions(),
        },
    }
    depth = lambda q, what: al.alarm(  # noqa: E731
        f"Messages reached {what}: work was discarded after its retries; inspect and replay.",
        al.sqs_metric(q, "ApproximateNumberOfMessagesVisible"), 1, statistic="Maximum")
    return {
        "ConsumerIteratorAgeAlarm": iterator_age,
        "EventRejectedAlarm": al.business("EventRejected", "kinesis-consumer", "The consumer refused or could not write events (rejected-events table holds them)."),
        "DedupThrottlesAlarm": throttles,
        "IngestLateUsageAlarm": al.query_alarm("Usage reached the consumer after its group-hour was aggregated.", al.insights("LateUsage", "Service = 'kinesis-consumer'")),
        "ClientClockSkewAlarm": al.alarm("A producer's clock or buffers are off by more than MaxClockSkewSeconds.",
                                         al.emf_metric("ClientClockSkew", "kinesis-consumer"), ref("MaxClockSkewSeconds"), statistic="Maximum"),
        "IngestWatermarkStalledAlarm": al.business("IngestWatermarkStalled", "discoverer", "The lowest shard watermark stalled: metering is held back."),
        "ConsumerFailureQueueAlarm": depth("ConsumerFailureQueue", "the consumer's on-failure queue"),
        "MeterIngestFailureQueueAlarm": depth("MeterIngestFailureQueue", "the meter-ingest on-failure queue"),
    }


def throughput_dashboard() -> dict:
    ns, svc = al.NAMESPACE, "kinesis-consumer"
    stream_name = "${UsageStream}"
    widgets = [
        metric_widget("Incoming records", [["AWS/Kinesis", "IncomingRecords", "StreamName", stream_name]], period=60),
        metric_widget("Incoming bytes", [["AWS/Kinesis", "IncomingBytes", "StreamName", stream_name]], period=60),
        metric_widget("Iterator age (ms)", [["AWS/Lambda", "IteratorAge", "FunctionName", "${KinesisConsumerFunction}"],
                                            ["AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds", "StreamName", stream_name]], stat="Maximum", period=60),
        metric_widget("Consumer events/s and rows/s", [
            [{"expression": f"SUM(SEARCH('{{{ns},Producer,Service}} MetricName=\"EventsAccepted\"', 'Sum', 60))/60", "id": "events", "label": "events/s"}],
            [{"expression": "rows/PERIOD(rows)", "id": "rowsps", "label": "rows/s"}],
            [ns, "RowsWritten", "Service", svc, {"id": "rows", "visible": False}],
        ], period=60),
        metric_widget("Write amplification (UpdateItem per 1,000 events)", [[ns, "WriteAmplification", "Service", svc]], stat="Average", period=60),
        insights_widget("Rejected events by reason", "EventRejected", "Reason", f"Service = '{svc}'"),
        insights_widget("Dedup hits by kind", "DedupHit", "DedupKind", f"Service = '{svc}'"),
        metric_widget("Client clock skew (s)", [[ns, "ClientClockSkew", "Service", svc]], stat="Maximum", period=60),
        submitter_throughput(share=False),
        *lambda_health(stages.health(stages.of_stack("ingest"))),
    ]
    return dashboard(PRODUCT_PREFIX + "-ingest-throughput", body(widgets), "CreateDashboardCondition")


def build(resources_json: dict) -> dict:
    res: dict = {}
    for e in entries(resources_json, "tables", "ingest"):
        res[e["logicalId"]] = table(e)
    for e in entries(resources_json, "queues", "ingest"):
        res.update(queues(e))
    for e in entries(resources_json, "streams", "ingest"):
        res[e["logicalId"]] = stream(e)
    for e in entries(resources_json, "buckets", "ingest"):
        res[e["logicalId"]] = bucket(e)
    own = stages.of_stack("ingest")
    for stage in own:
        res.update(resources(stages.function(stage, environment), "ingest"))
    res.update(stages.triggers(own))
    res.update(stages.alarm_resources(own))
    res.update(alarm_resources())
    res["IngestThroughputDashboard"] = throughput_dashboard()
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Transform": ["AWS::LanguageExtensions", "AWS::Serverless-2016-10-31"],
        "Description": "awsmp ingest stack: one product's usage stream and consumer in one region (generated by infra/generate.py from infra/resources.json; docs/deploy.md).",
        "Parameters": {**parameters(), **params.archive_lock(entry(resources_json, "BillingArchiveBucket")["objectLock"])},
        "Rules": {**params.dry_run_rule(), **params.ttl_rules()},
        "Conditions": conditions(),
        "Resources": res,
        "Outputs": {
            "UsageStreamName": {"Value": ref("UsageStream")},
            "UsageStreamArn": {"Value": get_att("UsageStream", "Arn")},
            "MeterIngestFunctionArn": {"Value": get_att("MeterIngestFunction", "Arn")},
            "BillingArchiveBucketName": {"Value": ref("BillingArchiveBucket")},
            "Fn::ForEach::MeterIngestAliasArns": [
                "Module",
                ref("MeterIngestModules"),
                {
                    "MeterIngestAliasArn${Module}": {"Description": "The ARN this module invokes.", "Value": stages.alias_arn("meter-ingest")},
                    "MeterIngestInvokePolicyArn${Module}": {"Description": "The policy this module's role attaches.", "Value": {"Fn::GetAtt": [sub("MeterIngestInvokePolicy${Module}"), "PolicyArn"]}},
                },
            ],
        },
    }

