//! `mmkit replay --compare`: one trace replayed under every placement
//! policy (grouping on), Linux's and the default policy with grouping off,
//! the default policy without compaction, and the peer, printed as one
//! table and drawn as one plot of the order-9 unusable index over the
//! replay.
//!
//! Owns the list of configurations, the table and the plot; each replay is
//! an ordinary `replay` with other arguments, so nothing
//! here touches the allocator or the engine.

use super::metrics::Sample;
use super::report::Report;
use super::{replay_input, ReplayArgs, ReplayError};
use mmkit::PlacementPolicy;
use plotters::prelude::*;
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;

/// One row of the comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `policy`, `policy --no-grouping`, `policy --no-compact`, or the
    /// peer's name.
    pub name: String,
    /// Order-9 unusable index at the end.
    pub unusable_index_order9: f64,
    /// Its time average.
    pub unusable_index_order9_mean: f64,
    /// Allocation failures.
    pub failures: u64,
    /// Order ≥ 9 failures with twice the request free (`null` for the peer).
    pub order9_failures_with_2x_free: Option<u64>,
    /// Mixed pageblocks at the end (`null` for the peer: no migratetypes).
    pub mixed_pageblocks: Option<u64>,
    /// Blocks compaction moved (`pgmigrate_success`; `null` without
    /// compaction and for the peer).
    pub migrated_blocks: Option<u64>,
    /// Replay loop, events per second.
    pub loop_events_per_sec: f64,
    /// (events, index) through the replay, for the plot.
    #[serde(skip)]
    pub series: Vec<(u64, f64)>,
}

/// One configuration of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Configuration {
    /// Placement policy.
    pub policy: PlacementPolicy,
    /// Mobility grouping on.
    pub grouping: bool,
    /// Compaction on.
    pub compact: bool,
}

/// The configurations compared, in table order: every policy with grouping,
/// then Linux's and the default policy without grouping, then (when
/// compaction is on) the default policy without compaction.
pub fn configurations(compact: bool) -> Vec<Configuration> {
    let c = |policy, grouping, compact| Configuration { policy, grouping, compact };
    let mut out: Vec<Configuration> = PlacementPolicy::ALL.iter().map(|&p| c(p, true, compact)).collect();
    out.push(c(PlacementPolicy::Linux, false, compact));
    if PlacementPolicy::default() != PlacementPolicy::Linux {
        out.push(c(PlacementPolicy::default(), false, compact));
    }
    if compact {
        out.push(c(PlacementPolicy::default(), true, false));
    }
    out
}

fn row_of(report: &Report, config: Configuration) -> Row {
    let mut name = report.policy.to_string();
    if !config.grouping {
        name.push_str(" --no-grouping");
    }
    if !config.compact {
        name.push_str(" --no-compact");
    }
    Row {
        name,
        unusable_index_order9: report.unusable_index_order9,
        unusable_index_order9_mean: report.unusable_index_order9_mean,
        failures: report.failures,
        order9_failures_with_2x_free: Some(report.order9_failures_with_2x_free),
        mixed_pageblocks: Some(report.final_state.sample.mixed_pageblocks),
        migrated_blocks: report.compaction.as_ref().map(|c| c.pgmigrate_success),
        loop_events_per_sec: report.loop_events_per_sec,
        series: series(&report.samples),
    }
}

fn series(samples: &[Sample]) -> Vec<(u64, f64)> {
    samples.iter().filter(|s| s.event > 0).map(|s| (s.event, s.unusable_index_order9)).collect()
}

/// Replays `args.trace` under every configuration (the peer along with
/// the first) and returns the rows, peer last.
///
/// # Errors
/// As `replay`.
pub fn compare(args: &ReplayArgs) -> Result<Vec<Row>, ReplayError> {
    super::plot::check_outputs(args).map_err(ReplayError::Usage)?;
    let trace = super::open_trace(args)?;
    let mut rows = Vec::new();
    let mut peer_row = None;
    // The rows without compaction are only added when compaction is on,
    // so `--no-compact` shows every policy without it.
    for (i, config) in configurations(!args.no_compact).into_iter().enumerate() {
        let mut one = args.clone();
        one.policy = config.policy;
        one.no_grouping = !config.grouping;
        one.no_compact = !config.compact;
        one.plot = None;
        one.peer = (i == 0).then(|| "buddy_system_allocator".to_string());
        let report = replay_input(&one, &trace, false, |_, _| {})?;
        if args.check {
            super::check_passed(&report)?;
        }
        if let Some(p) = &report.peer {
            peer_row = Some(Row {
                name: format!("peer {}", p.name),
                unusable_index_order9: p.unusable_index_order9,
                unusable_index_order9_mean: p.unusable_index_order9_mean,
                failures: p.failures,
                order9_failures_with_2x_free: None,
                mixed_pageblocks: None,
                migrated_blocks: None,
                loop_events_per_sec: p.loop_events_per_sec,
                series: p.index_samples.iter().copied().filter(|s| s.0 > 0).collect(),
            });
        }
        rows.push(row_of(&report, config));
    }
    rows.extend(peer_row);
    if let Some(prefix) = &args.plot {
        plot(&super::plot::with_suffix(prefix, super::plot::COMPARE), &rows).map_err(ReplayError::Failed)?;
    }
    Ok(rows)
}

/// The rows as a text table.
pub fn table(args: &ReplayArgs, rows: &[Row]) -> String {
    let mut o = String::new();
    let memory = args.memory.map_or_else(|| "the trace's span".to_string(), |b| format!("{} MiB", b >> 20));
    let _ = writeln!(o, "mmkit replay {} --compare (memory {memory})", args.trace.display());
    let _ = writeln!(
        o,
        "{:<28} {:>12} {:>12} {:>9} {:>14} {:>7} {:>10} {:>10}",
        "configuration", "unusable o9", "time avg", "failures", "o9 fail 2x", "mixed", "migrated", "M ev/s"
    );
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |n| n.to_string());
    for r in rows {
        let _ = writeln!(
            o,
            "{:<28} {:>12.3} {:>12.4} {:>9} {:>14} {:>7} {:>10} {:>10.2}",
            r.name,
            r.unusable_index_order9,
            r.unusable_index_order9_mean,
            r.failures,
            opt(r.order9_failures_with_2x_free),
            opt(r.mixed_pageblocks),
            opt(r.migrated_blocks),
            r.loop_events_per_sec / 1e6
        );
    }
    o
}

/// One line per row: the order-9 unusable index over the replay.
fn plot(path: &Path, rows: &[Row]) -> Result<(), String> {
    const COLOURS: [RGBColor; 9] = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(188, 189, 34),
        RGBColor(40, 40, 40),
    ];
    super::plot::render_png(path, (900, 480), |root| {
        root.fill(&WHITE)?;
        let last = rows.iter().flat_map(|r| r.series.iter().map(|s| s.0)).max().unwrap_or(1).max(1);
        let top = rows.iter().flat_map(|r| r.series.iter().map(|s| s.1)).fold(0.0f64, f64::max).max(0.01) * 1.1;
        let text = super::plot::fonts_work();
        let mut builder = ChartBuilder::on(root);
        if text {
            builder
                .caption("Order-9 unusable free space index over the replay", ("sans-serif", 20))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60);
        } else {
            builder.margin(10);
        }
        let mut chart = builder.build_cartesian_2d(0u64..last, 0f64..top)?;
        if text {
            chart.configure_mesh().x_desc("events replayed").y_desc("unusable index, order 9").draw()?;
        }
        for (i, row) in rows.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let drawn = chart.draw_series(LineSeries::new(row.series.iter().copied(), colour.stroke_width(2)))?;
            if text {
                drawn
                    .label(row.name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
            }
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }
        Ok(())
    })
}
