"""Building blocks of the SAM templates: intrinsic functions, physical names, and the tables,
queues, streams and buckets of infra/resources.json turned into CloudFormation resources.

Every data resource of a template comes from infra/resources.json through this module, so the
templates and the local stack share one definition (infra/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

INFRA = Path(__file__).resolve().parent.parent
RESOURCES = INFRA / "resources.json"

NO_VALUE = {"Ref": "AWS::NoValue"}


def ref(name: str) -> dict:
    return {"Ref": name}


def get_att(resource: str, attribute: str) -> dict:
    return {"Fn::GetAtt": [resource, attribute]}


def sub(text: str, variables: dict | None = None) -> dict:
    return {"Fn::Sub": [text, variables] if variables else text}


def if_(condition: str, then, otherwise) -> dict:
    return {"Fn::If": [condition, then, otherwise]}


def equals(a, b) -> dict:
    return {"Fn::Equals": [a, b]}


def not_(condition) -> dict:
    return {"Fn::Not": [condition]}


def load_resources() -> dict:
    return json.loads(RESOURCES.read_text(encoding="utf-8"))


# Physical names: the local name's `awsmp` becomes the stack's prefix. The events stack is
# shared by every product of a stage; main and ingest stacks belong to one product.
EVENTS_PREFIX = "awsmp-${StageName}"
PRODUCT_PREFIX = "awsmp-${StageName}-${ProductCode}"


def prefix_for(stack: str) -> str:
    return EVENTS_PREFIX if stack == "events" else PRODUCT_PREFIX


def physical_name(local_name: str, stack: str) -> str:
    """`awsmp-usage` → `awsmp-${StageName}-${ProductCode}-usage` (a `Fn::Sub` template)."""
    assert local_name.startswith("awsmp-"), local_name
    return prefix_for(stack) + local_name[len("awsmp") :]


def local_name(physical: str) -> str:
    """The inverse of `physical_name`: `awsmp-${StageName}-${ProductCode}-usage` → `awsmp-usage`."""
    for prefix in (PRODUCT_PREFIX, EVENTS_PREFIX):
        if physical.startswith(prefix + "-"):
            return "awsmp" + physical[len(prefix) :]
    raise ValueError(f"not a physical name: {physical}")


def table_arn(local_name: str, stack: str, region: str = "${AWS::Region}") -> dict:
    """ARN of a table of another stack, by its deterministic physical name."""
    return sub(
        f"arn:${{AWS::Partition}}:dynamodb:{region}:${{AWS::AccountId}}:table/"
        + physical_name(local_name, stack)
    )


def index_arn(local_name: str, stack: str, index: str, region: str = "${AWS::Region}") -> dict:
    return sub(
        f"arn:${{AWS::Partition}}:dynamodb:{region}:${{AWS::AccountId}}:table/"
        + physical_name(local_name, stack)
        + f"/index/{index}"
    )


def own_index_arn(logical_id: str, index: str) -> dict:
    return sub(f"${{{logical_id}.Arn}}/index/{index}")


def _key_schema(entry: dict) -> list:
    schema = [{"AttributeName": entry["hashKey"]["name"], "KeyType": "HASH"}]
    if "rangeKey" in entry:
        schema.append({"AttributeName": entry["rangeKey"]["name"], "KeyType": "RANGE"})
    return schema


def _attributes(entry: dict) -> list:
    seen: dict[str, str] = {}
    for holder in [entry, *entry.get("gsis", [])]:
        for key in ("hashKey", "rangeKey"):
            if key in holder:
                seen.setdefault(holder[key]["name"], holder[key]["type"])
    return [{"AttributeName": n, "AttributeType": t} for n, t in seen.items()]


def _projection(gsi: dict) -> dict:
    p = {"ProjectionType": gsi["projection"]["type"]}
    if "nonKeyAttributes" in gsi["projection"]:
        p["NonKeyAttributes"] = list(gsi["projection"]["nonKeyAttributes"])
    return p


def table(entry: dict, ttl_condition: str | None = None, condition: str | None = None) -> dict:
    """A DynamoDB table from its resources.json entry: on-demand, encrypted, point-in-time
    recovery, `Retain` on delete and replace (usage is money). `ttl_condition` names the
    condition under which its TTL is on (a TTL of 0 days omits the specification)."""
    props: dict = {
        "TableName": sub(physical_name(entry["name"], entry["stack"])),
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": _attributes(entry),
        "KeySchema": _key_schema(entry),
        "SSESpecification": {"SSEEnabled": True},
        "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
    }
    if entry.get("gsis"):
        props["GlobalSecondaryIndexes"] = [
            {"IndexName": g["name"], "KeySchema": _key_schema(g), "Projection": _projection(g)}
            for g in entry["gsis"]
        ]
    if "ttlAttribute" in entry:
        spec = {"AttributeName": entry["ttlAttribute"], "Enabled": True}
        props["TimeToLiveSpecification"] = if_(ttl_condition, spec, NO_VALUE) if ttl_condition else spec
    res = {
        "Type": "AWS::DynamoDB::Table",
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": props,
    }
    if condition:
        res["Condition"] = condition
    return res


def dlq_logical_id(queue_logical_id: str) -> str:
    return queue_logical_id.replace("Queue", "DeadLetterQueue")


def queues(entry: dict, condition: str | None = None) -> dict:
    """An SQS queue (SSE on, SQS-managed keys) and, if the entry has one, its DLQ with the
    redrive policy; DLQs keep messages the maximum 14 days
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html)."""
    out: dict = {}
    props: dict = {
        "QueueName": sub(physical_name(entry["name"], entry["stack"])),
        "VisibilityTimeout": entry["visibilityTimeoutSeconds"],
        "SqsManagedSseEnabled": True,
        "MessageRetentionPeriod": MAX_SQS_RETENTION_SECONDS,
    }
    dlq = entry.get("dlq")
    if dlq:
        dlq_id = dlq_logical_id(entry["logicalId"])
        out[dlq_id] = {
            "Type": "AWS::SQS::Queue",
            "Properties": {
                "QueueName": sub(physical_name(dlq["name"], entry["stack"])),
                "SqsManagedSseEnabled": True,
                "MessageRetentionPeriod": MAX_SQS_RETENTION_SECONDS,
            },
        }
        props["RedrivePolicy"] = {
            "deadLetterTargetArn": get_att(dlq_id, "Arn"),
            "maxReceiveCount": dlq["maxReceiveCount"],
        }
    out[entry["logicalId"]] = {"Type": "AWS::SQS::Queue", "Properties": props}
    if condition:
        for res in out.values():
            res["Condition"] = condition
    return out


# SQS keeps a message at most 14 days (MessageRetentionPeriod, API_SetQueueAttributes above).
MAX_SQS_RETENTION_SECONDS = 1_209_600


def stream(entry: dict) -> dict:
    """The usage stream: on-demand or provisioned (`StreamMode`, `ShardCount`), encrypted with
    the AWS-managed Kinesis key, retention from `StreamRetentionHours`
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-kinesis-stream.html)."""
    return {
        "Type": "AWS::Kinesis::Stream",
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": {
            "Name": sub(physical_name(entry["name"], entry["stack"])),
            "StreamModeDetails": {"StreamMode": ref("StreamMode")},
            "ShardCount": if_("IsProvisionedStream", ref("ShardCount"), NO_VALUE),
            "RetentionPeriodHours": ref("StreamRetentionHours"),
            "StreamEncryption": {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"},
        },
    }


def bucket(entry: dict) -> dict:
    """The billing archive: versioned, Object Lock in the mode and for the days the stack's
    parameters say (`params.archive_lock`), SSE-S3, no public access
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-lock.html)."""
    return {
        "Type": "AWS::S3::Bucket",
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": {
            "VersioningConfiguration": {"Status": "Enabled" if entry["versioned"] else "Suspended"},
            "ObjectLockEnabled": True,
            "ObjectLockConfiguration": {
                "ObjectLockEnabled": "Enabled",
                "Rule": {
                    "DefaultRetention": {"Mode": ref("ArchiveObjectLockMode"), "Days": ref("ArchiveRetentionDays")}
                },
            },
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
        },
    }


def entries(resources: dict, kind: str, stack: str) -> list[dict]:
    return [e for e in resources[kind] if e["stack"] == stack]


def entry(resources: dict, logical_id: str) -> dict:
    for kind in ("tables", "queues", "streams", "buckets"):
        for e in resources[kind]:
            if e["logicalId"] == logical_id:
                return e
    raise KeyError(logical_id)
