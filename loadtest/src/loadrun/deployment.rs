//! A real deployment as a run's target, named by the environment (`AWSMP_USAGE_STREAM`, the
//! table names, `AWS_REGION`, credentials; `AWS_ENDPOINT_URL_<SERVICE>` if set). Its own
//! consumer and schedules do the work: the run produces, waits until every group-hour of its
//! licenses is terminal, and takes the `Success` records of aggregated usage as billed.

use super::collect::{Scope, collect_tables, pending_hours, query_license, text};
use super::counters::RunCounters;
use super::target::{ConsumeOutcome, RunTarget};
use super::{RunContext, RunSpec, licenses_needed};
use crate::conservation::{GroupHour, Inputs};
use crate::faults::FaultClass;
use crate::report::RunReport;
use anyhow::{Result, bail};
use awsmp_local_stack::local::LocalEnv;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Fault classes that need the local stack (its consumer, pipeline or simulator).
const SIMULATED_ONLY: [FaultClass; 5] = [
    FaultClass::ConsumerCrashes,
    FaultClass::DuplicateDeliveries,
    FaultClass::MarketplaceFaults,
    FaultClass::SubmitterCrashes,
    FaultClass::ClockJumps,
];

/// How often a run polls a deployment's tables while waiting.
const POLL_EVERY: Duration = Duration::from_secs(15);

/// A run against a deployment.
pub(super) struct DeploymentTarget {
    env: LocalEnv,
    stream: String,
    licenses: Vec<(String, String)>,
}

impl DeploymentTarget {
    /// Check the licenses and fault classes; name the deployment from the environment.
    pub(super) fn set_up(spec: &RunSpec, licenses: &[(String, String)]) -> Result<Self> {
        let w = &spec.produce.workload;
        let needed = licenses_needed(spec);
        anyhow::ensure!(
            licenses.len() >= needed,
            "{} groups over {} dimensions need {needed} licenses; {} given",
            w.groups,
            w.dimensions.len(),
            licenses.len()
        );
        if let Some(c) = SIMULATED_ONLY.iter().find(|c| spec.produce.faults.has(**c)) {
            bail!(
                "fault class {c} exists only on the local stack; against a deployment only producer faults apply"
            );
        }
        let env = LocalEnv::from_process();
        let stream = match &spec.stream {
            Some(name) => name.clone(),
            None => env.get("AWSMP_USAGE_STREAM")?.to_owned(),
        };
        Ok(Self {
            env,
            stream,
            licenses: licenses[..needed].to_vec(),
        })
    }
}

impl RunTarget for DeploymentTarget {
    fn env(&self) -> &LocalEnv {
        &self.env
    }

    fn stream(&self) -> &str {
        &self.stream
    }

    fn licenses(&self) -> &[(String, String)] {
        &self.licenses
    }

    fn describe(&self) -> (String, String) {
        (
            format!("deployment (stream {})", self.stream),
            self.stream.clone(),
        )
    }

    /// The deployment's own consumer reads the stream.
    async fn consume(&self, _ctx: &RunContext<'_>) -> Result<ConsumeOutcome> {
        Ok(ConsumeOutcome::default())
    }

    /// Wait until every unit is in a row or rejected and no group-hour of ours is pending.
    async fn settle(
        &self,
        ctx: &RunContext<'_>,
        scope: &Scope<'_>,
        inputs: &Inputs,
        _report: &mut RunReport,
        _settings: &mut BTreeMap<String, String>,
    ) -> Result<BTreeSet<GroupHour>> {
        ctx.progress.phase("waiting for the deployment");
        let produced_total: u64 =
            inputs.produced.values().sum::<u64>() + inputs.producer_returned.values().sum::<u64>();
        loop {
            let mut probe = Inputs::default();
            let accepted = collect_tables(&self.env, scope, &mut probe).await?;
            RunCounters::set(&ctx.counters.billed, accepted.len() as u64);
            let accounted =
                probe.rows.values().sum::<u64>() + probe.consumer_rejected.values().sum::<u64>();
            let pending = pending_hours(&self.env, &self.licenses, scope).await?;
            if (accounted >= produced_total && pending.is_empty()) || Instant::now() > ctx.deadline
            {
                return Ok(pending);
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// The records AWS accepted are the billing record.
    async fn billed(
        &self,
        _scope: &Scope<'_>,
        accepted: BTreeMap<GroupHour, u64>,
    ) -> Result<BTreeMap<GroupHour, u64>> {
        Ok(accepted)
    }

    /// When the submitter recorded `Success` (its write-back time).
    async fn billed_instants(
        &self,
        scope: &Scope<'_>,
    ) -> Result<BTreeMap<GroupHour, DateTime<Utc>>> {
        let ddb = self.env.dynamodb().await?;
        let table = self.env.get("AWSMP_AGGREGATED_USAGE_TABLE")?;
        let mut out = BTreeMap::new();
        for license in scope.licenses {
            for item in query_license(&ddb, table, license).await? {
                let s = |k: &str| text(&item, k);
                if s("meteringStatus") != "Success" {
                    continue;
                }
                if let Ok(at) = DateTime::parse_from_rfc3339(&s("updatedAt")) {
                    let gh = (
                        license.clone(),
                        s("customerAWSAccountId"),
                        s("dimension"),
                        s("hourBucket"),
                    );
                    out.insert(gh, at.with_timezone(&Utc));
                }
            }
        }
        Ok(out)
    }

    /// A deployment's stream and tables are its own.
    async fn tear_down(&self) -> Result<()> {
        Ok(())
    }
}
