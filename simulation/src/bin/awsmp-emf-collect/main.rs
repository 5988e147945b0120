//! `awsmp-emf-collect`: run the code paths that emit business metrics and write every distinct
//! metric they emitted — namespace, name, unit, dimension names and values — as JSON, for the
//! check that every alarm and dashboard reads a metric the code emits
//! (`infra/tests/test_metrics_emitted.py`, docs/operations.md, "Metrics the alarms read").
//!
//! The paths: the deterministic simulation's sweep (every fault class, deprovisioning,
//! meter-ingest; `awsmp_simulation::sweep`), then the rare paths a sweep does not reach
//! (`rare.rs` beside this file). Every line any sink emits is seen through
//! `awsmp_aws::emf::tee_all_lines` and checked against the EMF structure
//! (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>).

mod rare;

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Collect the business metrics the code emits.
#[derive(Debug, Parser)]
#[command(name = "awsmp-emf-collect")]
struct Args {
    /// Schedules of the simulation sweep to run (seeds 0 onwards). The rare paths are driven
    /// whatever this says; eight schedules reach every other metric a template reads, in
    /// seconds (the sweep is deterministic: the same seeds, the same lines).
    #[arg(long, default_value_t = 8)]
    schedules: u64,
    /// Where to write the JSON (`{"lines": N, "metrics": [...]}`).
    #[arg(long)]
    out: std::path::PathBuf,
}

/// One distinct metric as emitted: `(namespace, name, unit, [(dimension, value)])`.
type Signature = (String, String, String, Vec<(String, String)>);

/// The metrics of one EMF line; an error names what breaks the EMF structure.
fn signatures(line: &str) -> anyhow::Result<Vec<Signature>> {
    let root: Value = serde_json::from_str(line).context("not JSON")?;
    let aws = &root["_aws"];
    if !aws["Timestamp"].is_i64() {
        bail!("_aws.Timestamp is not an integer of milliseconds");
    }
    let directives = aws["CloudWatchMetrics"]
        .as_array()
        .context("_aws.CloudWatchMetrics is not an array")?;
    let mut out = Vec::new();
    for d in directives {
        let ns = d["Namespace"]
            .as_str()
            .context("Namespace is not a string")?;
        let sets = d["Dimensions"]
            .as_array()
            .context("Dimensions is not an array")?;
        for m in d["Metrics"].as_array().context("Metrics is not an array")? {
            let name = m["Name"].as_str().context("a metric without a Name")?;
            if !root[name].is_number() {
                bail!("metric {name} has no numeric member");
            }
            let unit = m["Unit"].as_str().unwrap_or("None");
            for set in sets {
                let mut dims = Vec::new();
                for dim in set.as_array().context("a dimension set is not an array")? {
                    let dim = dim.as_str().context("a dimension name is not a string")?;
                    let value = root[dim]
                        .as_str()
                        .with_context(|| format!("dimension {dim} has no string member"))?;
                    dims.push((dim.to_string(), value.to_string()));
                }
                out.push((ns.into(), name.into(), unit.into(), dims));
            }
        }
    }
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let seen: Arc<Mutex<BTreeSet<Signature>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let lines = Arc::new(std::sync::atomic::AtomicU64::new(0));
    {
        let (seen, errors, lines) = (seen.clone(), errors.clone(), lines.clone());
        let installed = awsmp_aws::emf::tee_all_lines(move |line| {
            lines.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match signatures(line) {
                Ok(sigs) => seen.lock().expect("collector poisoned").extend(sigs),
                Err(e) => errors
                    .lock()
                    .expect("collector poisoned")
                    .push(format!("{e}: {line}")),
            }
        });
        assert!(installed, "the tee is installed once");
    }
    let sweep = awsmp_simulation::sweep(0, args.schedules);
    if !sweep.failures.is_empty() {
        let seeds: Vec<u64> = sweep.failures.iter().map(|r| r.seed).collect();
        bail!("the sweep broke invariants (seeds {seeds:?}): its metrics prove nothing");
    }
    rare::run_all()?;
    let errors = errors.lock().expect("collector poisoned");
    if !errors.is_empty() {
        bail!("lines that are not EMF:\n{}", errors.join("\n"));
    }
    let metrics: Vec<Value> = seen
        .lock()
        .expect("collector poisoned")
        .iter()
        .map(|(ns, name, unit, dims)| {
            json!({
                "namespace": ns,
                "name": name,
                "unit": unit,
                "dimensions": dims.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                "values": dims
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect::<serde_json::Map<String, Value>>(),
            })
        })
        .collect();
    let total = lines.load(std::sync::atomic::Ordering::Relaxed);
    let doc = json!({"schedules": args.schedules, "lines": total, "metrics": metrics});
    std::fs::write(&args.out, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "{total} EMF lines, {} distinct metrics, written to {}",
        metrics.len(),
        args.out.display()
    );
    Ok(())
}
