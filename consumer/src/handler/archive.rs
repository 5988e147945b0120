//! Step 6: the billing archive (`crate::archive`). The applied events of the records before
//! the batch's first failure go to the archive after their rows are written; if the write
//! fails, the batch fails from its first archived record, and the replay — its rows already
//! hold it, so nothing is added twice — writes the archive again.

use super::{Batch, Consumer};
use crate::archive::{ArchivedEvent, archive_objects};
use crate::error::ErrorChain;

impl Consumer {
    /// Archive `archived` (events with their record index), up to the batch's failure.
    pub(super) async fn archive_applied(
        &self,
        batch: &mut Batch<'_>,
        archived: Vec<(usize, ArchivedEvent)>,
    ) {
        let Some(archive) = &self.archive else {
            return;
        };
        let failed = batch.failed.unwrap_or(usize::MAX);
        let applied: Vec<(usize, ArchivedEvent)> =
            archived.into_iter().filter(|(i, _)| *i < failed).collect();
        let Some(first) = applied.first().map(|(i, _)| *i) else {
            return;
        };
        let events: Vec<ArchivedEvent> = applied.into_iter().map(|(_, e)| e).collect();
        for object in archive_objects(&events) {
            if let Err(e) = self.with_retry(|| archive.put(&object)).await {
                tracing::error!(key = %object.key, error = %ErrorChain(&e), "billing archive write failed; the batch is retried");
                batch.fail_at(first);
                return;
            }
        }
        batch.report.archived_events = events.len() as u64;
    }
}
