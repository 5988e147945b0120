"""The main stack (one per product per region): usage tables, work queues, the pipeline
functions on their schedules, the registration API, alarms and the pipeline-health dashboard.

`DeploymentMode` gates the raw pipeline (usage table, work/deprovision-work/cleanup queues,
discoverer, aggregator, cleanup and everything referring to them): a gated resource is referred
to only by resources under the same condition or inside an `Fn::If` on it
(infra/tests/test_templates.py checks this).
"""

from __future__ import annotations

from . import alarms as al
from . import params, stages
from .api import registration_api
from .base import (
    NO_VALUE,
    PRODUCT_PREFIX,
    dlq_logical_id,
    entries,
    equals,
    if_,
    not_,
    physical_name,
    queues,
    ref,
    sub,
    table,
)
from .dashboards import body, business_widget, dashboard, insights_widget, lambda_health, queue_health, submitter_throughput
from .functions import resources

FULL = "IsFull"


def parameters() -> dict:
    p = {**params.common(), **params.product(), **params.time_rules()}
    p.update(
        {
            "DeploymentMode": {
                "Type": "String",
                "AllowedValues": ["full", "direct-submit"],
                "Default": "full",
                "Description": "full: raw usage rows, discoverer, aggregator, cleanup. direct-submit: the seller writes final hourly records.",
            },
            "AggregatedUsageTableTtlDays": {
                "Type": "Number",
                "Default": 0,
                "MinValue": 0,
                "MaxValue": 3650,
                "Description": "TTL of finalized Success records in days (0 = keep).",
            },
            "SubmitterCallsPerSecond": {
                "Type": "Number",
                "Default": 2,
                "MinValue": 1,
                "MaxValue": 10,
                "Description": "This product's share of the account and region's 10 BatchMeterUsage calls/s (docs/operations.md, \"Quota share\").",
            },
            "SubmitterMaxRecordsPerRun": {
                "Type": "Number",
                "Default": 37500,
                "MinValue": 25,
                "Description": "Ordinary-pass cap of aggregated records per submitter run.",
            },
            "UseIngestWatermark": {
                "Type": "String",
                "AllowedValues": ["true", "false"],
                "Default": "true",
                "Description": "true: usage arrives through the ingest stack's stream and the discoverer holds an hour until every shard's watermark passed it.",
            },
            "WatermarkSettleSeconds": {
                "Type": "Number",
                "Default": 120,
                "MinValue": 0,
                "MaxValue": 3600,
                "Description": "Margin past an hour's end the ingest watermark must reach before the hour is aggregated.",
            },
            "EventsRegion": {
                "Type": "String",
                "Default": "us-east-1",
                "AllowedPattern": params.REGION_PATTERN,
                "Description": "Region of the events stack and its subscribers table (AWS Marketplace emits agreement events in us-east-1).",
            },
            "ResolveCustomerRegion": {
                "Type": "String",
                "Default": "us-east-1",
                "AllowedPattern": params.REGION_PATTERN,
                "Description": "Region the register function calls ResolveCustomer in.",
            },
            "WebAclArn": {
                "Type": "String",
                "Default": "",
                "AllowedPattern": "^$|^arn:aws[a-z-]*:wafv2:[a-z0-9-]+:[0-9]{12}:regional/webacl/.+$",
                "Description": "Optional seller WAF WebACL for the registration API (empty: a baseline WebACL is created).",
            },
            "ApiThrottleRateLimit": {"Type": "Number", "Default": 10, "MinValue": 1, "MaxValue": 10000, "Description": "Registration API steady-state requests/s."},
            "ApiThrottleBurstLimit": {"Type": "Number", "Default": 20, "MinValue": 1, "MaxValue": 5000, "Description": "Registration API burst."},
        }
    )
    return p


def conditions() -> dict:
    return {
        **params.common_conditions(),
        FULL: equals(ref("DeploymentMode"), "full"),
        "UsageTtlOn": not_(equals(ref("UsageTableTtlDays"), 0)),
        "AggregatedTtlOn": not_(equals(ref("AggregatedUsageTableTtlDays"), 0)),
        "UseWatermark": equals(ref("UseIngestWatermark"), "true"),
        "CreateWebAcl": equals(ref("WebAclArn"), ""),
    }


def subscribers_arn(index: str | None = None) -> dict:
    """The events stack's subscribers table (or one of its indexes), in `EventsRegion`."""
    arn = "arn:${AWS::Partition}:dynamodb:${EventsRegion}:${AWS::AccountId}:table/" + physical_name("awsmp-subscribers", "events")
    return sub(arn + (f"/index/{index}" if index else ""))


def environment(stage: dict) -> dict:
    """The value of every variable a main-stack function may get (infra/stages.json names which
    it gets): what pipeline/src/config.rs and lifecycle/src/config.rs read. The full-mode names
    are set only in full mode, unless the function itself exists only in full mode."""
    full = (lambda value: value) if stage.get("condition") == FULL else (lambda value: if_(FULL, value, NO_VALUE))  # noqa: E731
    return {
        "AWSMP_PRODUCT_CODE": ref("ProductCode"),
        "AWSMP_DEPLOYMENT_MODE": ref("DeploymentMode"),
        "AWSMP_METERING_MODE": ref("MeteringMode"),
        "AWSMP_DRY_RUN_ACCOUNTS": ref("DryRunAccounts"),
        "AWSMP_METERING_LOCK_HOURS": ref("MeteringLockHours"),
        "AWSMP_BILLABLE_WINDOW_HOURS": ref("BillableWindowHours"),
        "AWSMP_USAGE_TABLE_TTL_DAYS": ref("UsageTableTtlDays"),
        "AWSMP_AGGREGATED_USAGE_TABLE": ref("AggregatedUsageTable"),
        "AWSMP_AGGREGATED_USAGE_TABLE_TTL_DAYS": ref("AggregatedUsageTableTtlDays"),
        "AWSMP_USAGE_TABLE": full(ref("UsageTable")),
        "AWSMP_WORK_QUEUE_URL": full(ref("WorkQueue")),
        "AWSMP_DEPROVISION_WORK_QUEUE_URL": full(ref("DeprovisionWorkQueue")),
        "AWSMP_CLEANUP_QUEUE_URL": full(ref("CleanupQueue")),
        "AWSMP_SUBSCRIBERS_TABLE": subscribers_arn(),
        "AWSMP_EVENTS_REGION": ref("EventsRegion"),
        "AWSMP_METRICS_NAMESPACE": sub(al.NAMESPACE),
        "AWSMP_INGEST_WATERMARK_TABLE": if_("UseWatermark", sub(physical_name("awsmp-ingest-watermarks", "ingest")), NO_VALUE),
        "AWSMP_WATERMARK_SETTLE_SECONDS": ref("WatermarkSettleSeconds"),
        "AWSMP_SUBMITTER_CALLS_PER_SECOND": ref("SubmitterCallsPerSecond"),
        "AWSMP_SUBMITTER_MAX_RECORDS_PER_RUN": ref("SubmitterMaxRecordsPerRun"),
        "AWSMP_SUBMITTER_TIME_BUDGET_SECS": "240",
        # The discoverer's fence: the usage stream whose shards it waits for.
        "AWSMP_USAGE_STREAM": if_("UseWatermark", sub(physical_name("awsmp-usage-events", "ingest")), NO_VALUE),
        "AWSMP_CUSTOMER_PROFILE_TABLE": ref("CustomerProfileTable"),
        "AWSMP_SUBSCRIBERS_REGION": ref("EventsRegion"),
        "AWSMP_RESOLVE_CUSTOMER_REGION": ref("ResolveCustomerRegion"),
    }


def alarm_resources() -> dict:
    """The stack's own alarms (each function's are in infra/stages.json)."""
    f = FULL
    return {
        "WorkDlqAlarm": al.dlq_depth(dlq_logical_id("WorkQueue"), "the work DLQ", f),
        "DeprovisionWorkDlqAlarm": al.dlq_depth(dlq_logical_id("DeprovisionWorkQueue"), "the deprovision-work DLQ", f),
        "CleanupDlqAlarm": al.dlq_depth(dlq_logical_id("CleanupQueue"), "the cleanup DLQ", f),
        "WorkQueueAgeAlarm": al.oldest_message("WorkQueue", "the work queue", 1800, f),
        # Well under the ~1-hour deprovisioning window: a DLQ signal would come too late.
        "DeprovisionWorkQueueAgeAlarm": al.oldest_message("DeprovisionWorkQueue", "the deprovision-work queue", 600, f),
        "UsageAggregationExpiredAlarm": al.business("UsageAggregationExpired", "discoverer", "Raw usage aged out before aggregation (lost revenue).", f),
        "UsageRecordRejectedAlarm": al.business("UsageRecordRejected", "aggregator", "Groups rejected client-side; fix the rows and re-drive within the window.", f),
        "UsageQuantityAboveApiMaximumAlarm": al.business("UsageQuantityAboveApiMaximum", "aggregator", "A group-hour's quantity exceeded the BatchMeterUsage maximum; the remainder is not billed.", f),
        "UsageSubmissionExpiredAlarm": al.query_alarm("Aggregated records expired before submission (lost revenue).", al.insights("UsageSubmissionExpired", None)),
        "UsageNeedsReconciliationAlarm": al.query_alarm("Records possibly billed with an unknown outcome at window close: reconcile (docs/operations.md).", al.insights("UsageNeedsReconciliation", None)),
        "WriteBackConflictAlarm": al.business("WriteBackConflict", "submitter", "A submitter write-back found its record finalized with another outcome: AWS's answer is not on the record; its MeteringRecordId is in the submitter's ERROR log (docs/operations.md, Write-back conflict)."),
        "UsageRecordUnprocessedAlarm": al.business("UsageRecordUnprocessed", "submitter", "Records unprocessed after the submitter's retries (they stay pending)."),
        "CustomerNotSubscribedAlarm": al.business("CustomerNotSubscribed", "submitter", "BatchMeterUsage answered CustomerNotSubscribed."),
        "BatchMeterUsageExceptionAlarm": al.business("BatchMeterUsageException", "submitter", "BatchMeterUsage failed at request level."),
        "DuplicateRecordQuantityMismatchAlarm": al.business("DuplicateRecordQuantityMismatch", "submitter", "A DuplicateRecord billed a different quantity than ours."),
        "PipelineLateUsageAlarm": al.query_alarm("Usage arrived after its group-hour was aggregated.", al.insights("LateUsage", "Service != 'kinesis-consumer'"), condition=f),
        "RegistrationApi5xxAlarm": al.alarm(
            "The registration API answered 5xx.",
            {"Namespace": "AWS/ApiGateway", "MetricName": "5XXError",
             "Dimensions": [{"Name": "ApiName", "Value": sub("${AWS::StackName}-registration")}, {"Name": "Stage", "Value": ref("StageName")}]},
            1),
    }


def dashboard_resources() -> dict:
    fns_full = stages.health(stages.of_stack("main"))
    fns_direct = stages.health([s for s in stages.of_stack("main") if s.get("condition") != FULL])
    work = [("work", "WorkQueue"), ("deprovision-work", "DeprovisionWorkQueue"), ("cleanup", "CleanupQueue")]
    qs = work + [(f"{q} DLQ", dlq_logical_id(qid)) for q, qid in work]
    submission = [
        business_widget("Submission outcomes", [("UsageSubmissionExpired", "expiry"), ("UsageNeedsReconciliation", "expiry"),
                                                ("WriteBackConflict", "submitter"), ("UsageRecordUnprocessed", "submitter"), ("CustomerNotSubscribed", "submitter"),
                                                ("DuplicateRecord", "submitter"), ("DuplicateRecordQuantityMismatch", "submitter")]),
        insights_widget("BatchMeterUsage exceptions", "BatchMeterUsageException", "Exception"),
        submitter_throughput(share=True),
    ]
    aggregation = [
        business_widget("Aggregation outcomes", [("UsageAggregationExpired", "discoverer"), ("LateUsage", "aggregator"), ("LateUsage", "cleanup")]),
        insights_widget("Rejected groups by reason", "UsageRecordRejected", "Reason"),
        business_widget("Ingest watermark lag (s)", [("IngestWatermarkLag", "discoverer")], stat="Maximum"),
    ]
    full = lambda_health(fns_full) + queue_health(qs) + aggregation + submission
    direct = lambda_health(fns_direct) + submission
    return {
        "PipelineHealthDashboard": dashboard(
            PRODUCT_PREFIX + "-pipeline-health",
            if_(FULL, body(full), body(direct)),
            "CreateDashboardCondition",
        )
    }


def build(resources_json: dict) -> dict:
    res: dict = {}
    for e in entries(resources_json, "tables", "main"):
        if e["logicalId"] == "UsageTable":
            res["UsageTable"] = table(e, ttl_condition="UsageTtlOn", condition=FULL)
        elif e["logicalId"] == "AggregatedUsageTable":
            res["AggregatedUsageTable"] = table(e, ttl_condition="AggregatedTtlOn")
        else:
            res[e["logicalId"]] = table(e)
    for e in entries(resources_json, "queues", "main"):
        res.update(queues(e, condition=FULL))
    own = stages.of_stack("main")
    for stage in own:
        res.update(resources(stages.function(stage, environment), "main"))
    res.update(stages.triggers(own))
    res.update(registration_api())
    res.update(stages.alarm_resources(own))
    res.update(alarm_resources())
    res.update(dashboard_resources())
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Transform": "AWS::Serverless-2016-10-31",
        "Description": "awsmp main stack: one product's metering pipeline and registration API in one region (generated by infra/generate.py from infra/resources.json; docs/deploy.md).",
        "Parameters": parameters(),
        "Rules": {**params.dry_run_rule(), **params.ttl_rules()},
        "Conditions": conditions(),
        "Resources": res,
        "Outputs": {
            "RegistrationUrl": {"Description": "Fulfillment URL to enter in the AWS Marketplace Management Portal.",
                                "Value": sub("https://${RegistrationApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/${StageName}/register")},
            "AggregatedUsageTableName": {"Value": ref("AggregatedUsageTable")},
            "UsageTableName": {"Condition": FULL, "Value": ref("UsageTable")},
            "MetricsNamespace": {"Value": sub(al.NAMESPACE)},
        },
    }
