"""The main stack (one per product per region): usage tables, work queues, the pipeline
functions on their schedules, the registration API, alarms and the pipeline-health dashboard.

`DeploymentMode` gates the raw pipeline (usage table, work/deprovision-work/cleanup queues,
discoverer, aggregator, cleanup and everything referring to them): a gated resource is referred
to only by resources under the same condition or inside an `Fn::If` on it
(infra/tests/test_templates.py checks this).
"""

from __future__ import annotations

from . import alarms as al
from . import params
from .api import registration_api
from .base import (
    NO_VALUE,
    PRODUCT_PREFIX,
    dlq_logical_id,
    entries,
    equals,
    get_att,
    if_,
    not_,
    own_index_arn,
    physical_name,
    queues,
    ref,
    sub,
    table,
    table_arn,
)
from .dashboards import body, business_widget, dashboard, insights_widget, lambda_health, queue_health, submitter_throughput
from .functions import Function, resources, schedule, sqs_consume, sqs_send, statement

FULL = "IsFull"
METERING_PENDING = "metering_pending"
DEPROVISIONING_INDEX = "deprovisioning-pending-index"


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


def pipeline_env(gated: bool = False) -> dict:
    """What pipeline/src/config.rs reads; the full-mode names only in full mode (`gated`: the
    function itself exists only in full mode)."""
    full = (lambda value: value) if gated else (lambda value: if_(FULL, value, NO_VALUE))  # noqa: E731
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
    }


def usage(*actions: str) -> dict:
    return statement([f"dynamodb:{a}" for a in actions], [get_att("UsageTable", "Arn")])


def aggregated(*actions: str) -> dict:
    return statement([f"dynamodb:{a}" for a in actions], [get_att("AggregatedUsageTable", "Arn")])


def pending_index(table_id: str) -> dict:
    return statement(["dynamodb:Query"], [own_index_arn(table_id, METERING_PENDING)])


def deprovisioning_index() -> dict:
    return statement(["dynamodb:Query"], [subscribers_arn(DEPROVISIONING_INDEX)])


def watermark_query() -> dict:
    """The discoverer's fence reads its stream's partition of the ingest-watermark table (hash
    key `stream`, aws/src/watermark.rs): a `Query`, never a `Scan`."""
    arn = table_arn("awsmp-ingest-watermarks", "ingest")
    return if_("UseWatermark", statement(["dynamodb:Query"], [arn]), NO_VALUE)


def discoverer_env() -> dict:
    """The pipeline's environment plus the usage stream whose shards the fence waits for."""
    stream = if_("UseWatermark", sub(physical_name("awsmp-usage-events", "ingest")), NO_VALUE)
    return {**pipeline_env(gated=True), "AWSMP_USAGE_STREAM": stream}


# The discoverer's constant schedule inputs (23 meter offsets, 7 age-out shards) and its flush.
DISCOVERER_INPUTS = [{"mode": "meter", "hourOffset": h} for h in range(1, 24)] + [{"mode": "ageout", "shard": s} for s in range(7)]
FLUSH_INPUT = {"mode": "flush-deprovisioning"}
# Rules on rate() schedules each keep their own phase, so all of the discoverer's targets can fire
# in the same minute: it reserves one execution per target, so none is throttled into a late retry.
DISCOVERER_RESERVED = len(DISCOVERER_INPUTS) + 1


def functions() -> list[Function]:
    env, full_env = pipeline_env(), pipeline_env(gated=True)
    return [
        Function("Discoverer", "discoverer", "pipeline", "Enqueues pending groups per hour bucket; ages out; flushes deprovisioning licenses.",
                 discoverer_env(), [pending_index("UsageTable"), usage("GetItem", "UpdateItem"), sqs_send("WorkQueue", "DeprovisionWorkQueue"), deprovisioning_index(), watermark_query()],
                 memory=512, timeout=300, reserved=DISCOVERER_RESERVED, condition=FULL),
        Function("Aggregator", "aggregator", "pipeline", "Folds one group, validates it, commits the aggregated record, enqueues cleanup.",
                 full_env, [usage("GetItem", "Query", "UpdateItem"), aggregated("GetItem", "PutItem"), sqs_consume("WorkQueue"), sqs_consume("DeprovisionWorkQueue"), sqs_send("CleanupQueue")],
                 memory=512, timeout=20, condition=FULL),
        Function("Cleanup", "cleanup", "pipeline", "Stamps the raw rows of an aggregated group and clears their pending marker.",
                 full_env, [usage("GetItem", "UpdateItem"), sqs_consume("CleanupQueue")], memory=256, timeout=20, condition=FULL),
        Function("Submitter", "submitter", "pipeline", "Submits pending aggregated records with BatchMeterUsage and writes the results back.",
                 env, [pending_index("AggregatedUsageTable"), aggregated("GetItem", "UpdateItem"), deprovisioning_index(),
                       statement(["aws-marketplace:BatchMeterUsage"], ["*"])],
                 memory=512, timeout=300, reserved=1),
        Function("Expiry", "expiry", "pipeline", "Marks aggregated records that can no longer be billed.",
                 env, [pending_index("AggregatedUsageTable"), aggregated("UpdateItem")], memory=256, timeout=300, reserved=1),
        Function("Register", "register", "lifecycle", "Buyer registration: ResolveCustomer, in-region profile, PII-free subscriber upsert.",
                 {
                     "AWSMP_CUSTOMER_PROFILE_TABLE": ref("CustomerProfileTable"),
                     "AWSMP_SUBSCRIBERS_TABLE": subscribers_arn(),
                     "AWSMP_SUBSCRIBERS_REGION": ref("EventsRegion"),
                     "AWSMP_PRODUCT_CODE": ref("ProductCode"),
                     "AWSMP_RESOLVE_CUSTOMER_REGION": ref("ResolveCustomerRegion"),
                     "AWSMP_METRICS_NAMESPACE": sub(al.NAMESPACE),
                 },
                 # lifecycle/src/adapters/dynamodb/{profiles,subscribers}.rs: the profile and the
                 # registration stamp are each one UpdateItem (an upsert).
                 [statement(["dynamodb:UpdateItem"], [get_att("CustomerProfileTable", "Arn")]),
                  statement(["dynamodb:UpdateItem"], [subscribers_arn()]),
                  statement(["aws-marketplace:ResolveCustomer"], ["*"])],
                 memory=256, timeout=10),
    ]


def meter_rules() -> dict:
    """6 rules × 5 constant-input targets: 23 meter offsets and 7 age-out shards, every
    15 minutes; the slice comes from the input, never the clock (docs/architecture.md)."""
    inputs = DISCOVERER_INPUTS
    out = {}
    for rule in range(6):
        chunk = inputs[rule * 5 : rule * 5 + 5]
        targets = [
            (f"{p['mode']}-{p.get('hourOffset', p.get('shard'))}", "DiscovererFunction", p) for p in chunk
        ]
        out.update(schedule(f"MeterDispatch{rule + 1}Rule", "rate(15 minutes)", f"awsmp discoverer targets {rule * 5 + 1}-{rule * 5 + len(chunk)}", targets, FULL))
    out.update(schedule("FlushDeprovisioningRule", "rate(5 minutes)", "awsmp discoverer flush-deprovisioning",
                        [("flush-deprovisioning", "DiscovererFunction", FLUSH_INPUT)], FULL))
    out.update(schedule("SubmitDispatchRule", "rate(5 minutes)", "awsmp submitter and submission expiry",
                        [("submitter", "SubmitterFunction", None), ("expiry", "ExpiryFunction", None)]))
    return out


def mappings() -> dict:
    """SQS event sources: per-message failures (`ReportBatchItemFailures`); the cleanup
    mapping's concurrency times the cleanup pool stays under one partition's ~1,000 writes/s
    (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html)."""
    def esm(queue_id: str, function_id: str, concurrency: int) -> dict:
        return {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Condition": FULL,
            "Properties": {
                "EventSourceArn": get_att(queue_id, "Arn"),
                "FunctionName": ref(function_id),
                "BatchSize": 10,
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
                "ScalingConfig": {"MaximumConcurrency": concurrency},
            },
        }

    return {
        "AggregatorWorkMapping": esm("WorkQueue", "AggregatorFunction", 50),
        "AggregatorDeprovisionWorkMapping": esm("DeprovisionWorkQueue", "AggregatorFunction", 10),
        "CleanupMapping": esm("CleanupQueue", "CleanupFunction", 10),
    }


def alarm_resources() -> dict:
    f = FULL
    return {
        "DiscovererErrorsAlarm": al.errors("DiscovererFunction", "The discoverer", f),
        "AggregatorErrorsAlarm": al.errors("AggregatorFunction", "The aggregator", f),
        "SubmitterErrorsAlarm": al.errors("SubmitterFunction", "The submitter"),
        "ExpiryErrorsAlarm": al.errors("ExpiryFunction", "Submission expiry"),
        "RegisterErrorsAlarm": al.errors("RegisterFunction", "The register function"),
        "SubmitterThrottlesAlarm": al.throttles("SubmitterFunction", "The submitter"),
        "AggregatorThrottlesAlarm": al.throttles("AggregatorFunction", "The aggregator", f),
        "SubmitterDidNotRunAlarm": al.did_not_run("SubmitterFunction", "The submitter", 30),
        "DiscovererDidNotRunAlarm": al.did_not_run("DiscovererFunction", "The discoverer (sole enqueuer and age-out path)", 30, f),
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
    fns_full = [("discoverer", "DiscovererFunction"), ("aggregator", "AggregatorFunction"), ("cleanup", "CleanupFunction"),
                ("submitter", "SubmitterFunction"), ("expiry", "ExpiryFunction"), ("register", "RegisterFunction")]
    fns_direct = [f for f in fns_full if f[0] in {"submitter", "expiry", "register"}]
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
    for fn in functions():
        res.update(resources(fn, "main"))
    res.update(meter_rules())
    res.update(mappings())
    res.update(registration_api())
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
