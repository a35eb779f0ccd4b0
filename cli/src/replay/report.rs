//! The replay report: one JSON object (schema in `docs/trace-replay.md`'s "Trace
//! replay" section) and the same facts as a text table.
//!
//! Owns field names, units and layout; computes nothing beyond unit
//! conversions. Must not touch the allocator or the engine.

use super::engine::{Counts, NR_ORDERS};
use super::metrics::{self, FinalState, LinuxState, Sample};
use super::peer::PeerReport;
use super::scan::{Scan, SourceCounts};
use super::ReplayArgs;
use mmkit::MigrateType;
use serde::Serialize;
use std::fmt::Write;

/// Seconds spent in each phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timing {
    /// First pass (decompress + parse + live-block bookkeeping).
    pub scan_seconds: f64,
    /// Second pass without the peer: decompress, parse, replay, samples.
    pub replay_seconds: f64,
    /// Decompressing and parsing in the second pass.
    pub parse_seconds: f64,
    /// The replay loop over parsed events, samples excluded.
    pub loop_seconds: f64,
    /// Taking metric samples and proactive compaction rounds.
    pub sample_seconds: f64,
    /// Proactive compaction rounds (unless `--no-compact`).
    pub compact_seconds: f64,
}

/// The trace as read.
#[derive(Clone, Debug, Serialize)]
pub struct TraceInfo {
    /// Path as given.
    pub path: String,
    /// `none`, `xz`, `zstd` or `binary` (from the magic bytes).
    pub compression: &'static str,
    /// The file the events were read from: `path`, or with `--cache` the
    /// binary copy beside it.
    pub replayed_from: String,
    /// Why `--cache` could not write its file (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_note: Option<String>,
    /// The text's line and event counts.
    #[serde(flatten)]
    pub source: SourceCounts,
    /// The first-pass summary: events replayed, PFN span, peak live pages.
    #[serde(flatten)]
    pub scan: Scan,
}

/// Everything `mmkit replay` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `policy` or `placed`.
    pub mode: &'static str,
    /// False with `--no-grouping`.
    pub grouping: bool,
    /// The placement policy (`--policy`).
    pub policy: &'static str,
    /// Memory of the replay map in bytes.
    pub memory_bytes: u64,
    /// Its first PFN (aligned down from the trace's lowest PFN).
    pub zone_start_pfn: u64,
    /// Its pages.
    pub zone_pages: u64,
    /// CPUs with per-CPU lists.
    pub cpus: usize,
    /// The trace.
    pub trace: TraceInfo,
    /// Unusable free space index for order 9 at the end, 0..1.
    pub unusable_index_order9: f64,
    /// Time average of the order-9 unusable index over the samples after
    /// the empty start (per-CPU lists not drained), 0..1.
    pub unusable_index_order9_mean: f64,
    /// Failed allocations of order ≥ 9 while at least twice the request
    /// was free.
    pub order9_failures_with_2x_free: u64,
    /// Fragmentation index for order 9 at the end.
    pub fragmentation_index_order9: f64,
    /// Events per second end to end: second-pass decompression, parsing,
    /// replay and samples (not the first pass, not the peer).
    pub events_per_sec: f64,
    /// Events per second of the replay loop alone over parsed events.
    pub loop_events_per_sec: f64,
    /// Phase times.
    pub timing: Timing,
    /// What the replay met: unseen frees, implied frees, failures, ….
    pub counts: Counts,
    /// mmkit allocation failures, all orders.
    pub failures: u64,
    /// Blocks handed out while already allocated (with `--check`).
    pub double_handouts: Option<u64>,
    /// `ok` or the violation (with `--check`).
    pub invariants: Option<String>,
    /// Pageblock breaks, fallbacks and per-CPU list traffic.
    pub placement: metrics::PlacementStats,
    /// Compaction counters (`null` with `--no-compact` or in placed mode).
    pub compaction: Option<metrics::CompactionStats>,
    /// End state after draining per-CPU lists.
    #[serde(rename = "final")]
    pub final_state: FinalState,
    /// Linux's own Normal zone before the recording (trace header).
    pub linux_before: Option<LinuxState>,
    /// Linux's own Normal zone after the recording (trace header).
    pub linux_after: Option<LinuxState>,
    /// Samples through the replay.
    pub samples: Vec<Sample>,
    /// `buddy_system_allocator` on the same events (with `--peer`).
    pub peer: Option<PeerReport>,
}

/// What [`Report::new`] is built from.
pub struct Parts<'a> {
    pub args: &'a ReplayArgs,
    pub replayed_from: &'a std::path::Path,
    pub cache_note: Option<String>,
    pub scan: &'a Scan,
    pub zone: (u64, u64),
    pub nr_cpus: usize,
    pub counts: Counts,
    pub double_handouts: Option<u64>,
    pub invariants: Option<String>,
    pub events_per_sec: f64,
    pub loop_events_per_sec: f64,
    pub timing: Timing,
    pub samples: Vec<Sample>,
    pub final_state: FinalState,
    pub placement: metrics::PlacementStats,
    pub compaction: Option<metrics::CompactionStats>,
    pub peer: Option<PeerReport>,
}

impl Report {
    /// Assembles the report.
    pub fn new(p: Parts<'_>) -> Self {
        Report {
            mode: p.args.mode.name(),
            grouping: !p.args.no_grouping,
            policy: p.args.policy.name(),
            memory_bytes: p.zone.1 << 12,
            zone_start_pfn: p.zone.0,
            zone_pages: p.zone.1,
            cpus: p.nr_cpus,
            trace: TraceInfo {
                path: p.args.trace.display().to_string(),
                compression: p.scan.compression.map_or("none", |c| c.name()),
                replayed_from: p.replayed_from.display().to_string(),
                cache_note: p.cache_note,
                source: p.scan.stats.clone(),
                scan: p.scan.clone(),
            },
            unusable_index_order9: p.final_state.sample.unusable_index_order9,
            unusable_index_order9_mean: metrics::mean_unusable_index(&p.samples),
            order9_failures_with_2x_free: p.counts.order9_failures_with_2x_free,
            fragmentation_index_order9: p.final_state.sample.fragmentation_index_order9,
            events_per_sec: p.events_per_sec,
            loop_events_per_sec: p.loop_events_per_sec,
            timing: p.timing,
            failures: p.counts.failures(),
            counts: p.counts,
            double_handouts: p.double_handouts,
            invariants: p.invariants,
            final_state: p.final_state,
            placement: p.placement,
            compaction: p.compaction,
            linux_before: metrics::linux_state(&p.scan.header, "buddyinfo_before"),
            linux_after: metrics::linux_state(&p.scan.header, "buddyinfo_after"),
            samples: p.samples,
            peer: p.peer,
        }
    }

    /// The report as text.
    pub fn to_table(&self) -> String {
        let mut o = String::new();
        let t = &self.trace;
        let s = &t.scan;
        let c = &self.counts;
        let _ = writeln!(
            o,
            "mmkit replay {} ({} mode, policy {}, mobility grouping {})",
            t.path,
            self.mode,
            self.policy,
            if self.grouping { "on" } else { "off" }
        );
        let _ = writeln!(
            o,
            "trace: {}; {} lines, {} skipped as malformed, {} other events",
            events_line(s, &t.source),
            t.source.lines,
            t.source.skipped,
            t.source.other_events
        );
        for e in &t.source.first_errors {
            let _ = writeln!(o, "  skipped {e}");
        }
        if t.replayed_from != t.path {
            let _ = writeln!(o, "  replayed from {} (binary copy)", t.replayed_from);
        }
        if let Some(note) = &t.cache_note {
            let _ = writeln!(o, "  {note}");
        }
        let _ = writeln!(
            o,
            "  pfns {:#x}..{:#x}; peak live pages {} ({} MiB; 1.25x = {} MiB) at event {}; {} pages live at the end",
            s.min_pfn,
            s.end_pfn,
            s.peak_live_pages,
            s.peak_live_pages >> 8,
            (s.peak_live_pages * 5 / 4) >> 8,
            s.peak_live_at_event,
            s.live_pages_at_end
        );
        let _ = writeln!(
            o,
            "memory: {} MiB ({} pages from pfn {:#x}), {} CPUs, per-CPU lists {}",
            self.memory_bytes >> 20,
            self.zone_pages,
            self.zone_start_pfn,
            self.cpus,
            if self.mode == "policy" { "on" } else { "off" }
        );
        let _ = writeln!(
            o,
            "odd events: {} frees of unseen blocks, {} order-10 zone-growth frees, {} implied frees, \
             {} partial frees, {} failed in the trace",
            c.unseen_frees(),
            c.zone_growth_frees,
            c.implied_frees,
            c.order_mismatch_frees,
            c.trace_failed_by_order.iter().sum::<u64>()
        );
        let _ = writeln!(
            o,
            "mmkit failures: {}{}; order >= 9 with twice the request free: {}",
            self.failures,
            by_order(&c.failures_by_order),
            self.order9_failures_with_2x_free
        );
        if let Some(d) = self.double_handouts {
            let _ =
                writeln!(o, "check: {d} double hand-outs, invariants {}", self.invariants.as_deref().unwrap_or("-"));
        }
        let _ = writeln!(
            o,
            "speed: {:.2} M events/s end to end (decompress + parse + replay), {:.2} M events/s replay loop only",
            self.events_per_sec / 1e6,
            self.loop_events_per_sec / 1e6
        );
        let f = &self.final_state;
        let _ = writeln!(o, "\nend state (per-CPU lists drained: {} pages), free pages by order:", f.pcp_pages_drained);
        let _ = write!(o, "{:<12}", "order");
        for order in 0..NR_ORDERS {
            let _ = write!(o, "{order:>8}");
        }
        o.push('\n');
        for mt in MigrateType::ALL.iter().take(4) {
            let _ = write!(o, "{:<12}", mt.name());
            for row in &f.free_pages_by_order_and_type {
                let _ = write!(o, "{:>8}", row[*mt as usize]);
            }
            o.push('\n');
        }
        let _ = write!(o, "{:<12}", "all");
        for n in &f.sample.free_pages_by_order {
            let _ = write!(o, "{n:>8}");
        }
        o.push('\n');
        let pb = &f.sample.pageblocks_by_type;
        let _ = writeln!(
            o,
            "pageblocks: {} unmovable, {} movable, {} reclaimable, {} highatomic; {} mixed of {}",
            pb[0], pb[1], pb[2], pb[3], f.sample.mixed_pageblocks, f.pageblocks
        );
        let _ = writeln!(
            o,
            "order 9: unusable free space index {:.3} (time average {:.3}), fragmentation index {:.3}",
            self.unusable_index_order9, self.unusable_index_order9_mean, self.fragmentation_index_order9
        );
        let pl = &self.placement;
        let mut breaks = [0u64; NR_ORDERS];
        breaks.copy_from_slice(&pl.pageblock_breaks_by_order[..NR_ORDERS]);
        let _ = writeln!(
            o,
            "placement: {} pageblock breaks{} (unmovable {}, movable {}, reclaimable {}); {} fallbacks, \
             {} pageblocks claimed, {} steals; per-CPU lists: {} refills ({} pages), {} spills ({} pages)",
            breaks.iter().sum::<u64>(),
            by_order(&breaks),
            pl.pageblock_breaks_by_type[0],
            pl.pageblock_breaks_by_type[1],
            pl.pageblock_breaks_by_type[2],
            pl.fallback_allocs,
            pl.pageblocks_claimed,
            pl.steals,
            pl.pcp_refills,
            pl.pcp_refill_pages,
            pl.pcp_spills,
            pl.pcp_spill_pages
        );
        if let Some(c) = &self.compaction {
            let _ = writeln!(
                o,
                "compaction: {} stalls ({} success, {} fail), {} proactive rounds; scanned {} (migrate) {} (free); \
                 {} blocks moved, {} not",
                c.compact_stall,
                c.compact_success,
                c.compact_fail,
                c.proactive_runs,
                c.compact_migrate_scanned,
                c.compact_free_scanned,
                c.pgmigrate_success,
                c.pgmigrate_fail
            );
        }
        if let (Some(b), Some(a)) = (&self.linux_before, &self.linux_after) {
            let _ = writeln!(
                o,
                "Linux's Normal zone (trace header): unusable index {:.3} before, {:.3} after \
                 ({} free pages after, untraced memory included)",
                b.unusable_index_order9, a.unusable_index_order9, a.free_pages
            );
        }
        if let Some(p) = &self.peer {
            let _ = writeln!(
                o,
                "peer {}: {:.2} M events/s loop only ({:.2}x mmkit's loop time), {} failures, \
                 order-9 unusable index {:.3} (time average {:.3})",
                p.name,
                p.loop_events_per_sec / 1e6,
                p.ratio_vs_mmkit,
                p.failures,
                p.unusable_index_order9,
                p.unusable_index_order9_mean
            );
        }
        o
    }
}

/// The events read, replayed and dropped, so that the numbers add up:
/// `N events replayed (A allocs, F frees)` when all were replayed, else
/// `N events (A allocs, F frees): R replayed, D dropped (why)`. An event
/// is dropped for an order above mmkit's largest, or (a binary trace read
/// with `--limit`) for lying past the limit.
fn events_line(s: &Scan, source: &SourceCounts) -> String {
    let read = source.allocs + source.frees;
    let past_limit = read.saturating_sub(s.events + s.unsupported_order);
    if s.unsupported_order == 0 && past_limit == 0 {
        return format!("{} events replayed ({} allocs, {} frees)", s.events, source.allocs, source.frees);
    }
    let mut why = Vec::new();
    if s.unsupported_order > 0 {
        why.push(format!("{} of an order above {}", s.unsupported_order, super::engine::MAX_ORDER));
    }
    if past_limit > 0 {
        why.push(format!("{past_limit} past --limit"));
    }
    format!(
        "{read} events ({} allocs, {} frees): {} replayed, {} dropped ({})",
        source.allocs,
        source.frees,
        s.events,
        s.unsupported_order + past_limit,
        why.join(", ")
    )
}

/// `(order 3: 2, order 9: 1)` for the non-zero entries, or nothing.
fn by_order(counts: &[u64; NR_ORDERS]) -> String {
    let parts: Vec<String> =
        counts.iter().enumerate().filter(|(_, &n)| n > 0).map(|(o, n)| format!("order {o}: {n}")).collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}
