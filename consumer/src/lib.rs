//! awsmp-consumer: turns the usage stream into per-second usage rows.
