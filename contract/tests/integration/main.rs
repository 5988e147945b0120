//! One test binary for `awsmp-contract`'s integration tests.

mod time_rules;
