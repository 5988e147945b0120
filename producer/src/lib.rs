//! awsmp-producer: ships AWS Marketplace usage events to Amazon Kinesis.
