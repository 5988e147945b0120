//! A load run over every site of a multi-product, multi-region stack (`awsmp-loadtest run
//! --sites all`; docs/local-stack.md, "Many products, many regions").
//!
//! The run's licenses are dealt round robin over the sites, in the topology's order (by
//! region, then product). The simulators get one catalog: each site's product lists the
//! licenses of that product's sites (a license is valid in every region of its product, as in
//! AWS). Then each site's share is one single-site run ([`LocalTarget::on_site`], its own
//! stream, consumer, pipeline and ledger check against the site's simulator), one site after
//! another (two sites of one region share that region's simulator and its clock). The verdict
//! is per site and overall: every share conserved, and every record each simulator billed for
//! the run's licenses belongs to a site of that simulator's region and that site's product.
//!
//! The lifecycle mirroring of [`awsmp_local_stack::local::sites`] (events region → other regions) is not
//! needed: a load run's licenses come from the catalog every simulator starts with, not from
//! lifecycle events, and a run deprovisions (`--deprovision`) through its own site's table.

use super::local_target::{LocalTarget, Site as Share};
use super::sim_admin::SimAdmin;
use super::{RunSpec, Target, catalog, context, licenses_needed, run_license, run_nonce, run_on};
use crate::report::RunReport;
use anyhow::{Context, Result, bail, ensure};
use awsmp_local_stack::local::topology::Topology;
use awsmp_local_stack::local::{self, LocalEnv, Paths, UpOptions};
use chrono::Utc;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// One site's share of a run.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteReport {
    /// `product/region`.
    pub site: String,
    /// The product the site meters.
    pub product_code: String,
    /// The site's region.
    pub region: String,
    /// The licenses of the share (license ARNs).
    pub licenses: Vec<String>,
    /// The share's single-site run.
    pub report: RunReport,
}

/// A run over every site.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SitesReport {
    /// Every share conserved and nothing was billed outside its own site.
    pub conserved: bool,
    /// Units produced, over all sites.
    pub produced: u64,
    /// Units billed, over all sites.
    pub billed: u64,
    /// Records a simulator billed for a license of another site, one line each.
    pub misbilled: Vec<String>,
    /// Each site's share, in the topology's order.
    pub sites: Vec<SiteReport>,
}

impl SitesReport {
    /// Each site's summary, then the overall verdict.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for site in &self.sites {
            s.push_str(&format!(
                "== {} ({} licenses)\n{}",
                site.site,
                site.licenses.len(),
                site.report.summary()
            ));
        }
        for m in &self.misbilled {
            s.push_str(&format!("MISBILLED {m}\n"));
        }
        s.push_str(&format!(
            "== all {} sites: produced {}, billed {}, {}\n",
            self.sites.len(),
            self.produced,
            self.billed,
            if self.conserved {
                "conserved"
            } else {
                "NOT conserved"
            }
        ));
        s
    }
}

/// Which of `total` licenses each of `sites` gets: round robin.
fn spread(total: usize, sites: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); sites];
    for i in 0..total {
        out[i % sites].push(i);
    }
    out
}

/// A site's share of `spec`: the groups of its licenses (license `i` carries groups
/// `i·d … i·d + d − 1` of `d` dimensions), and the events and rate in proportion; the first
/// share takes the events' remainder.
fn share_spec(spec: &RunSpec, shares: &[Vec<usize>], k: usize) -> RunSpec {
    let w = &spec.produce.workload;
    let d = w.dimensions.len();
    let groups_of = |idx: &[usize]| -> usize { idx.iter().map(|i| d.min(w.groups - i * d)).sum() };
    let groups = groups_of(&shares[k]);
    let mut out = spec.clone();
    out.produce.workload.groups = groups;
    out.produce.rate = spec.produce.rate * groups as f64 / w.groups as f64;
    out.produce.events = spec.produce.events.map(|e| {
        let of = |g: usize| e * g as u64 / w.groups as u64;
        let given: u64 = shares.iter().map(|s| of(groups_of(s))).sum();
        of(groups) + if k == 0 { e - given } else { 0 }
    });
    out
}

/// The simulators' catalog: each product of `products` with the licenses of its sites.
fn sites_catalog(
    products: &[(String, Vec<(String, String)>)],
    dimensions: &[String],
) -> serde_json::Value {
    let mut out = catalog(&[], dimensions);
    out["products"] = products
        .iter()
        .map(|(code, licenses)| {
            let mut p = catalog(licenses, dimensions)["products"][0].clone();
            p["productCode"] = code.clone().into();
            p
        })
        .collect();
    out
}

/// Run `spec` over every site of the stack in `paths`.
pub async fn run_sites(paths: &Paths, spec: &RunSpec) -> Result<SitesReport> {
    ensure!(
        spec.target == Target::Local && !spec.produce_only && spec.stream.is_none(),
        "--sites all is for `awsmp-loadtest run` on the local stack"
    );
    let Some(topology) = Topology::load(paths)? else {
        bail!(
            "the stack at {} has one site; `--sites all` needs one started by `awsmp-local up \
             --products N --regions …`",
            paths.root.display()
        );
    };
    let n = topology.sites.len();
    let total = licenses_needed(spec);
    ensure!(
        total >= n,
        "{} groups over {} dimensions make {total} licenses, fewer than the stack's {n} sites",
        spec.produce.workload.groups,
        spec.produce.workload.dimensions.len()
    );
    let nonce = run_nonce(spec);
    let spread = spread(total, n);
    let shares: Vec<Vec<(String, String)>> = spread
        .iter()
        .enumerate()
        .map(|(k, idx)| {
            let mut l: Vec<_> = idx.iter().map(|&i| run_license(nonce, i)).collect();
            if spec.bad_inputs {
                // One more license per share carries its injected bad inputs.
                l.push(run_license(nonce, total + k));
            }
            l
        })
        .collect();
    start_with_catalog(paths, spec, &topology, &shares, nonce).await?;
    let mut sites = Vec::new();
    for (k, (site, licenses)) in topology.sites.iter().zip(shares).enumerate() {
        let env = LocalEnv::read(&site.env_file)?;
        let share_spec = share_spec(spec, &spread, k);
        let (started, started_at) = (Instant::now(), Utc::now());
        let share = Share {
            licenses: licenses.clone(),
            checkpoint: paths.loadtest().join(format!("esm-{nonce:08x}-{k}.json")),
            stream: format!("awsmp-loadtest-{nonce:08x}-{k}"),
            reset: false,
        };
        let label = site.label();
        let target = LocalTarget::on_site(env, &share_spec, share)
            .await
            .with_context(|| format!("setting up the share of {label}"))?;
        let report = run_on(&target, &context(&share_spec, started, started_at))
            .await
            .with_context(|| format!("the share of {label}"))?;
        sites.push(SiteReport {
            site: label,
            product_code: site.product_code.clone(),
            region: site.region.clone(),
            licenses: licenses.into_iter().map(|(l, _)| l).collect(),
            report,
        });
    }
    let misbilled = misbilled(&topology, &sites).await?;
    fn c(s: &SiteReport) -> &crate::conservation::Verdict {
        &s.report.conservation
    }
    Ok(SitesReport {
        conserved: misbilled.is_empty() && sites.iter().all(|s| c(s).conserved),
        produced: sites.iter().map(|s| c(s).funnel.produced).sum(),
        billed: sites.iter().map(|s| c(s).funnel.billed).sum(),
        misbilled,
        sites,
    })
}

/// Write the run's catalog, (re)start the stack with it, and reset every simulator once.
async fn start_with_catalog(
    paths: &Paths,
    spec: &RunSpec,
    topology: &Topology,
    shares: &[Vec<(String, String)>],
    nonce: u32,
) -> Result<()> {
    let mut products: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (site, licenses) in topology.sites.iter().zip(shares) {
        match products.iter_mut().find(|(p, _)| *p == site.product_code) {
            Some((_, l)) => l.extend(licenses.iter().cloned()),
            None => products.push((site.product_code.clone(), licenses.clone())),
        }
    }
    let dir = paths.loadtest();
    std::fs::create_dir_all(&dir)?;
    for old in std::fs::read_dir(&dir)?.flatten() {
        std::fs::remove_file(old.path()).ok();
    }
    let catalog_path = dir.join(format!("catalog-{nonce:08x}.json"));
    let catalog = sites_catalog(&products, &spec.produce.workload.dimensions);
    std::fs::write(&catalog_path, serde_json::to_string_pretty(&catalog)?)?;
    let options = UpOptions {
        catalog: Some(catalog_path),
        ephemeral: None,
        shape: None,
    };
    local::up(paths, &options)
        .await
        .context("starting the local stack")?;
    let mut reset = BTreeSet::new();
    for site in &topology.sites {
        let env = LocalEnv::read(&site.env_file)?;
        if reset.insert(env.get("AWSMP_SIM_ADMIN_URL")?.to_owned()) {
            SimAdmin::new(&env)?
                .post("/_sim/reset", serde_json::json!({}))
                .await?;
        }
    }
    Ok(())
}

/// Every record a simulator billed for one of the run's licenses whose site is in another
/// region (another simulator) or meters another product.
async fn misbilled(topology: &Topology, sites: &[SiteReport]) -> Result<Vec<String>> {
    // license → (its site, that site's simulator, its product)
    let mut home = BTreeMap::new();
    let mut simulators = BTreeMap::new();
    for (site, share) in topology.sites.iter().zip(sites) {
        let env = LocalEnv::read(&site.env_file)?;
        let admin = env.get("AWSMP_SIM_ADMIN_URL")?.to_owned();
        for l in &share.licenses {
            home.insert(
                l.clone(),
                (share.site.clone(), admin.clone(), &share.product_code),
            );
        }
        simulators.entry(admin).or_insert(env);
    }
    let mut out = Vec::new();
    for (admin, env) in &simulators {
        let ledger = SimAdmin::new(env)?.ledger().await?;
        for r in ledger["records"].as_array().into_iter().flatten() {
            let license = r["licenseArn"].as_str().unwrap_or_default();
            let product = r["productCode"].as_str().unwrap_or_default();
            let Some((site, home_admin, home_product)) = home.get(license) else {
                continue;
            };
            if home_admin != admin || *home_product != product {
                out.push(format!(
                    "{license} of {site} billed under {product} by the simulator at {admin}"
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::produce::ProduceSpec;
    use crate::workload::WorkloadSpec;

    fn spec(groups: usize, events: u64) -> RunSpec {
        RunSpec {
            target: Target::Local,
            produce: ProduceSpec {
                events: Some(events),
                duration: None,
                rate: 1000.0,
                producers: 1,
                collapse: false,
                workload: WorkloadSpec {
                    groups,
                    dimensions: vec!["a".into(), "b".into()],
                    zipf_exponent: 1.1,
                    allocation_share: 0.0,
                    max_quantity: 100,
                    seed: 1,
                    tagging_seed: 1,
                },
                faults: crate::faults::Faults::parse("none").unwrap(),
            },
            produce_only: false,
            stream: None,
            timeout: std::time::Duration::from_secs(60),
            overlap: super::super::Overlap::default(),
            bad_inputs: false,
            progress: false,
            command_line: String::new(),
            lambdas: super::super::Lambdas::InProcess,
            ingest_share: 0.0,
        }
    }

    /// A state dir whose `topology.json` holds two products in two regions (nothing running).
    fn four_sites() -> (tempfile::TempDir, Paths) {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            root: dir.path().to_owned(),
            tools: dir.path().join("tools"),
        };
        let regions = ["us-east-1".to_owned(), "eu-west-1".to_owned()];
        let shape = awsmp_local_stack::local::topology::Shape::new(2, &regions).unwrap();
        let plan =
            awsmp_local_stack::local::topology::plan(&paths, &shape, &["p1".into(), "p2".into()]);
        std::fs::write(
            awsmp_local_stack::local::topology::topology_file(&paths),
            serde_json::to_string(&plan).unwrap(),
        )
        .unwrap();
        (dir, paths)
    }

    async fn refusal(paths: &Paths, spec: &RunSpec) -> String {
        format!("{:#}", run_sites(paths, spec).await.unwrap_err())
    }

    #[tokio::test]
    async fn what_a_spread_run_cannot_take_is_refused_before_anything_starts() {
        let (_dir, four) = four_sites();
        // Three groups over two dimensions are two licenses, for four sites.
        let e = refusal(&four, &spec(3, 100)).await;
        assert!(e.contains("fewer than the stack's 4 sites"), "{e}");
        let single = tempfile::tempdir().unwrap();
        let single = Paths {
            root: single.path().to_owned(),
            tools: single.path().join("tools"),
        };
        let e = refusal(&single, &spec(40, 100)).await;
        assert!(e.contains("has one site"), "{e}");
        let mut produce = spec(40, 100);
        produce.produce_only = true;
        assert!(
            refusal(&four, &produce)
                .await
                .contains("`awsmp-loadtest run`")
        );
        let mut deployment = spec(40, 100);
        deployment.target = Target::Deployment {
            licenses: vec![run_license(1, 0)],
        };
        assert!(refusal(&four, &deployment).await.contains("local stack"));
    }

    #[test]
    fn licenses_are_dealt_round_robin() {
        assert_eq!(
            spread(5, 2),
            vec![vec![0, 2, 4], vec![1, 3]],
            "five licenses over two sites"
        );
        assert_eq!(spread(2, 3), vec![vec![0], vec![1], vec![]]);
    }

    #[test]
    fn shares_split_groups_events_and_rate_without_losing_any() {
        // 7 groups over 2 dimensions: 4 licenses, the last with one group.
        let spec = spec(7, 1001);
        let shares = spread(licenses_needed(&spec), 3);
        let parts: Vec<RunSpec> = (0..3).map(|k| share_spec(&spec, &shares, k)).collect();
        let groups: Vec<usize> = parts.iter().map(|p| p.produce.workload.groups).collect();
        // Site 0: licenses 0 and 3 (2 + 1 groups); sites 1 and 2: one license each.
        assert_eq!(groups, vec![3, 2, 2]);
        for (p, idx) in parts.iter().zip(&shares) {
            assert_eq!(licenses_needed(p), idx.len(), "{p:?}");
        }
        let events: u64 = parts.iter().map(|p| p.produce.events.unwrap()).sum();
        assert_eq!(events, 1001);
        let rate: f64 = parts.iter().map(|p| p.produce.rate).sum();
        assert!((rate - 1000.0).abs() < 1e-9, "{rate}");
    }

    #[test]
    fn the_catalog_lists_each_product_with_its_sites_licenses() {
        let l = |i| run_license(7, i);
        let c = sites_catalog(
            &[("p1".into(), vec![l(0), l(2)]), ("p2".into(), vec![l(1)])],
            &["a".into()],
        );
        let products = c["products"].as_array().unwrap();
        assert_eq!(products.len(), 2);
        assert_eq!(products[0]["productCode"], "p1");
        assert_eq!(products[1]["productCode"], "p2");
        assert_eq!(products[0]["licenses"].as_array().unwrap().len(), 2);
        assert_eq!(products[1]["licenses"][0]["licenseArn"], l(1).0.as_str());
        assert_eq!(c["windowHours"], 24);
    }
}
