"""The AWS-vended metrics the templates may alarm on or chart: per namespace, the documented
metric names and the documented dimension combinations, each table beside the AWS page it is
taken from. A metric of these namespaces is not ours to emit; it is checked against this table
instead (infra/tests/test_metrics_emitted.py), so a misspelt name or a dimension the service
does not publish fails."""

from __future__ import annotations

# https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
LAMBDA = {
    "metrics": {
        "Invocations", "Errors", "DeadLetterErrors", "DestinationDeliveryFailures", "Throttles",
        "OversizedRecordCount", "ProvisionedConcurrencyInvocations",
        "ProvisionedConcurrencySpilloverInvocations", "RecursiveInvocationsDropped", "Duration",
        "PostRuntimeExtensionsDuration", "IteratorAge", "OffsetLag", "ConcurrentExecutions",
        "ProvisionedConcurrentExecutions", "ProvisionedConcurrencyUtilization",
        "UnreservedConcurrentExecutions", "ClaimedAccountConcurrency", "AsyncEventsReceived",
        "AsyncEventAge", "AsyncEventsDropped",
    },
    # "Using Lambda function metrics", dimensions: all functions (none), per function, per
    # alias or version (Resource), per executed version.
    "dimension_sets": [set(), {"FunctionName"}, {"FunctionName", "Resource"}, {"FunctionName", "ExecutedVersion"}],
}

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html
SQS = {
    "metrics": {
        "ApproximateAgeOfOldestMessage", "ApproximateNumberOfGroupsWithInflightMessages",
        "ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesVisible", "NumberOfDeduplicatedSentMessages",
        "NumberOfEmptyReceives", "NumberOfMessagesDeleted", "NumberOfMessagesReceived",
        "NumberOfMessagesSent", "SentMessageSize",
    },
    # The only dimension Amazon SQS sends to CloudWatch is QueueName.
    "dimension_sets": [{"QueueName"}],
}

# https://docs.aws.amazon.com/streams/latest/dev/monitoring-with-cloudwatch.html
KINESIS = {
    "metrics": {
        "GetRecords.Bytes", "GetRecords.IteratorAge", "GetRecords.IteratorAgeMilliseconds",
        "GetRecords.Latency", "GetRecords.Records", "GetRecords.Success", "IncomingBytes",
        "IncomingRecords", "PutRecord.Bytes", "PutRecord.Latency", "PutRecord.Success",
        "PutRecords.Bytes", "PutRecords.Latency", "PutRecords.Records", "PutRecords.Success",
        "PutRecords.TotalRecords", "PutRecords.SuccessfulRecords", "PutRecords.FailedRecords",
        "PutRecords.ThrottledRecords", "ReadProvisionedThroughputExceeded",
        "SubscribeToShard.RateExceeded", "SubscribeToShard.Success", "SubscribeToShardEvent.Bytes",
        "SubscribeToShardEvent.MillisBehindLatest", "SubscribeToShardEvent.Records",
        "SubscribeToShardEvent.Success", "WriteProvisionedThroughputExceeded",
        # Enhanced shard-level metrics.
        "IteratorAgeMilliseconds", "OutgoingBytes", "OutgoingRecords",
    },
    # Stream-level metrics by StreamName; enhanced shard-level ones by StreamName and ShardId;
    # enhanced fan-out ones by StreamName and ConsumerName.
    "dimension_sets": [{"StreamName"}, {"StreamName", "ShardId"}, {"StreamName", "ConsumerName"}],
}

# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/metrics-dimensions.html
DYNAMODB = {
    "metrics": {
        "AccountMaxReads", "AccountMaxTableLevelReads", "AccountMaxTableLevelWrites",
        "AccountMaxWrites", "AccountProvisionedReadCapacityUtilization",
        "AccountProvisionedWriteCapacityUtilization", "AgeOfOldestUnreplicatedRecord",
        "ConditionalCheckFailedRequests", "ConsumedChangeDataCaptureUnits",
        "ConsumedReadCapacityUnits", "ConsumedWriteCapacityUnits", "FailedToReplicateRecordCount",
        "MaxProvisionedTableReadCapacityUtilization", "MaxProvisionedTableWriteCapacityUtilization",
        "OnlineIndexConsumedWriteCapacity", "OnlineIndexPercentageProgress",
        "OnlineIndexThrottleEvents", "PendingReplicationCount", "ProvisionedReadCapacityUnits",
        "ProvisionedWriteCapacityUnits", "ReadThrottleEvents", "ReplicationLatency",
        "ReturnedBytes", "ReturnedItemCount", "ReturnedRecordsCount", "SuccessfulRequestLatency",
        "SystemErrors", "TimeToLiveDeletedItemCount", "ThrottledPutRecordCount",
        "ThrottledRequests", "TransactionConflict", "UserErrors", "WriteThrottleEvents",
    },
    # Table, index, operation and replica dimensions, as the page lists them per metric.
    "dimension_sets": [
        set(), {"TableName"}, {"TableName", "GlobalSecondaryIndexName"}, {"TableName", "Operation"},
        {"TableName", "ReceivingRegion"}, {"TableName", "StreamLabel", "Operation"},
        {"TableName", "DelegatedOperation"}, {"TableName", "GlobalSecondaryIndexName", "DelegatedOperation"},
    ],
}

# https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-metrics-and-dimensions.html
API_GATEWAY = {
    "metrics": {"4XXError", "5XXError", "CacheHitCount", "CacheMissCount", "Count", "IntegrationLatency", "Latency"},
    # REST APIs: per API, per API stage, per API method (ApiName, Method, Resource, Stage).
    "dimension_sets": [{"ApiName"}, {"ApiName", "Stage"}, {"ApiName", "Method", "Resource", "Stage"}],
}

VENDED = {
    "AWS/Lambda": LAMBDA,
    "AWS/SQS": SQS,
    "AWS/Kinesis": KINESIS,
    "AWS/DynamoDB": DYNAMODB,
    "AWS/ApiGateway": API_GATEWAY,
}


def vended_problem(namespace: str, name: str, dimensions: set[str]) -> str | None:
    """Why `name` with `dimensions` is not a documented metric of `namespace`, or None."""
    table = VENDED.get(namespace)
    if table is None:
        return f"namespace {namespace} is neither ours nor one of {sorted(VENDED)}"
    if name not in table["metrics"]:
        return f"{namespace} documents no metric {name}"
    if set(dimensions) not in table["dimension_sets"]:
        return (f"{namespace} {name} is not published with dimensions {sorted(dimensions)} "
                f"(documented: {[sorted(s) for s in table['dimension_sets']]})")
    return None
