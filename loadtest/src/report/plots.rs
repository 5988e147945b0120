//! The report's SVG plots (plotters): throughput over the run's active span, the latency
//! CDF, rejects by reason.

use super::{Percentiles, Sample};
use anyhow::Result;
use awsmp_contract::limits::marketplace::{
    BATCH_METER_USAGE_CALLS_PER_SECOND, MAX_USAGE_RECORDS_PER_CALL,
};
use plotters::prelude::*;
use std::collections::BTreeMap;

pub(super) fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e:?}")
}

/// From the first sample to the last one at which any count still moved (a run's settling
/// tail of unchanged counts is left out), padded by a sample.
pub(super) fn active_span(timeline: &[Sample]) -> (f64, f64) {
    let key = |s: &Sample| {
        (
            s.produced,
            s.acked,
            s.consumed,
            s.rows_written,
            s.aggregated,
            s.billed,
        )
    };
    let t_min = timeline.first().map_or(0.0, |s| s.t);
    let last_move = timeline
        .windows(2)
        .rposition(|w| key(&w[0]) != key(&w[1]))
        .map_or(timeline.len().saturating_sub(1), |i| {
            (i + 2).min(timeline.len() - 1)
        });
    let t_max = timeline.get(last_move).map_or(1.0, |s| s.t);
    (t_min, t_max.max(t_min + 1.0))
}

/// A plotted stage: its legend, its (t, per second) points, its colour.
pub(super) type Series<'a> = (&'a str, Vec<(f64, f64)>, RGBColor);

/// Every stage's rate between `t_min` and `t_max`.
pub(super) fn stage_rates(timeline: &[Sample], t_min: f64, t_max: f64) -> [Series<'static>; 6] {
    // Per-second rates from cumulative counters, averaged over a 5-sample window: the
    // consumer finishes whole batches, so raw per-second deltas come in spikes.
    let rate = |f: fn(&Sample) -> u64| -> Vec<(f64, f64)> {
        const WINDOW: usize = 5;
        (1..timeline.len())
            .map(|i| {
                let j = i.saturating_sub(WINDOW);
                let dt = (timeline[i].t - timeline[j].t).max(1e-3);
                (
                    timeline[i].t,
                    f(&timeline[i]).saturating_sub(f(&timeline[j])) as f64 / dt,
                )
            })
            .collect()
    };
    let series: [Series; 6] = [
        ("produced events/s", rate(|s| s.produced), BLUE),
        ("acked events/s", rate(|s| s.acked), GREEN),
        ("consumed events/s", rate(|s| s.consumed), MAGENTA),
        ("row writes/s", rate(|s| s.rows_written), RED),
        (
            "aggregated group-hours/s",
            rate(|s| s.aggregated),
            RGBColor(230, 140, 0),
        ),
        ("billed records/s", rate(|s| s.billed), BLACK),
    ];
    series.map(|(name, points, color)| {
        let points = points
            .into_iter()
            .filter(|p| (t_min..=t_max).contains(&p.0))
            .collect::<Vec<_>>();
        (name, points, color)
    })
}

/// The drawing area of one panel of the throughput plot.
type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// Events (or rows, records) per second per stage, from cumulative samples, in two panels
/// over one time axis: events (produced, acked, consumed), then what they become (row
/// writes, aggregated group-hours, billed records) against the Marketplace quota.
pub(super) fn throughput_svg(timeline: &[Sample]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let (t_min, t_max) = active_span(timeline);
        let [produced, acked, consumed, rows, aggregated, billed] =
            stage_rates(timeline, t_min, t_max);
        let panels = root.split_evenly((2, 1));
        // The Marketplace quota (records/s) is always on the lower chart: billing is measured
        // against it.
        let quota =
            f64::from(BATCH_METER_USAGE_CALLS_PER_SECOND) * MAX_USAGE_RECORDS_PER_CALL as f64;
        panel(
            &panels[0],
            "events per second",
            &[produced, acked, consumed],
            None,
            (t_min, t_max),
        )?;
        panel(
            &panels[1],
            "rows, group-hours, records per second",
            &[rows, aggregated, billed],
            Some(quota),
            (t_min, t_max),
        )?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// One panel: `series` over `[t_min, t_max]`, with a dashed `quota` line when given.
fn panel(
    area: &Area<'_>,
    y_desc: &str,
    series: &[Series<'_>],
    quota: Option<f64>,
    (t_min, t_max): (f64, f64),
) -> Result<()> {
    let y_max = series
        .iter()
        .flat_map(|(_, v, _)| v.iter().map(|p| p.1))
        .fold(quota.unwrap_or(1.0), f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        // A little room after the last sample: a burst there (billing at the end of a run)
        // would otherwise sit on the frame.
        .build_cartesian_2d(t_min..t_max + ((t_max - t_min) * 0.03).max(1.0), 0.0..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc(y_desc)
        .draw()
        .map_err(plot_err)?;
    if let Some(quota) = quota {
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(DashedLineSeries::new(
                [(t_min, quota), (t_max, quota)],
                6,
                4,
                grey.stroke_width(1),
            ))
            .map_err(plot_err)?
            .label("Marketplace quota (10 calls/s × 25 records)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
    }
    // Earlier series are drawn wider, so a later one on the same values (billed records on
    // aggregated group-hours, acked on produced) leaves both visible.
    for (i, (name, points, color)) in series.iter().enumerate() {
        let color = *color;
        let width = 2 + (series.len() - 1 - i) as u32;
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
            .map_err(plot_err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    Ok(())
}

/// The latency distribution of each stage as a CDF: milliseconds (log) against the fraction of
/// samples at or below. A stage timed on the pipeline's controlled clock says so in its legend.
pub(super) fn latency_svg(latency: &BTreeMap<String, Percentiles>) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let points = |p: &Percentiles| -> Vec<(f64, f64)> {
            p.cdf.iter().map(|&[ms, q]| (ms.max(0.01), q)).collect()
        };
        let x_max = latency.values().map(|p| p.max).fold(1.0, f64::max) * 2.0;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d((0.01..x_max).log_scale(), 0.0..1.0)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("milliseconds (log scale)")
            .y_desc("fraction at or below")
            .draw()
            .map_err(plot_err)?;
        for (i, (name, p)) in latency.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let label = match name.strip_suffix("(virtual)") {
                Some(stage) => format!("{stage} (virtual clock)"),
                None => name.clone(),
            };
            chart
                .draw_series(LineSeries::new(points(p), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// A horizontal bar per reason.
pub(super) fn bars_svg(counts: &BTreeMap<String, u64>) -> Result<String> {
    let mut svg = String::new();
    {
        let height = 60 + 28 * counts.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let max = counts.values().copied().max().unwrap_or(1) as f64 * 1.1;
        let labels: Vec<&String> = counts.keys().collect();
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(260)
            .build_cartesian_2d(0.0..max, (0..labels.len()).into_segmented())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => {
                    labels.get(*i).map_or(String::new(), |s| s.to_string())
                }
                _ => String::new(),
            })
            .x_desc("units")
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(counts.values().enumerate().map(|(i, v)| {
                Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(i)),
                        (*v as f64, SegmentValue::Exact(i + 1)),
                    ],
                    RED.mix(0.6).filled(),
                )
            }))
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}
