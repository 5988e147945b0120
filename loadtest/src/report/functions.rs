//! The report's account of a hosted run's functions: each one that ran as a process, its
//! processes, its clock and its invocations, and what the run sent through meter-ingest.

use super::escape;
use crate::loadrun::IngestSent;
use awsmp_local_stack::local::hosted::FunctionRun;
use std::fmt::Write as _;

/// The terminal summary's lines.
pub(super) fn write_summary(
    s: &mut String,
    functions: &[FunctionRun],
    ingest: Option<&IngestSent>,
) {
    if !functions.is_empty() {
        let list: Vec<String> = functions
            .iter()
            .map(|f| format!("{} {}", f.name, f.invocations))
            .collect();
        let _ = writeln!(
            s,
            "functions under the host ({}), invocations: {}",
            functions.len(),
            list.join(", ")
        );
    }
    if let Some(i) = ingest {
        let _ = writeln!(
            s,
            "meter-ingest: {} events, {} units in {} async invokes as {} ({} retries, {} crashed, \
             {} to the on-failure destination); {} units accepted, {} refused ({} of them bad \
             inputs sent on purpose)",
            i.events,
            i.units,
            i.invokes,
            i.invoked_arn,
            i.retries,
            i.crashes,
            i.on_failure,
            i.accepted_units,
            i.refused_units.values().sum::<u64>(),
            i.injected_units.values().sum::<u64>()
        );
    }
}

/// The HTML section (empty when nothing ran under the host).
pub(super) fn html(functions: &[FunctionRun], ingest: Option<&IngestSent>) -> String {
    let mut h = String::new();
    if functions.is_empty() {
        return h;
    }
    let _ = write!(
        h,
        "<h2>Functions under the host ({})</h2><table><tr><th>function</th><th>processes</th>\
         <th>clock</th><th>invocations</th></tr>",
        functions.len()
    );
    for f in functions {
        let _ = write!(
            h,
            "<tr><td style=\"text-align:left\">{}</td><td>{}</td><td style=\"text-align:left\">{}</td><td>{}</td></tr>",
            escape(&f.name),
            f.processes,
            escape(&f.clock),
            f.invocations
        );
    }
    h.push_str("</table>");
    if let Some(i) = ingest {
        let _ = write!(
            h,
            "<h2>Usage through meter-ingest</h2><table>\
             <tr><th>invoked ARN</th><td style=\"text-align:left\">{}</td></tr>\
             <tr><th>async invokes</th><td>{}</td></tr><tr><th>retries</th><td>{}</td></tr>\
             <tr><th>crashed attempts</th><td>{}</td></tr>\
             <tr><th>to the on-failure destination</th><td>{}</td></tr>\
             <tr><th>events</th><td>{}</td></tr><tr><th>units sent</th><td>{}</td></tr>\
             <tr><th>units accepted</th><td>{}</td></tr>",
            escape(&i.invoked_arn),
            i.invokes,
            i.retries,
            i.crashes,
            i.on_failure,
            i.events,
            i.units,
            i.accepted_units
        );
        for (reason, units) in &i.refused_units {
            let declared = i.injected_units.get(reason).copied().unwrap_or(0);
            let _ = write!(
                h,
                "<tr><th>refused: {}</th><td>{units} ({declared} sent as bad inputs)</td></tr>",
                escape(reason)
            );
        }
        h.push_str("</table>");
    }
    h
}
