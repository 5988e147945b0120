"""The events stack (us-east-1, shared by every product of a stage): AWS Marketplace agreement
and license events → SQS (+DLQ) → the subscription function; the subscribers table; the
deprovision-cleanup function every 15 minutes; alarms and a dashboard.

AWS Marketplace emits these events on the default bus in us-east-1 only
(https://docs.aws.amazon.com/marketplace/latest/userguide/saas-eventbridge-integration.html). In dry-run the
rule listens to a stage-scoped source of the seller's test tooling instead: never `aws.*`.
"""

from __future__ import annotations

from . import alarms as al
from . import params
from .base import EVENTS_PREFIX, dlq_logical_id, entries, equals, get_att, if_, queues, ref, sub, table
from .dashboards import body, dashboard, lambda_health, queue_health
from .functions import Function, resources, schedule, sqs_consume, sqs_send, statement

AGREEMENT_SOURCE = "aws.agreement-marketplace"
# Both role suffixes: the seller is the manufacturer, and may be the proposer of a private offer.
DETAIL_TYPES = [
    f"{event} - {role}"
    for event in (
        "Purchase Agreement Created",
        "Purchase Agreement Amended",
        "Purchase Agreement Ended",
        "License Updated",
        "License Deprovisioned",
    )
    for role in ("Manufacturer", "Proposer")
]
DEPROVISIONING_INDEX = "deprovisioning-pending-index"
# The events stack is shared by a stage's products: its functions' EMF namespace has no product.
METRICS_NAMESPACE = "awsmp/${StageName}"


def parameters() -> dict:
    p = params.common()
    p["DryRunEventSourcePrefix"] = {
        "Type": "String",
        "Default": "awsmp.test",
        "AllowedPattern": params.DRY_RUN_SOURCE_PREFIX_PATTERN,
        "Description": "Dry-run only: the rule listens to source <prefix>.<StageName> (never aws.*).",
    }
    return p


def functions() -> list[Function]:
    subscribers = get_att("SubscribersTable", "Arn")
    index = lambda name: sub(f"${{SubscribersTable.Arn}}/index/{name}")  # noqa: E731
    return [
        Function(
            "Subscription", "subscription", "lifecycle",
            "Applies AWS Marketplace agreement and license events to the subscribers table.",
            {
                "AWSMP_SUBSCRIBERS_TABLE": ref("SubscribersTable"),
                "AWSMP_SUBSCRIPTION_DLQ_URL": ref(dlq_logical_id("SubscriptionEventsQueue")),
                "AWSMP_METRICS_NAMESPACE": sub(METRICS_NAMESPACE),
            },
            # lifecycle/src/adapters/dynamodb/subscribers.rs: every change is an UpdateItem, an
            # amendment reads the row back (GetItem), an agreement-level event finds its licenses
            # on agreementId-index; a malformed event goes to the DLQ (lifecycle/src/adapters/sqs.rs).
            [
                statement(["dynamodb:GetItem", "dynamodb:UpdateItem"], [subscribers]),
                statement(["dynamodb:Query"], [index("agreementId-index")]),
                sqs_consume("SubscriptionEventsQueue"),
                sqs_send(dlq_logical_id("SubscriptionEventsQueue")),
            ],
            memory=256, timeout=10,
        ),
        Function(
            "DeprovisionCleanup", "deprovision-cleanup", "lifecycle",
            "Finalizes deprovisioning licenses to inactive once their flush window has elapsed.",
            {"AWSMP_SUBSCRIBERS_TABLE": ref("SubscribersTable"), "AWSMP_METRICS_NAMESPACE": sub(METRICS_NAMESPACE)},
            [statement(["dynamodb:Query"], [index(DEPROVISIONING_INDEX)]), statement(["dynamodb:UpdateItem"], [subscribers])],
            memory=256, timeout=60, reserved=1,
        ),
    ]


def event_wiring() -> dict:
    source = if_("IsDryRun", sub("${DryRunEventSourcePrefix}.${StageName}"), AGREEMENT_SOURCE)
    return {
        "AgreementEventsRule": {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "Description": "AWS Marketplace agreement and license events to the subscription queue",
                "EventPattern": {"source": [source], "detail-type": DETAIL_TYPES},
                "State": "ENABLED",
                "Targets": [{"Id": "subscription-events", "Arn": get_att("SubscriptionEventsQueue", "Arn")}],
            },
        },
        "SubscriptionEventsQueuePolicy": {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "Queues": [ref("SubscriptionEventsQueue")],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "events.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": get_att("SubscriptionEventsQueue", "Arn"),
                            "Condition": {"ArnEquals": {"aws:SourceArn": get_att("AgreementEventsRule", "Arn")}},
                        }
                    ],
                },
            },
        },
        "SubscriptionMapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "EventSourceArn": get_att("SubscriptionEventsQueue", "Arn"),
                "FunctionName": ref("SubscriptionFunction"),
                "BatchSize": 10,
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
                "ScalingConfig": {"MaximumConcurrency": 2},
            },
        },
        **schedule(
            "DeprovisionCleanupRule", "rate(15 minutes)", "awsmp deprovision-cleanup",
            [("deprovision-cleanup", "DeprovisionCleanupFunction", None)],
        ),
    }


def alarm_resources() -> dict:
    return {
        "SubscriptionErrorsAlarm": al.errors("SubscriptionFunction", "The subscription function"),
        "SubscriptionDlqAlarm": al.dlq_depth(dlq_logical_id("SubscriptionEventsQueue"), "the subscription-events DLQ"),
        "SubscriptionQueueAgeAlarm": al.oldest_message("SubscriptionEventsQueue", "the subscription-events queue", 900),
        "DeprovisionCleanupErrorsAlarm": al.errors("DeprovisionCleanupFunction", "Deprovision cleanup"),
        "DeprovisionCleanupDidNotRunAlarm": al.did_not_run("DeprovisionCleanupFunction", "Deprovision cleanup (sole finalizer of deprovisioning)", 60),
    }


def build(resources_json: dict) -> dict:
    res: dict = {}
    for e in entries(resources_json, "tables", "events"):
        res[e["logicalId"]] = table(e)
    for e in entries(resources_json, "queues", "events"):
        res.update(queues(e))
    for fn in functions():
        res.update(resources(fn, "events"))
    res.update(event_wiring())
    res.update(alarm_resources())
    widgets = lambda_health([("subscription", "SubscriptionFunction"), ("deprovision-cleanup", "DeprovisionCleanupFunction")]) + queue_health(
        [("subscription-events", "SubscriptionEventsQueue"), ("subscription-events DLQ", dlq_logical_id("SubscriptionEventsQueue"))]
    )
    res["EventsDashboard"] = dashboard(EVENTS_PREFIX + "-events", body(widgets), "CreateDashboardCondition")
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Transform": "AWS::Serverless-2016-10-31",
        "Description": "awsmp events stack (us-east-1, shared by a stage's products): subscription lifecycle (generated by infra/generate.py from infra/resources.json; docs/deploy.md).",
        "Parameters": parameters(),
        "Rules": params.dry_run_rule(),
        "Conditions": {**params.common_conditions(), "IsDryRun": equals(ref("MeteringMode"), "dry-run")},
        "Resources": res,
        "Outputs": {
            "SubscribersTableName": {"Value": ref("SubscribersTable")},
            "SubscribersTableArn": {"Value": get_att("SubscribersTable", "Arn")},
        },
    }
