//! Following a stream while it is written, as Lambda's poller does: every shard is read on
//! its own — a shard with records is read again as soon as its batch is done, a caught-up
//! shard every [`SHARD_POLL_INTERVAL`](super::SHARD_POLL_INTERVAL) with the iterator it holds — so no shard waits for
//! another shard's invocation, and no poll pays for `ListShards` and `GetShardIterator`
//! again (<https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>).

use super::{EsmReport, KinesisEsm};
use anyhow::Result;
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use std::future::Future;

impl KinesisEsm {
    /// Like [`KinesisEsm::drain_concurrent`], but each shard keeps polling until `finished()`
    /// held before a poll that found the shard caught up: once the writers are done, every
    /// record they wrote is delivered, then it returns. Shards opened by a reshard after the
    /// start are left to the next drain.
    pub async fn follow<F, Fut, E, D>(&mut self, handler: F, finished: D) -> Result<EsmReport>
    where
        F: Fn(KinesisEvent) -> Fut,
        Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
        E: std::fmt::Display,
        D: Fn() -> bool + Sync,
    {
        self.run(&handler, true, Some(&finished)).await
    }
}
