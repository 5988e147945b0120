//! `tick` and `run` over every site of a multi-product, multi-region stack
//! ([`super::topology`]): one local runner per product and region, each with its consumer,
//! pipeline stages and simulator; the events site's runner also plays the events stack.
//!
//! AWS Marketplace delivers its lifecycle events in the events region only, and a license is
//! valid in every region. So the events region's simulator is the buyer's side of the
//! marketplace (its admin API subscribes, deprovisions): before the sites tick, its new
//! events are delivered to the subscription queue, and each license change is mirrored into
//! every other region's simulator (a new license is known there, a deprovisioned one stops
//! being billable there one hour after the same instant). The events those simulators emit
//! while being told are echoes of events already delivered, and are not delivered again.

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

use super::LocalEnv;
use super::topology::{Site, Topology};
use crate::runner::{Runner, TickReport};

/// `License Updated`: a license became (or stayed) active.
const LICENSE_UPDATED: &str = "License Updated - Manufacturer";
/// `License Deprovisioned`: the buyer's hour to finish begins.
const LICENSE_DEPROVISIONED: &str = "License Deprovisioned - Manufacturer";

/// One runner per site.
pub struct Sites {
    sites: Vec<(Site, Runner)>,
    /// The simulators of the regions other than the events region (admin URLs).
    other_simulators: Vec<String>,
    http: reqwest::Client,
}

/// What one tick over every site did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SitesTickReport {
    /// The instant of the tick.
    pub at: Option<DateTime<Utc>>,
    /// Lifecycle events the events region's simulator emitted, delivered to the subscription
    /// queue.
    pub lifecycle_events: usize,
    /// License changes mirrored into the other regions' simulators (one per event and region).
    pub mirrored: usize,
    /// Echo events the other regions' simulators emitted while being told (not delivered).
    pub echoes: usize,
    /// Each site's tick, by `product/region`.
    pub sites: BTreeMap<String, TickReport>,
}

impl Sites {
    /// A runner for every site of `topology` (its env file, its stream's checkpoints).
    pub async fn open(topology: &Topology) -> Result<Self> {
        let mut sites = Vec::new();
        let mut other_simulators = Vec::new();
        for site in &topology.sites {
            let env = LocalEnv::read(&site.env_file)?;
            if site.region != topology.events_region {
                let admin = env.get("AWSMP_SIM_ADMIN_URL")?.to_owned();
                if !other_simulators.contains(&admin) {
                    other_simulators.push(admin);
                }
            }
            let runner = Runner::new(env, &BTreeMap::new())
                .await?
                .with_stream_consumer(site.checkpoints.clone())
                .await
                .with_context(|| format!("the runner of {}", site.label()))?;
            sites.push((site.clone(), runner));
        }
        if sites.first().is_none_or(|(s, _)| !s.events) {
            bail!("the topology's first site must be its events site");
        }
        Ok(Self {
            sites,
            other_simulators,
            http: reqwest::Client::new(),
        })
    }

    /// The runners, by site.
    pub fn runners(&self) -> impl Iterator<Item = (&Site, &Runner)> {
        self.sites.iter().map(|(s, r)| (s, r))
    }

    /// One tick at `at` on every site: first the lifecycle (the events region's simulator's
    /// events delivered and mirrored, the subscription queue drained), then each site's tick.
    pub async fn tick(&self, at: DateTime<Utc>) -> Result<SitesTickReport> {
        let mut report = SitesTickReport {
            at: Some(at),
            ..Default::default()
        };
        let (_, events_runner) = &self.sites[0];
        if let Some(l) = &events_runner.lifecycle {
            // Before any clock moves: a mirrored deprovisioning takes the same instant.
            let events = l.take_sim_events().await?;
            report.mirrored = self.mirror(&events).await?;
            report.echoes = self.take_echoes().await?;
            report.lifecycle_events = l.enqueue(&events).await?;
            if !events.is_empty() {
                events_runner.drain().await?;
            }
        }
        // The sites are independent stacks (their own tables, queues and streams), ticked
        // concurrently as their schedules fire in AWS; two sites of one region set their
        // simulator's clock to the same instant.
        let ticks = self.sites.iter().map(|(site, runner)| async move {
            let r = runner
                .tick(at)
                .await
                .with_context(|| format!("tick of {}", site.label()))?;
            anyhow::Ok((site.label(), r))
        });
        report.sites = futures::future::try_join_all(ticks)
            .await?
            .into_iter()
            .collect();
        Ok(report)
    }

    /// Tell every other region's simulator about each license change in `events`.
    async fn mirror(&self, events: &[Value]) -> Result<usize> {
        let mut mirrored = 0;
        for e in events {
            let Some(change) = LicenseChange::of(e) else {
                continue;
            };
            for admin in &self.other_simulators {
                change.apply(&self.http, admin).await?;
                mirrored += 1;
            }
        }
        Ok(mirrored)
    }

    async fn take_echoes(&self) -> Result<usize> {
        let mut n = 0;
        for admin in &self.other_simulators {
            let v = post(&self.http, admin, "/_sim/events/take", &json!({})).await?;
            n += v["events"].as_array().map_or(0, Vec::len);
        }
        Ok(n)
    }
}

/// A license change another region's simulator must know of.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LicenseChange {
    /// A license is active (`License Updated`).
    Active {
        product: String,
        account: String,
        license: String,
    },
    /// A license is deprovisioned.
    Deprovisioned { license: String },
}

impl LicenseChange {
    fn of(event: &Value) -> Option<Self> {
        let d = &event["detail"];
        let license = d["license"]["arn"].as_str()?.to_owned();
        match event["detail-type"].as_str()? {
            LICENSE_UPDATED => Some(Self::Active {
                product: d["product"]["code"].as_str()?.to_owned(),
                account: d["acceptor"]["accountId"].as_str()?.to_owned(),
                license,
            }),
            LICENSE_DEPROVISIONED => Some(Self::Deprovisioned { license }),
            _ => None,
        }
    }

    async fn apply(&self, http: &reqwest::Client, admin: &str) -> Result<()> {
        match self {
            Self::Active {
                product,
                account,
                license,
            } => {
                let body = json!({"productCode": product, "customerAWSAccountId": account,
                                  "licenseArn": license});
                match post(http, admin, "/_sim/subscribe", &body).await {
                    Ok(_) => Ok(()),
                    // The license is already known there (the catalog's, or mirrored before).
                    Err(e) if format!("{e:#}").contains("listed twice") => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Self::Deprovisioned { license } => post(
                http,
                admin,
                "/_sim/deprovision",
                &json!({"licenseArn": license}),
            )
            .await
            .map(drop),
        }
    }
}

async fn post(http: &reqwest::Client, admin: &str, path: &str, body: &Value) -> Result<Value> {
    let resp = http
        .post(format!("{admin}{path}"))
        .json(body)
        .send()
        .await
        .with_context(|| format!("{admin}{path}"))?;
    let status = resp.status();
    let text = resp.text().await?;
    if !status.is_success() {
        bail!("{admin}{path}: HTTP {status}: {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("{admin}{path}: not JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    fn event(detail_type: &str) -> Value {
        json!({"detail-type": detail_type, "detail": {
            "product": {"code": "prod1"}, "license": {"arn": ARN},
            "acceptor": {"accountId": "111122223333"}}})
    }

    #[test]
    fn license_changes_are_read_from_the_events_that_carry_them() {
        assert_eq!(
            LicenseChange::of(&event(LICENSE_UPDATED)),
            Some(LicenseChange::Active {
                product: "prod1".into(),
                account: "111122223333".into(),
                license: ARN.into()
            })
        );
        assert_eq!(
            LicenseChange::of(&event(LICENSE_DEPROVISIONED)),
            Some(LicenseChange::Deprovisioned {
                license: ARN.into()
            })
        );
        for other in [
            "Purchase Agreement Created - Proposer",
            "Purchase Agreement Ended - Proposer",
        ] {
            assert_eq!(LicenseChange::of(&event(other)), None, "{other}");
        }
        let mut no_license = event(LICENSE_DEPROVISIONED);
        no_license["detail"]
            .as_object_mut()
            .unwrap()
            .remove("license");
        assert_eq!(LicenseChange::of(&no_license), None);
    }
}
