//! The load test's report: a terminal summary, a JSON result, and a self-contained HTML page
//! with SVG plots (plotters) of throughput over time, latency percentiles, rejects by reason
//! and the conservation table.

use crate::conservation::{Funnel, TableRow, Verdict};
use crate::cost::{CostComparison, CostEstimate};
use anyhow::Result;
mod functions;
mod plots;

use plots::{bars_svg, latency_svg, throughput_svg};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One sample of the run's counters (cumulative), taken about once a second.
#[derive(Debug, Clone, Copy, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Seconds since the run started.
    pub t: f64,
    /// Events accepted by `record()`.
    pub produced: u64,
    /// Events acknowledged by Kinesis.
    pub acked: u64,
    /// Events the consumer processed.
    pub consumed: u64,
    /// Usage-row writes the consumer made.
    pub rows_written: u64,
    /// Group-hours the aggregator folded (work-queue messages it handled; a duplicate
    /// delivery counts again).
    pub aggregated: u64,
    /// Records the simulator billed.
    pub billed: u64,
}

/// One stage of event → usage row: its latency and what bounds it.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageBound {
    /// The stage, e.g. `stream → invocation`.
    pub stage: String,
    /// p50 in milliseconds.
    pub p50_ms: f64,
    /// p99 in milliseconds.
    pub p99_ms: f64,
    /// What its time is spent on.
    pub bound: String,
    /// The part of event → row where the median event spends longest.
    pub bottleneck: bool,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// p50.
    pub p50: f64,
    /// p90.
    pub p90: f64,
    /// p99.
    pub p99: f64,
    /// p99.9.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
    /// The distribution: `[milliseconds, fraction of samples at or below it]`, ascending in
    /// both, ending at `[max, 1]`.
    pub cdf: Vec<[f64; 2]>,
}

impl Percentiles {
    /// From an hdrhistogram of microseconds.
    pub fn from_micros(h: &hdrhistogram::Histogram<u64>) -> Self {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Self {
            count: h.len(),
            p50: ms(0.50),
            p90: ms(0.90),
            p99: ms(0.99),
            p999: ms(0.999),
            max: h.max() as f64 / 1000.0,
            cdf: cdf(h),
        }
    }
}

/// At most this many points of a latency distribution.
const CDF_POINTS: usize = 200;

/// The distribution of `h` (microseconds) as `[ms, fraction]` points, thinned to
/// [`CDF_POINTS`], always ending at the maximum.
fn cdf(h: &hdrhistogram::Histogram<u64>) -> Vec<[f64; 2]> {
    if h.is_empty() {
        return Vec::new();
    }
    let all: Vec<[f64; 2]> = h
        .iter_quantiles(1)
        .map(|v| {
            [
                v.value_iterated_to() as f64 / 1000.0,
                v.quantile_iterated_to(),
            ]
        })
        .collect();
    let step = all.len().div_ceil(CDF_POINTS).max(1);
    let mut points: Vec<[f64; 2]> = all.iter().step_by(step).copied().collect();
    points.push([h.max() as f64 / 1000.0, 1.0]);
    // Monotone by construction of the iterator; equal neighbours add nothing.
    points.dedup_by(|b, a| b[0] <= a[0] && b[1] <= a[1]);
    points
}

/// Everything the report shows.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    /// `run` (the whole path) or `produce` (ingestion only).
    pub mode: String,
    /// The command line and settings of the run.
    pub settings: BTreeMap<String, String>,
    /// Wall-clock seconds.
    pub elapsed_secs: f64,
    /// How the Lambdas ran: "lambda runtime: built binaries, one process each" or "in-process
    /// handlers" (empty: none ran, e.g. a deployment's own).
    pub lambdas: String,
    /// The functions that ran as processes under the host, with their invocations (empty: the
    /// handlers ran in process, or a deployment's own ran).
    pub functions: Vec<awsmp_local_stack::local::hosted::FunctionRun>,
    /// What the run sent through the meter-ingest binary (hosted runs).
    pub ingest: Option<crate::loadrun::IngestSent>,
    /// Counter samples over time.
    pub timeline: Vec<Sample>,
    /// Latencies by stage: `recordToAck`, `eventToRow`, `eventToBilled` (virtual time).
    pub latency: BTreeMap<String, Percentiles>,
    /// Event → usage row stage by stage, with what bounds each (local runs).
    pub stages: Vec<StageBound>,
    /// UpdateItems per 1,000 events accepted by the consumer.
    pub write_amplification: f64,
    /// Rejects by reason, all tiers.
    pub rejects: BTreeMap<String, u64>,
    /// Faults injected, by class and count.
    pub faults: BTreeMap<String, u64>,
    /// The conservation verdict.
    pub conservation: Verdict,
    /// The AWS cost per million events (a whole run; none for ingestion only).
    pub cost: Option<CostComparison>,
}

impl RunReport {
    /// The terminal summary.
    pub fn summary(&self) -> String {
        let c = &self.conservation;
        let mut s = String::new();
        if self.mode != "produce" {
            write_funnel(&mut s, &c.funnel);
        }
        let _ = writeln!(s, "run: {:.1} s wall clock", self.elapsed_secs);
        if !self.lambdas.is_empty() {
            let _ = writeln!(s, "lambdas: {}", self.lambdas);
        }
        functions::write_summary(&mut s, &self.functions, self.ingest.as_ref());
        self.write_throughput(&mut s);
        let _ = writeln!(
            s,
            "write amplification: {:.1} UpdateItems per 1,000 events",
            self.write_amplification
        );
        for (stage, p) in &self.latency {
            let _ = writeln!(
                s,
                "latency {stage:<14} p50 {:>9.1} ms  p99 {:>9.1} ms  max {:>9.1} ms  (n={})",
                p.p50, p.p99, p.max, p.count
            );
        }
        for b in &self.stages {
            let _ = writeln!(
                s,
                "  stage {:<20} p50 {:>9.1} ms  p99 {:>9.1} ms  {}bound by {}",
                b.stage,
                b.p50_ms,
                b.p99_ms,
                if b.bottleneck { "BOTTLENECK, " } else { "" },
                b.bound
            );
        }
        if !self.rejects.is_empty() {
            let _ = writeln!(s, "rejects: {}", joined(&self.rejects));
        }
        if !self.faults.is_empty() {
            let _ = writeln!(s, "faults injected: {}", joined(&self.faults));
        }
        if let Some(cost) = &self.cost {
            write_cost(&mut s, cost);
        }
        let _ = writeln!(
            s,
            "units: {} produced, {} accepted, {} billed, {} terminal ({}) over {} group-hours",
            c.produced,
            c.accepted,
            c.billed,
            c.terminal.values().sum::<u64>(),
            joined(&c.terminal),
            c.group_hours
        );
        self.write_verdict(&mut s);
        s
    }

    /// Events produced, acked (and at what rate), consumed, written and billed.
    fn write_throughput(&self, s: &mut String) {
        let Some(last) = self.timeline.last() else {
            return;
        };
        // Production throughput: events acked over the time until the last ack arrived.
        let acked_by = self
            .timeline
            .iter()
            .find(|s| s.acked == last.acked)
            .map_or(self.elapsed_secs, |s| s.t);
        let rate = if acked_by > 0.0 {
            last.acked as f64 / acked_by
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            "events: {} produced, {} acked ({rate:.0}/s), {} consumed, {} row writes; {} records billed",
            last.produced, last.acked, last.consumed, last.rows_written, last.billed
        );
    }

    /// The verdict line, and the first violations.
    fn write_verdict(&self, s: &mut String) {
        let c = &self.conservation;
        if c.conserved && self.mode == "produce" {
            let _ = writeln!(
                s,
                "DELIVERED: every event recorded was acknowledged by Kinesis or handed back to the caller"
            );
        } else if c.conserved {
            let _ = writeln!(
                s,
                "CONSERVED: every unit of a valid event was billed exactly once; only injected bad inputs ended unbilled, each with its reason"
            );
        } else {
            let _ = writeln!(s, "NOT CONSERVED: {} violation(s)", c.violations.len());
            for v in c.violations.iter().take(20) {
                let _ = writeln!(
                    s,
                    "  [{}] {}: expected {}, found {} — {}",
                    v.stage, v.key, v.expected, v.found, v.detail
                );
            }
        }
    }

    /// Write `report.json` and `report.html` into `dir`; returns the HTML path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(self)?)?;
        let html = self.html()?;
        let path = dir.join("report.html");
        std::fs::write(&path, html)?;
        Ok(path)
    }

    fn html(&self) -> Result<String> {
        let c = &self.conservation;
        let mut h = String::new();
        let _ = write!(
            h,
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>awsmp load test</title><style>\
             body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:collapse}}\
             td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} th{{background:#eee}}\
             .ok{{color:#070}} .bad{{color:#b00}} pre{{background:#f6f6f6;padding:1em;white-space:pre-wrap}}</style></head><body>\
             <h1>awsmp load test</h1><p class=\"{}\"><b>{}</b></p><pre>{}</pre>",
            if c.conserved { "ok" } else { "bad" },
            if c.conserved {
                "Conserved: every unit of a valid event was billed exactly once; only injected bad inputs ended unbilled, each with its reason."
            } else {
                "NOT conserved — see the violations below."
            },
            escape(&self.summary())
        );
        if self.mode != "produce" {
            h.push_str(&funnel_html(&c.funnel));
        }
        h.push_str("<h2>Throughput over time</h2>");
        h.push_str(&throughput_svg(&self.timeline)?);
        h.push_str("<h2>Latency distribution (CDF)</h2>");
        h.push_str(&latency_svg(&self.latency)?);
        if !self.stages.is_empty() {
            h.push_str(&stages_html(&self.stages));
        }
        h.push_str(&functions::html(&self.functions, self.ingest.as_ref()));
        if let Some(cost) = &self.cost {
            h.push_str(&cost_html(cost));
        }
        if !self.rejects.is_empty() {
            h.push_str("<h2>Rejects by reason</h2>");
            h.push_str(&bars_svg(&self.rejects)?);
        }
        h.push_str("<h2>Settings</h2><table>");
        for (k, v) in &self.settings {
            let _ = write!(
                h,
                "<tr><th>{}</th><td style=\"text-align:left\">{}</td></tr>",
                escape(k),
                escape(v)
            );
        }
        h.push_str("</table>");
        if !c.violations.is_empty() {
            h.push_str("<h2>Violations</h2><table><tr><th>stage</th><th>group(-hour)</th><th>expected</th><th>found</th><th>detail</th></tr>");
            for v in &c.violations {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td style=\"text-align:left\">{}</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
                    v.stage,
                    escape(&v.key),
                    v.expected,
                    v.found,
                    escape(&v.detail)
                );
            }
            h.push_str("</table>");
        }
        h.push_str(&conservation_html(&c.table));
        h.push_str("</body></html>");
        Ok(h)
    }
}

/// Event → row stage by stage: where the time goes and what bounds it.
fn stages_html(stages: &[StageBound]) -> String {
    let mut h = String::from(
        "<h2>Where the time goes: event → usage row</h2><table><tr><th>stage</th><th>p50 ms</th><th>p99 ms</th><th style=\"text-align:left\">bounded by</th></tr>",
    );
    for b in stages {
        let _ = write!(
            h,
            "<tr{}><td style=\"text-align:left\">{}{}</td><td>{:.1}</td><td>{:.1}</td><td style=\"text-align:left\">{}</td></tr>",
            if b.bottleneck { " class=\"bad\"" } else { "" },
            escape(&b.stage),
            if b.bottleneck {
                " — the bottleneck"
            } else {
                ""
            },
            b.p50_ms,
            b.p99_ms,
            escape(&b.bound)
        );
    }
    h.push_str("</table>");
    h
}

/// Units of a group-hour neither billed nor terminal with a reason (negative: more than
/// accepted).
fn unexplained(r: &TableRow) -> i128 {
    i128::from(r.accepted)
        - i128::from(r.billed)
        - r.terminal.values().map(|&v| i128::from(v)).sum::<i128>()
}

/// The conservation table, summarized: the group-hours whose units are not all explained
/// first, in full; the rest collapsed.
fn conservation_html(table: &[TableRow]) -> String {
    let (differ, even): (Vec<&TableRow>, Vec<&TableRow>) =
        table.iter().partition(|r| unexplained(r) != 0);
    let mut h = format!(
        "<h2>Conservation table</h2><p>{} group-hours: {} with a difference, {} with every unit billed or terminal with its reason.</p>",
        table.len(),
        differ.len(),
        even.len()
    );
    let rows = |h: &mut String, rows: &[&TableRow]| {
        h.push_str("<table><tr><th>group-hour</th><th>accepted</th><th>billed</th><th>terminal (reason=units)</th><th>difference</th></tr>");
        for r in rows {
            let _ = write!(
                h,
                "<tr><td style=\"text-align:left\">{}</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td><td>{}</td></tr>",
                escape(&r.group_hour),
                r.accepted,
                r.billed,
                escape(
                    &r.terminal
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                unexplained(r)
            );
        }
        h.push_str("</table>");
    };
    if !differ.is_empty() {
        h.push_str("<h3>Group-hours with a difference</h3>");
        rows(&mut h, &differ);
    }
    if !even.is_empty() {
        let _ = write!(
            h,
            "<details><summary>{} group-hours that balance</summary>",
            even.len()
        );
        rows(&mut h, &even);
        h.push_str("</details>");
    }
    h
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The funnel, first: units at each stage, then every unit that left it, by reason.
fn write_funnel(s: &mut String, f: &Funnel) {
    let _ = writeln!(
        s,
        "funnel: {} produced → {} accepted → {} rows → {} aggregated → {} billed",
        f.produced, f.accepted, f.rows, f.aggregated, f.billed
    );
    for e in &f.exits {
        let injected = if e.injected > 0 {
            format!(" ({} injected)", e.injected)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  left {:<18} {:>10} units  {}{injected}",
            e.between, e.units, e.reason
        );
    }
    for e in &f.injected {
        let _ = writeln!(
            s,
            "  bad input, must end {:<52} {:>6} {} injected, {} found",
            e.reason, e.injected, e.counted_in, e.found
        );
    }
}

/// The funnel as an HTML table.
fn funnel_html(f: &Funnel) -> String {
    let mut h = String::from(
        "<h2>Funnel</h2><table><tr><th>produced</th><th>accepted</th><th>rows</th><th>aggregated</th><th>billed</th></tr>",
    );
    let _ = write!(
        h,
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        f.produced, f.accepted, f.rows, f.aggregated, f.billed
    );
    if !f.exits.is_empty() {
        h.push_str("<table><tr><th>left between</th><th>reason</th><th>units</th><th>of which injected</th></tr>");
        for e in &f.exits {
            let _ = write!(
                h,
                "<tr><td>{}</td><td style=\"text-align:left\">{}</td><td>{}</td><td>{}</td></tr>",
                e.between,
                escape(&e.reason),
                e.units,
                e.injected
            );
        }
        h.push_str("</table>");
    }
    if !f.injected.is_empty() {
        h.push_str("<h3>Bad inputs injected on purpose</h3><table><tr><th>must end</th><th>counted in</th><th>injected</th><th>found</th></tr>");
        for e in &f.injected {
            let _ = write!(
                h,
                "<tr><td style=\"text-align:left\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&e.reason),
                e.counted_in,
                e.injected,
                e.found
            );
        }
        h.push_str("</table>");
    }
    h
}

/// The cost per million events, one line.
fn write_cost(s: &mut String, c: &CostComparison) {
    let _ = writeln!(
        s,
        "AWS cost per million events (us-east-1 on-demand prices): ${:.4} streaming (on-demand stream), ${:.4} (provisioned), ${:.4} one row per event — {:.1}× less",
        c.streaming_on_demand.per_million_events_usd,
        c.streaming_provisioned.per_million_events_usd,
        c.one_row_per_event.per_million_events_usd,
        c.saving()
    );
}

/// The cost section: per million events for each way, then each way's lines.
fn cost_html(c: &CostComparison) -> String {
    let mut h = String::from(
        "<h2>AWS cost per million events</h2><p>Every billable operation the run did, at the public \
         us-east-1 on-demand prices (<code>loadtest/src/cost/prices.rs</code>; the model in \
         <code>docs/capacity.md</code>), against the same events written one row each straight \
         into the usage table.</p><table><tr><th>way</th><th>USD per million events</th><th>USD for the run</th></tr>",
    );
    let ways: [(&str, &CostEstimate); 3] = [
        ("streaming, on-demand stream", &c.streaming_on_demand),
        ("streaming, provisioned stream", &c.streaming_provisioned),
        ("one row per event", &c.one_row_per_event),
    ];
    for (name, e) in ways {
        let _ = write!(
            h,
            "<tr><td style=\"text-align:left\">{name}</td><td>{:.4}</td><td>{:.6}</td></tr>",
            e.per_million_events_usd, e.total_usd
        );
    }
    let _ = write!(
        h,
        "</table><p>Streaming costs {:.1}× less than one row per event.</p>",
        c.saving()
    );
    for (name, e) in ways {
        let _ = write!(
            h,
            "<details><summary>{name}: line by line</summary><table><tr><th>billed</th><th>quantity</th><th>USD</th></tr>"
        );
        for l in &e.lines {
            let _ = write!(
                h,
                "<tr><td style=\"text-align:left\">{}</td><td>{:.3}</td><td>{:.6}</td></tr>",
                escape(&l.item),
                l.quantity,
                l.usd
            );
        }
        h.push_str("</table></details>");
    }
    h
}

/// `k=v, k=v, …`
fn joined(m: &BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::plots::active_span;
    use super::*;

    #[test]
    fn html_report_is_self_contained_with_plots() {
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        for v in [1_000, 2_000, 50_000] {
            h.record(v).unwrap();
        }
        let report = RunReport {
            elapsed_secs: 3.0,
            timeline: (0..4)
                .map(|i| Sample {
                    t: i as f64,
                    produced: i * 100,
                    acked: i * 90,
                    consumed: i * 80,
                    rows_written: i * 10,
                    aggregated: 0,
                    billed: 0,
                })
                .collect(),
            latency: BTreeMap::from([("recordToAck".into(), Percentiles::from_micros(&h))]),
            rejects: BTreeMap::from([("consumer:StaleTimestamp".into(), 3)]),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = report.write(dir.path()).unwrap();
        let html = std::fs::read_to_string(path).unwrap();
        assert_eq!(html.matches("<svg").count(), 3, "three inline plots");
        assert!(html.contains("acked events/s") && html.contains("recordToAck"));
        assert!(!html.contains("src=\"http"), "no external resources");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
                .unwrap();
        assert_eq!(json["latency"]["recordToAck"]["count"], 3);
        assert!(report.summary().contains("CONSERVED"));
    }

    #[test]
    fn report_shows_the_cost_per_million_events() {
        let counts = crate::cost::RunCounts {
            events: 1_000_000,
            kinesis_records: 1_000,
            kinesis_bytes: 10_000_000,
            kinesis_put_payload_units: 1_000,
            kinesis_billed_bytes_in: 10_240_000,
            shards: 2,
            elapsed_secs: 600.0,
            consumer_invocations: 1_000,
            consumer_billed_ms: 20_000,
            consumer_update_items: 100_000,
            rows: 100_000,
            row_bytes: 250,
            group_hours: 30,
            records_billed: 30,
        };
        let report = RunReport {
            cost: Some(CostComparison::of(counts)),
            ..Default::default()
        };
        let summary = report.summary();
        assert!(summary.contains("AWS cost per million events"), "{summary}");
        let html = report.html().unwrap();
        assert!(html.contains("<h2>AWS cost per million events</h2>"));
        assert_eq!(
            html.matches("<details>").count(),
            3,
            "one breakdown per way"
        );
        assert!(html.contains("DynamoDB write request units"));
        let cost = report.cost.as_ref().unwrap();
        assert!(
            cost.one_row_per_event.per_million_events_usd
                > cost.streaming_on_demand.per_million_events_usd
        );
    }

    #[test]
    fn latency_is_drawn_as_a_monotone_cdf_ending_at_the_maximum() {
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v * 37 % 90_001 + 100).unwrap();
        }
        let p = Percentiles::from_micros(&h);
        assert!(
            p.cdf.len() <= CDF_POINTS + 1 && p.cdf.len() > 10,
            "{}",
            p.cdf.len()
        );
        assert!(
            p.cdf
                .windows(2)
                .all(|w| w[0][0] <= w[1][0] && w[0][1] <= w[1][1]),
            "monotone"
        );
        assert_eq!(*p.cdf.last().unwrap(), [p.max, 1.0]);
        assert!(p.cdf.iter().any(|&[ms, q]| q >= 0.5 && ms <= p.p50 * 1.01));
        let empty = Percentiles::from_micros(&hdrhistogram::Histogram::<u64>::new(3).unwrap());
        assert!(empty.cdf.is_empty());
        let report = RunReport {
            latency: BTreeMap::from([
                ("eventToRow".into(), p.clone()),
                ("eventToBilled(virtual)".into(), p),
            ]),
            ..Default::default()
        };
        let html = report.html().unwrap();
        assert!(html.contains("Latency distribution (CDF)"));
        assert!(
            html.contains("eventToBilled (virtual clock)"),
            "virtual clock labelled"
        );
    }

    #[test]
    fn the_conservation_table_puts_differences_first_and_collapses_the_rest() {
        let row = |gh: &str, accepted, billed, terminal: &[(&str, u64)]| TableRow {
            group_hour: gh.into(),
            accepted,
            billed,
            terminal: terminal
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
        };
        let table = vec![
            row("a|1|d|h0", 10, 10, &[]),
            row("b|1|d|h0", 10, 7, &[("Rejected", 2)]),
            row("c|1|d|h0", 5, 3, &[("Rejected", 2)]),
        ];
        let html = conservation_html(&table);
        assert!(html.contains("3 group-hours: 1 with a difference, 2 with every unit"));
        let differ = html.find("b|1|d|h0").unwrap();
        let details = html.find("<details>").unwrap();
        assert!(
            differ < details,
            "the difference comes before the collapsed rest"
        );
        assert!(html.find("a|1|d|h0").unwrap() > details);
        assert!(html.find("c|1|d|h0").unwrap() > details);
        assert!(conservation_html(&table[..1]).contains("<details>"));
        assert!(!conservation_html(&table[1..2]).contains("<details>"));
    }

    #[test]
    fn the_throughput_plot_spans_the_run_not_its_idle_tail() {
        let mut timeline: Vec<Sample> = (0..10u32)
            .map(|i| Sample {
                t: f64::from(i),
                produced: u64::from(i) * 100,
                ..Default::default()
            })
            .collect();
        // Thirty idle seconds after the last count moved.
        let last = timeline[9];
        timeline.extend((10..40u32).map(|i| Sample {
            t: f64::from(i),
            ..last
        }));
        assert_eq!(active_span(&timeline), (0.0, 10.0));
        assert_eq!(active_span(&timeline[..5]), (0.0, 4.0));
        assert_eq!(active_span(&[]), (0.0, 1.0));
        let svg = throughput_svg(&timeline).unwrap();
        assert!(svg.contains("billed records/s") && svg.contains("Marketplace quota"));
    }

    #[test]
    fn the_throughput_plot_shows_every_stage_and_the_quota() {
        let timeline: Vec<Sample> = (0..20u64)
            .map(|i| Sample {
                t: i as f64,
                produced: i * 1_000,
                acked: i * 990,
                consumed: i * 950,
                rows_written: i * 300,
                aggregated: i.saturating_sub(10) * 30,
                billed: i.saturating_sub(12) * 30,
            })
            .collect();
        let svg = throughput_svg(&timeline).unwrap();
        for stage in [
            "produced events/s",
            "acked events/s",
            "consumed events/s",
            "row writes/s",
            "aggregated group-hours/s",
            "billed records/s",
            "Marketplace quota",
        ] {
            assert_eq!(svg.matches(stage).count(), 1, "{stage} drawn once");
        }
        // The aggregated stage moving alone still keeps the span open.
        let mut tail = timeline.clone();
        let last = *tail.last().unwrap();
        tail.push(Sample {
            t: 20.0,
            aggregated: last.aggregated + 5,
            ..last
        });
        tail.extend((21..40).map(|i| Sample {
            t: f64::from(i),
            aggregated: last.aggregated + 5,
            ..last
        }));
        assert_eq!(active_span(&tail), (0.0, 21.0));
    }

    #[test]
    fn the_report_names_what_bounds_each_stage() {
        let report = RunReport {
            stages: vec![
                StageBound {
                    stage: "event → stream".into(),
                    p50_ms: 60.0,
                    p99_ms: 120.0,
                    bound: "the producer's linger".into(),
                    bottleneck: false,
                },
                StageBound {
                    stage: "stream → invocation".into(),
                    p50_ms: 400.0,
                    p99_ms: 1_100.0,
                    bound: "the event source mapping <polling>".into(),
                    bottleneck: true,
                },
            ],
            ..Default::default()
        };
        let html = report.html().unwrap();
        let table = &html[html.find("<h2>Where the time goes").expect("the table")..];
        assert!(table.contains("<td>60.0</td><td>120.0</td>"));
        assert!(table.contains("<td>400.0</td><td>1100.0</td>"));
        assert!(table.contains("the event source mapping &lt;polling&gt;"));
        assert!(table.contains("stream → invocation — the bottleneck"));
        assert_eq!(table.matches("the bottleneck").count(), 1);
        let summary = report.summary();
        assert!(summary.contains("stage stream → invocation"), "{summary}");
        assert!(
            !RunReport::default()
                .html()
                .unwrap()
                .contains("Where the time goes"),
            "no table without stages"
        );
    }
}
