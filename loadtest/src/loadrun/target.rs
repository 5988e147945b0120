//! Where a run goes, behind one interface: the local stack ([`super::local_target`]) or a
//! deployment named by the environment ([`super::deployment`]). The run's phases
//! ([`super::run`]) only ever talk to a [`RunTarget`].

use super::RunContext;
use super::collect::Scope;
use crate::conservation::{GroupHour, Inputs};
use crate::report::RunReport;
use anyhow::Result;
use awsmp_local_stack::local::LocalEnv;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};

/// What the consuming side reports besides the counters.
#[derive(Debug, Default)]
pub(super) struct ConsumeOutcome {
    /// Faults it injected or met, by class (`esm:…`, `consumer:crashes`).
    pub(super) faults: BTreeMap<String, u64>,
    /// Events the consumer rejected, by `consumer:<reason>`.
    pub(super) rejects: BTreeMap<String, u64>,
    /// What the pipeline did while the consumer consumed (overlapping stages), by
    /// `liveTicks`, `liveGroupsEnqueued`, `liveBucketsFenced` (hours the ingest fence held
    /// back), `liveSubmitterCalls`.
    pub(super) overlap: BTreeMap<String, u64>,
}

/// One target of a run, set up (its stack, stream and licenses ready) when constructed.
pub(super) trait RunTarget {
    /// Endpoints and resource names of the target.
    fn env(&self) -> &LocalEnv;
    /// The stream the run produces into.
    fn stream(&self) -> &str;
    /// The licenses the run meters against (license ARN, buyer account).
    fn licenses(&self) -> &[(String, String)];
    /// The license the run's bad inputs are injected for (`None`: the target injects none).
    fn injection_license(&self) -> Option<&(String, String)> {
        None
    }
    /// For the report's settings: where the run went, and the stream.
    fn describe(&self) -> (String, String);
    /// Drive consumption while the producers run, until production is done and the stream is
    /// caught up.
    async fn consume(&self, ctx: &RunContext<'_>) -> Result<ConsumeOutcome>;
    /// Drive (or wait for) metering until every group-hour in `scope` is terminal, or the run
    /// gives up; returns the group-hours still pending. Faults and rejects it sees go into
    /// `report`, its own settings into `settings`.
    async fn settle(
        &self,
        ctx: &RunContext<'_>,
        scope: &Scope<'_>,
        inputs: &Inputs,
        report: &mut RunReport,
        settings: &mut BTreeMap<String, String>,
    ) -> Result<BTreeSet<GroupHour>>;
    /// What was billed per group-hour in `scope`, given the quantities of the aggregated
    /// records AWS accepted (`accepted`).
    async fn billed(
        &self,
        scope: &Scope<'_>,
        accepted: BTreeMap<GroupHour, u64>,
    ) -> Result<BTreeMap<GroupHour, u64>>;
    /// When each of the run's group-hours was billed.
    async fn billed_instants(
        &self,
        scope: &Scope<'_>,
    ) -> Result<BTreeMap<GroupHour, DateTime<Utc>>>;
    /// Remove what the run created for itself.
    /// Send the run's share of usage through meter-ingest while the producers produce; `None`
    /// when the target sends none.
    async fn ingest(&self, _ctx: &RunContext<'_>) -> Result<Option<super::IngestSent>> {
        Ok(None)
    }
    /// The functions that ran as processes, with their invocations (none: not hosted).
    fn functions(&self) -> Vec<awsmp_local_stack::local::hosted::FunctionRun> {
        Vec::new()
    }
    async fn tear_down(&self) -> Result<()>;
}
