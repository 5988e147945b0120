"""Template parameters, each validated where CloudFormation can validate it (patterns, ranges,
allowed values) and cross-checked in a `Rules` assertion where one parameter bounds another.
scripts/deploy repeats the same checks before it builds anything (docs/deploy.md, "Parameters").
"""

from __future__ import annotations

from .base import equals, not_, ref

# AWS Marketplace product codes are lowercase letters and digits (e.g. `4ml54db8vrmjuykaw1psroool`);
# they fold into every product-scoped resource name, so they are kept short enough for SQS's
# 80-character queue names (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html).
PRODUCT_CODE_PATTERN = "^[a-z0-9]{1,32}$"
# The stage folds into every name (and is the API Gateway stage): no default, never empty.
STAGE_NAME_PATTERN = "^[a-z0-9][a-z0-9-]{0,15}$"
REGION_PATTERN = "^[a-z]{2}(-gov)?-[a-z]+-[0-9]$"
ACCOUNT_LIST_PATTERN = "^$|^[0-9]{12}(,[0-9]{12})*$"
SNS_TOPIC_PATTERN = "^$|^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$"
KMS_KEY_PATTERN = "^$|^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[a-f0-9-]{36}$"
# A dry-run stack never listens to `aws.*` sources: only AWS emits those, and real agreement
# events must not reach a test stage (https://docs.aws.amazon.com/eventbridge/latest/ref/events-structure.html).
DRY_RUN_SOURCE_PREFIX_PATTERN = r"^(?!aws(\.|$))[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)*$"

# CloudWatch Logs retention values (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutRetentionPolicy.html).
LOG_RETENTION_DAYS = [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653]


def common() -> dict:
    """Parameters of every stack."""
    return {
        "StageName": {
            "Type": "String",
            "AllowedPattern": STAGE_NAME_PATTERN,
            "Description": "Stage folded into every resource name and the API stage (required, no default), e.g. prod.",
            "ConstraintDescription": "1-16 lowercase letters, digits or hyphens, starting with a letter or digit",
        },
        "MeteringMode": {
            "Type": "String",
            "AllowedValues": ["live", "dry-run"],
            "Default": "live",
            "Description": "live calls BatchMeterUsage; dry-run never does (records end DryRunSubmitted).",
        },
        "DryRunAccounts": {
            "Type": "String",
            "Default": "",
            "AllowedPattern": ACCOUNT_LIST_PATTERN,
            "Description": "Comma-separated 12-digit test accounts allowed in dry-run (required in dry-run).",
        },
        "AlarmTopicArn": {
            "Type": "String",
            "Default": "",
            "AllowedPattern": SNS_TOPIC_PATTERN,
            "Description": "Optional in-region SNS topic every alarm notifies.",
        },
        "LogRetentionDays": {
            "Type": "Number",
            "Default": 365,
            "AllowedValues": LOG_RETENTION_DAYS,
            "Description": "Retention of every log group this stack creates.",
        },
        "LogKmsKeyArn": {
            "Type": "String",
            "Default": "",
            "AllowedPattern": KMS_KEY_PATTERN,
            "Description": "Optional KMS key ARN encrypting the log groups (its policy must allow CloudWatch Logs).",
        },
        "CreateDashboard": {
            "Type": "String",
            "AllowedValues": ["true", "false"],
            "Default": "true",
            "Description": "Create this stack's CloudWatch dashboard.",
        },
    }


def product() -> dict:
    return {
        "ProductCode": {
            "Type": "String",
            "AllowedPattern": PRODUCT_CODE_PATTERN,
            "Description": "AWS Marketplace product code metered by this stack.",
            "ConstraintDescription": "1-32 lowercase letters and digits",
        }
    }


def time_rules() -> dict:
    """The lock, window and TTL parameters the pipeline and consumer read (docs/time-rules.md)."""
    return {
        "MeteringLockHours": {
            "Type": "Number",
            "Default": 1,
            "MinValue": 1,
            "MaxValue": 20,
            "Description": "Hours an hour stays open for late usage before it is aggregated (1-20).",
        },
        "BillableWindowHours": {
            "Type": "Number",
            "Default": 24,
            "MinValue": 2,
            "MaxValue": 24,
            "Description": "Hours after its end an hour can still be billed (must exceed the lock).",
        },
        "UsageTableTtlDays": {
            "Type": "Number",
            "Default": 365,
            "MinValue": 0,
            "MaxValue": 3650,
            "Description": "Raw usage row TTL in days (0 = keep; otherwise at least 2, beyond lock + window).",
        },
    }


def archive_lock(default: dict) -> dict:
    """The billing archive's Object Lock: a short GOVERNANCE retention by default (an admin with
    s3:BypassGovernanceRetention can delete a trial stage's data), COMPLIANCE for seven years
    (2557 days) where the seller chooses it for production: then nobody, root included, can delete
    a record early (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-lock.html)."""
    return {
        "ArchiveObjectLockMode": {
            "Type": "String",
            "AllowedValues": ["GOVERNANCE", "COMPLIANCE"],
            "Default": default["mode"],
            "Description": "Object Lock mode of the billing archive (COMPLIANCE for production).",
        },
        "ArchiveRetentionDays": {
            "Type": "Number",
            "Default": default["retentionDays"],
            "MinValue": 1,
            "MaxValue": 36500,
            "Description": "Days each archived billing record is locked (2557 = seven years).",
        },
    }


def common_conditions() -> dict:
    return {
        "HasAlarmTopic": not_(equals(ref("AlarmTopicArn"), "")),
        "HasLogKmsKey": not_(equals(ref("LogKmsKeyArn"), "")),
        "CreateDashboardCondition": equals(ref("CreateDashboard"), "true"),
    }


def dry_run_rule() -> dict:
    return {
        "DryRunNeedsTestAccounts": {
            "RuleCondition": equals(ref("MeteringMode"), "dry-run"),
            "Assertions": [
                {
                    "Assert": not_(equals(ref("DryRunAccounts"), "")),
                    "AssertDescription": "dry-run needs DryRunAccounts (the test-account allowlist)",
                }
            ],
        }
    }


def ttl_rules() -> dict:
    """A raw row must outlive the lock and the window: with TTL on, 2 days or more (lock ≤ 20 h
    and window ≤ 24 h, so 2 days is always beyond both). 1 day is refused."""
    return {
        "UsageTtlBeyondLockAndWindow": {
            "Assertions": [
                {
                    "Assert": not_(equals(ref("UsageTableTtlDays"), "1")),
                    "AssertDescription": "UsageTableTtlDays is 0 (keep) or at least 2 (beyond lock + window)",
                }
            ]
        }
    }
