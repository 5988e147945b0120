"""One Lambda function per Rust binary, with its own log group and its own role.

Each function is `provided.al2023` on arm64, built by cargo-lambda (`scripts/build-lambdas`;
`sam build` reads the same `Metadata`), and configured only through the environment variables
its handler reads (pipeline/src/config.rs, consumer/src/config.rs, meter-ingest/src/config.rs). Its role grants exactly the
statements given here; infra/tests/test_least_privilege.py proves none is wider than the
function's own resources.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .base import NO_VALUE, get_att, if_, ref, sub

# Crate directory and Cargo package of every binary (CodeUri is relative to the template).
CRATES = {
    "pipeline": "awsmp-pipeline",
    "consumer": "awsmp-consumer",
    "meter-ingest": "awsmp-meter-ingest",
    "lifecycle": "awsmp-lifecycle",
}


@dataclass
class Function:
    """A Lambda: `stem` names its resources (`<stem>Function`, `<stem>Role`, `<stem>LogGroup`)."""

    stem: str
    binary: str
    crate: str
    description: str
    env: dict
    statements: list
    memory: int = 256
    timeout: int = 30
    reserved: int | None = None
    condition: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def function_id(self) -> str:
        return f"{self.stem}Function"

    @property
    def role_id(self) -> str:
        return f"{self.stem}Role"

    @property
    def log_group_id(self) -> str:
        return f"{self.stem}LogGroup"


def statement(actions: list[str], resources: list) -> dict:
    return {"Effect": "Allow", "Action": sorted(actions), "Resource": resources}


def sqs_consume(queue_id: str) -> dict:
    """What a Lambda SQS event source mapping needs on its queue
    (https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html#events-sqs-permissions)."""
    return statement(
        [
            "sqs:ChangeMessageVisibility",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:ReceiveMessage",
        ],
        [get_att(queue_id, "Arn")],
    )


def sqs_send(*queue_ids: str) -> dict:
    """`SendMessage` also covers `SendMessageBatch`
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html)."""
    return statement(["sqs:SendMessage"], [get_att(q, "Arn") for q in queue_ids])


def kinesis_consume(stream_id: str) -> dict:
    """What a Lambda Kinesis event source mapping needs on its stream
    (https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-permissions.html)."""
    return statement(
        [
            "kinesis:DescribeStream",
            "kinesis:DescribeStreamSummary",
            "kinesis:GetRecords",
            "kinesis:GetShardIterator",
            "kinesis:ListShards",
        ],
        [get_att(stream_id, "Arn")],
    )


def log_group_name(stack: str, binary: str) -> dict:
    scope = "${StageName}" if stack == "events" else "${StageName}/${ProductCode}"
    return sub(f"/awsmp/{scope}/{binary}")


def resources(fn: Function, stack: str) -> dict:
    """The log group, role and function of `fn`."""
    cond = {"Condition": fn.condition} if fn.condition else {}
    log_group = {
        "Type": "AWS::Logs::LogGroup",
        **cond,
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": {
            "LogGroupName": log_group_name(stack, fn.binary),
            "RetentionInDays": ref("LogRetentionDays"),
            "KmsKeyId": if_("HasLogKmsKey", ref("LogKmsKeyArn"), NO_VALUE),
        },
    }
    logs = statement(
        ["logs:CreateLogStream", "logs:PutLogEvents"], [get_att(fn.log_group_id, "Arn")]
    )
    role = {
        "Type": "AWS::IAM::Role",
        **cond,
        "Properties": {
            "Description": sub(f"awsmp {fn.binary} ({stack} stack, ${{StageName}})"),
            "AssumeRolePolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            },
            "Policies": [
                {
                    "PolicyName": fn.binary,
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [logs, *fn.statements],
                    },
                }
            ],
        },
    }
    props = {
        "Description": fn.description,
        "CodeUri": f"../{fn.crate}",
        "Handler": "bootstrap",
        "Runtime": "provided.al2023",
        "Architectures": ["arm64"],
        "MemorySize": fn.memory,
        "Timeout": fn.timeout,
        "Role": get_att(fn.role_id, "Arn"),
        "LoggingConfig": {"LogGroup": ref(fn.log_group_id)},
        "Environment": {"Variables": fn.env},
        **fn.extra,
    }
    if fn.reserved is not None:
        props["ReservedConcurrentExecutions"] = fn.reserved
    function = {
        "Type": "AWS::Serverless::Function",
        **cond,
        "Metadata": {
            "BuildMethod": "rust-cargolambda",
            "BuildProperties": {"Binary": fn.binary},
        },
        "Properties": props,
    }
    return {fn.log_group_id: log_group, fn.role_id: role, fn.function_id: function}


def schedule(
    rule_id: str, expression: str, description: str, targets: list[tuple[str, str, dict | None]],
    condition: str | None = None,
) -> dict:
    """An EventBridge schedule rule with its targets (`(target id, function id, constant
    input)`) and one invoke permission per function, scoped to the rule."""
    cond = {"Condition": condition} if condition else {}
    rule_targets = []
    for target_id, function_id, payload in targets:
        t = {"Id": target_id, "Arn": get_att(function_id, "Arn")}
        if payload is not None:
            t["Input"] = payload_json(payload)
        rule_targets.append(t)
    out = {
        rule_id: {
            "Type": "AWS::Events::Rule",
            **cond,
            "Properties": {
                "Description": description,
                "ScheduleExpression": expression,
                "State": "ENABLED",
                "Targets": rule_targets,
            },
        }
    }
    for function_id in sorted({f for _, f, _ in targets}):
        out[f"{rule_id}{function_id}Permission"] = {
            "Type": "AWS::Lambda::Permission",
            **cond,
            "Properties": {
                "Action": "lambda:InvokeFunction",
                "FunctionName": ref(function_id),
                "Principal": "events.amazonaws.com",
                "SourceArn": get_att(rule_id, "Arn"),
            },
        }
    return out


def payload_json(payload: dict) -> str:
    return json.dumps(payload, separators=(",", ":"))
