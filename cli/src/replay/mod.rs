//! `mmkit replay`: replays a recorded trace of Linux's page allocator into
//! mmkit and reports placement quality, fragmentation and speed.
//!
//! Owns the command's arguments ([`ReplayArgs`], parsed by clap) and its
//! flow: a quick first pass (`scan`) for the PFN span,
//! CPUs and peak of live pages; building the map; a second pass that
//! decompresses and parses in chunks of events and replays each chunk
//! (`engine`), into the peer too when asked (`peer`); metric samples at a
//! bounded number of points (`metrics`); the report (`report`) and plots
//! (`plot`). Decompression is `source`'s, line parsing `mmkit_trace`'s;
//! this file must not grow any of those concerns.
//!
//! Timing: the chunked second pass times parsing, the replay loop and
//! sampling separately, so one run gives both the end-to-end rate
//! (decompress + parse + replay + samples) and the loop-only rate over
//! already parsed events, with memory bounded by the chunk size.

pub mod cache;
pub mod compare;
pub mod engine;
pub mod metrics;
pub mod peer;
pub mod plot;
pub mod report;
pub mod scan;
pub mod source;
pub mod stream;
pub mod writer;

use crate::paths::{Input, Passes};
use crate::size;
use clap::Args;
use engine::{Engine, Ev, Mode};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mmkit::{CopyMigrator, MemoryMapBuilder, PageAllocator, PlacementPolicy, QuietHooks, ZoneType};
use mmkit::{Cpus, Report, Tuning};
use std::fs::File;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Events parsed and replayed per chunk.
const CHUNK: usize = 1 << 16;
/// Pages of the largest block: zone bounds are aligned to it.
const MAX_BLOCK_PAGES: u64 = 1 << engine::MAX_ORDER;
/// Most CPUs a replay keeps per-CPU lists for; higher CPU numbers fold.
const MAX_CPUS: u32 = 256;
/// Largest trace PFN span and replay map (2^26 pages = 256 GiB).
const MAX_SPAN_PAGES: u64 = engine::MAX_MAP_PAGES - (1 << 15);

/// `mmkit replay`'s arguments, exactly as the command line takes them.
#[derive(Clone, Debug, Args)]
pub struct ReplayArgs {
    /// The trace: a file, or a pipe or FIFO (`/dev/stdin`), which is
    /// copied to an unnamed temporary file first since it is read twice.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Who decides where blocks go.
    #[arg(long, value_enum, default_value = "policy")]
    pub mode: Mode,
    /// Memory of the replay (policy mode): bytes or K/M/G/T. Default: the
    /// trace's PFN span. The report gives the trace's peak of live pages,
    /// e.g. to replay under pressure at 1.25x that peak.
    #[arg(long, value_name = "SIZE", value_parser = size::parse_size)]
    pub memory: Option<u64>,
    /// Turn mobility grouping off (Linux's page_group_by_mobility_disabled).
    #[arg(long)]
    pub no_grouping: bool,
    /// Placement policy (policy mode): which free block serves a request.
    /// `linux` is Linux's own choice (the free list's head); `addr` takes
    /// the lowest PFN; `two-ends` the lowest for movable requests and the
    /// highest for the others; `lean` (default) Linux's choice and lists
    /// with sparsest-first compaction; `lean-movable-pcp` the same with
    /// per-CPU lists for movable pages only.
    #[arg(long, value_name = "POLICY", default_value = PlacementPolicy::default().name(), value_parser = parse_policy)]
    pub policy: PlacementPolicy,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write PREFIX-free-by-order.png and PREFIX-pageblocks.png (with
    /// --compare, PREFIX-compare.png). Checked before the replay starts:
    /// PREFIX's directory must exist and no file may be the trace (by any
    /// path, symbolic or hard link included).
    #[arg(long, value_name = "PREFIX")]
    pub plot: Option<PathBuf>,
    /// Replay the same events into a peer allocator too (policy mode, order
    /// and count only) and compare speed and order-9 fragmentation.
    #[arg(long, value_name = "PEER", value_parser = ["buddy_system_allocator"])]
    pub peer: Option<String>,
    /// Turn compaction off. By default (policy mode) the map has a
    /// migrator, as Linux always can migrate: an order ≥ 9 allocation that
    /// would fail compacts first (direct compaction), and kcompactd checks
    /// every --compact-interval events whether the order-9 fragmentation
    /// score is above the policy's start mark; moved blocks are followed,
    /// so later frees of their trace PFN find them.
    #[arg(long)]
    pub no_compact: bool,
    /// Linux's `vm.compaction_proactiveness` (0..=100) instead of the
    /// policy's own marks: a proactive round starts when 100 × the order-9
    /// unusable index exceeds min(max(100 - N, 5) + 10, 100) and compacts
    /// down to max(100 - N, 5). 0 turns proactive compaction off.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub compact_proactiveness: Option<u32>,
    /// Proactive compaction's marks in thousandths of the fragmentation
    /// score, START,STOP (default: the policy's, `linux` 900,800 from
    /// proactiveness 20, the others 15,5).
    #[arg(long, value_name = "START,STOP", value_parser = parse_marks)]
    pub compact_marks: Option<(u32, u32)>,
    /// Events between two kcompactd checks (Linux checks every 500 ms; the
    /// recorded traces run 12 000 to 60 000 events per second).
    #[arg(long, value_name = "EVENTS", default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..))]
    pub compact_interval: u64,
    /// Per-CPU list upkeep every --compact-interval events (policy mode),
    /// with or without compaction: `decay` shrinks each list's `high` by an
    /// eighth and spills at most a batch (Linux's `decay_pcp_high`, run by
    /// the vmstat worker every second); `drain` empties the lists. Default
    /// none: the lists change only on allocations and frees.
    #[arg(long, value_name = "UPKEEP", value_enum, default_value_t = PcpUpkeep::None)]
    pub pcp_upkeep: PcpUpkeep,
    /// Replay under every placement policy, Linux's and the default policy
    /// without grouping, and the peer; print one table (with `--plot`, also
    /// PREFIX-compare.png). `--policy`, `--no-grouping` and `--peer` are
    /// ignored.
    #[arg(long)]
    pub compare: bool,
    /// Metric samples taken through the replay.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: u32,
    /// Replay only the first N events.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Check that no page is handed out twice and the allocator's invariants
    /// at the end (slower); exit 1 if either fails.
    #[arg(long)]
    pub check: bool,
    /// Parse the whole trace into memory (16 bytes per event) before the
    /// replay, so that the replay loop is timed alone with warm caches
    /// (default: stream in chunks of 65536 events, constant memory).
    #[arg(long)]
    pub preload: bool,
    /// Replay from a binary copy of the trace beside it (TRACE.mmkt):
    /// written by the first pass when missing or out of date (the trace's
    /// size or modification time changed), read without a first pass
    /// afterwards. Ignored with --limit, and for a trace that is a stream.
    #[arg(long)]
    pub cache: bool,
    /// A malformed line (a field out of range included: a PFN past 2^52,
    /// a CPU past 8191) is an error naming its line, instead of being
    /// skipped and counted.
    #[arg(long)]
    pub strict: bool,
}

/// `--pcp-upkeep`: what happens to the per-CPU lists between events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PcpUpkeep {
    /// Nothing.
    None,
    /// Linux's `decay_pcp_high`.
    Decay,
    /// `drain_local_pages` on every CPU.
    Drain,
}

/// `--compact-marks`' parser: `START,STOP` in thousandths, STOP ≤ START ≤ 1000.
fn parse_marks(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{text:?}: want START,STOP in thousandths (0..=1000, STOP <= START), e.g. 15,5");
    let (a, b) = text.split_once(',').ok_or_else(bad)?;
    let (start, stop) = (a.trim().parse::<u32>().map_err(|_| bad())?, b.trim().parse::<u32>().map_err(|_| bad())?);
    if start > 1000 || stop > start {
        return Err(bad());
    }
    Ok((start, stop))
}

impl ReplayArgs {
    /// The proactive marks in force: `--compact-marks`, else those of
    /// `--compact-proactiveness`, else the policy's (start 1000 = off).
    pub fn proactive_marks(&self) -> (u32, u32) {
        match (self.compact_marks, self.compact_proactiveness) {
            (Some(marks), _) => marks,
            (None, Some(0)) => (1000, 1000),
            (None, Some(p)) => {
                (mmkit::fragmentation_score_wmark(p, false) * 10, mmkit::fragmentation_score_wmark(p, true) * 10)
            }
            (None, None) => self.policy.proactive_marks(),
        }
    }
}

/// `--policy`'s parser: a [`PlacementPolicy`] by name.
fn parse_policy(name: &str) -> Result<PlacementPolicy, String> {
    PlacementPolicy::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = PlacementPolicy::ALL.iter().map(|p| p.name()).collect();
        format!("unknown policy {name:?}; one of {}", names.join(", "))
    })
}

/// Why a replay did not run.
#[derive(Debug)]
pub enum ReplayError {
    /// Bad arguments or unusable input (exit 2).
    Usage(String),
    /// Failed while running (exit 1).
    Failed(String),
}

/// Runs a replay of `args.trace` and returns its report; a progress bar is
/// drawn on stderr when `progress` is set; `inspect` sees the engine and
/// the allocator at the end (tests use it to compare live blocks).
///
/// # Errors
/// [`ReplayError`].
pub fn replay(
    args: &ReplayArgs,
    progress: bool,
    inspect: impl FnOnce(&Engine<'_>, &PageAllocator),
) -> Result<report::Report, ReplayError> {
    replay_input(args, &open_trace(args)?, progress, inspect)
}

/// [`replay`] of a trace already opened ([`open_trace`]): `--compare`
/// replays one opened trace several times.
///
/// # Errors
/// [`ReplayError`].
pub fn replay_input(
    args: &ReplayArgs,
    trace: &Input,
    progress: bool,
    inspect: impl FnOnce(&Engine<'_>, &PageAllocator),
) -> Result<report::Report, ReplayError> {
    // The plots' place is checked before the replay, not after it.
    plot::check_outputs(args).map_err(ReplayError::Usage)?;
    // With --cache: a valid cache replaces the trace; otherwise the first
    // pass writes one and the second pass reads it.
    let (cached, writer, cache_note) =
        if args.cache && args.limit.is_none() { cache::use_cache(trace) } else { (None, None, None) };
    let trace_file = || trace.reader().map_err(|e| ReplayError::Failed(format!("{}: {e}", trace.path().display())));
    let first = match &cached {
        Some(path) => File::open(path).map_err(|e| ReplayError::Failed(format!("{}: {e}", path.display())))?,
        None => trace_file()?,
    };
    let (scan, writer) = scan::scan(first, cached.as_deref().unwrap_or(trace.path()), args.limit, writer, args.strict)
        .map_err(ReplayError::Usage)?;
    trace.check_unchanged().map_err(ReplayError::Failed)?;
    let mut cache_note = cache_note.or_else(|| scan.cache_error.clone());
    let mut input = cached.unwrap_or_else(|| trace.path().to_owned());
    if let Some(w) = writer {
        match w.finish(&scan.to_meta()) {
            Ok(_) => input = cache::cache_path(trace.path()),
            Err(e) => cache_note = Some(format!("cannot write the cache: {e}")),
        }
    }
    let reading_cache = input != trace.path();
    if scan.events == 0 {
        return Err(ReplayError::Usage(format!(
            "{}: no events to replay ({} lines read, {} skipped as malformed)",
            args.trace.display(),
            scan.stats.lines,
            scan.stats.skipped
        )));
    }
    if scan.end_pfn == 0 {
        return Err(ReplayError::Usage(format!(
            "{}: no event names a PFN (all {} allocations failed in the trace)",
            args.trace.display(),
            scan.events
        )));
    }
    let zbase = scan.min_pfn & !(MAX_BLOCK_PAGES - 1);
    let zend = scan.end_pfn.div_ceil(MAX_BLOCK_PAGES) * MAX_BLOCK_PAGES;
    let span = zend - zbase;
    if span > MAX_SPAN_PAGES {
        return Err(ReplayError::Usage(format!(
            "the trace spans {span} pages (PFN {:#x} to {:#x}); at most {MAX_SPAN_PAGES} (256 GiB) are supported",
            scan.min_pfn, scan.end_pfn
        )));
    }
    let pages = match (args.mode, args.memory) {
        (Mode::Placed, Some(_)) => {
            return Err(ReplayError::Usage(
                "--memory applies to policy mode; placed mode always covers the trace's PFN span".into(),
            ))
        }
        (_, None) => span,
        (Mode::Policy, Some(bytes)) => (bytes >> 12) & !(MAX_BLOCK_PAGES - 1),
    };
    if !(MAX_BLOCK_PAGES..=MAX_SPAN_PAGES).contains(&pages) {
        return Err(ReplayError::Usage(format!(
            "--memory must be between 4M and 255G (it gives {pages} pages of 4 KiB after rounding down to 4 MiB)"
        )));
    }
    let nr_cpus = (scan.max_cpu + 1).min(MAX_CPUS) as usize;
    let mut builder = MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, zbase..zbase + pages)
        .nr_cpus(nr_cpus)
        .per_cpu_lists(args.mode == Mode::Policy)
        .group_by_mobility(!args.no_grouping)
        .placement(args.policy)
        .populate_descriptors(true)
        .hooks(QuietHooks);
    let move_log = (!args.no_compact && args.mode == Mode::Policy).then(|| Arc::new(engine::MoveLog::default()));
    if let Some(log) = &move_log {
        let log = log.clone();
        builder = builder.migrator(CopyMigrator::new(move |old, new, order| log.record(old, new, order)));
    }
    let mm = builder.build().map_err(|e| ReplayError::Failed(format!("building the memory map: {e}")))?;
    let mut engine = Engine::new(&mm, args.mode, zbase..zend, args.check).map_err(ReplayError::Failed)?;
    if let Some(log) = &move_log {
        engine.follow_moves(log.clone());
    }
    let mut peer = args.peer.is_some().then(|| peer::Peer::new(zbase, pages, zbase..zend));

    let every = (scan.events / u64::from(args.samples.max(1))).max(1);
    let mut pass = Pass {
        every,
        next_sample: every,
        samples: vec![metrics::sample(&mm, engine.pageblock_composition(), &engine.counts)],
        t_loop: Duration::ZERO,
        t_sample: Duration::ZERO,
        t_peer: Duration::ZERO,
        t_compact: Duration::ZERO,
        compaction: move_log.is_some() && args.proactive_marks().0 < 1000,
        marks: args.proactive_marks(),
        compact_every: args.compact_interval,
        pcp_upkeep: args.pcp_upkeep,
        next_compact: args.compact_interval,
        proactive_runs: 0,
        bar: progress_bar(progress, scan.events),
    };
    let mut t_parse = Duration::ZERO;
    let started = Instant::now();
    let mut stream = if reading_cache {
        stream::EventStream::open(&input)
    } else {
        stream::EventStream::from_file(trace_file()?, &input)
    }
    .map_err(ReplayError::Failed)?;
    // Streaming: bounded chunks. Preloading: one chunk of the whole trace.
    let chunk_len = if args.preload { scan.events as usize } else { CHUNK };
    let mut chunk: Vec<Ev> = Vec::with_capacity(chunk_len);
    let mut left = scan.events;
    while left > 0 {
        let t0 = Instant::now();
        chunk.clear();
        let want = (chunk_len as u64).min(left) as usize;
        stream.fill(&mut chunk, want).map_err(|e| ReplayError::Failed(format!("{}: {e}", input.display())))?;
        t_parse += t0.elapsed();
        if chunk.is_empty() {
            break;
        }
        left -= chunk.len() as u64;
        pass.replay_chunk(&chunk, &mm, &mut engine, peer.as_mut());
    }
    pass.bar.finish_and_clear();
    // No report of work not done: the second pass must have read what the
    // first counted, from the same file.
    trace.check_unchanged().map_err(ReplayError::Failed)?;
    if left > 0 {
        return Err(ReplayError::Failed(format!(
            "{}: the replay read {} events where the first pass counted {}; nothing is reported",
            input.display(),
            scan.events - left,
            scan.events
        )));
    }
    if pass.samples.last().is_some_and(|s| s.event != engine.counts.events) {
        pass.samples.push(metrics::sample(&mm, engine.pageblock_composition(), &engine.counts));
    }
    let wall = started.elapsed().saturating_sub(pass.t_peer);
    engine.finish();
    // The end state is taken with the per-CPU lists drained and, with
    // compaction, after one more kcompactd check (Linux's would come within
    // its 500 ms); the samples above are the running state.
    let pcp_pages = Report::new(&mm).nr_pcp_pages();
    Cpus::new(&mm).drain_all_pages();
    let end_check = pass.compact_check(&mm, &mut engine);
    pass.t_sample += end_check;
    let Pass { samples, t_loop, t_sample, t_peer, t_compact, proactive_runs, .. } = pass;
    let mut final_state = metrics::final_state(&mm, engine.pageblock_composition(), &engine.counts);
    final_state.pcp_pages_drained += pcp_pages;
    let placement = metrics::placement_stats(&mm);
    let compaction = move_log.is_some().then(|| metrics::compaction_stats(&mm, &engine.counts, proactive_runs));
    let invariants = if args.check {
        Some(mmkit::Report::new(&mm).check_invariants().map_err(|v| v.to_string()).err().unwrap_or_else(|| "ok".into()))
    } else {
        None
    };
    let events = engine.counts.events;
    let rate = |d: Duration| if d.is_zero() { 0.0 } else { events as f64 / d.as_secs_f64() };
    let timing = report::Timing {
        scan_seconds: scan.seconds,
        replay_seconds: wall.as_secs_f64(),
        parse_seconds: t_parse.as_secs_f64(),
        loop_seconds: t_loop.as_secs_f64(),
        sample_seconds: t_sample.as_secs_f64(),
        compact_seconds: t_compact.as_secs_f64(),
    };
    let peer_report = peer.as_ref().map(|p| p.report(events, t_peer.as_secs_f64(), t_loop.as_secs_f64()));
    let report = report::Report::new(report::Parts {
        args,
        replayed_from: &input,
        cache_note,
        scan: &scan,
        zone: (zbase, pages),
        nr_cpus,
        counts: engine.counts.clone(),
        double_handouts: args.check.then_some(engine.double_handouts),
        invariants,
        events_per_sec: rate(wall),
        loop_events_per_sec: rate(t_loop),
        timing,
        samples,
        final_state,
        placement,
        compaction,
        peer: peer_report,
    });
    if let Some(prefix) = &args.plot {
        plot::write_all(prefix, &report, &mm, &engine).map_err(ReplayError::Failed)?;
    }
    inspect(&engine, &mm);
    Ok(report)
}

/// The second pass's running state: samples and timers.
struct Pass {
    every: u64,
    next_sample: u64,
    samples: Vec<metrics::Sample>,
    t_loop: Duration,
    t_sample: Duration,
    t_peer: Duration,
    /// Proactive compaction rounds (timed apart from the loop and samples).
    t_compact: Duration,
    /// Whether proactive compaction runs, and its marks (thousandths).
    compaction: bool,
    marks: (u32, u32),
    /// Events between proactive checks, and the next check.
    compact_every: u64,
    next_compact: u64,
    pcp_upkeep: PcpUpkeep,
    proactive_runs: u64,
    bar: ProgressBar,
}

impl Pass {
    /// kcompactd's periodic check (with compaction): a proactive round when
    /// the score is above the start mark; returns the time it took.
    fn compact_check(&mut self, mm: &PageAllocator, engine: &mut Engine<'_>) -> Duration {
        if !self.compaction {
            return Duration::ZERO;
        }
        let tc = Instant::now();
        if matches!(Tuning::new(mm).proactive_compact_marks(0, self.marks.0, self.marks.1), Ok(Some(_))) {
            engine.apply_moves();
            self.proactive_runs += 1;
        }
        let took = tc.elapsed();
        self.t_compact += took;
        took
    }

    /// Replays parsed events into the engine (timed without the samples it
    /// takes on the way), then into the peer (timed apart).
    fn replay_chunk(
        &mut self,
        chunk: &[Ev],
        mm: &PageAllocator,
        engine: &mut Engine<'_>,
        peer: Option<&mut peer::Peer>,
    ) {
        let t1 = Instant::now();
        let mut sampling = Duration::ZERO;
        // Look ahead: the live-table entry FAR events ahead, then the block
        // it frees NEAR events ahead, so their cache misses overlap.
        const FAR: usize = 16;
        const NEAR: usize = 8;
        for (i, ev) in chunk.iter().enumerate() {
            if let Some(far) = chunk.get(i + FAR) {
                engine.prefetch_entry(far);
            }
            if let Some(near) = chunk.get(i + NEAR) {
                engine.prefetch_block(near);
            }
            engine.apply(ev);
            if engine.counts.events == self.next_compact {
                self.next_compact += self.compact_every;
                if self.pcp_upkeep != PcpUpkeep::None {
                    engine.pcp_upkeep(self.pcp_upkeep == PcpUpkeep::Drain);
                }
                sampling += self.compact_check(mm, engine);
            }
            if engine.counts.events == self.next_sample {
                let ts = Instant::now();
                let sample = metrics::sample(mm, engine.pageblock_composition(), &engine.counts);
                self.samples.push(sample);
                self.next_sample += self.every;
                sampling += ts.elapsed();
            }
        }
        self.t_loop += t1.elapsed().saturating_sub(sampling);
        self.t_sample += sampling;
        if let Some(peer) = peer {
            let t2 = Instant::now();
            for ev in chunk {
                peer.apply(ev);
                if peer.events % self.every == 0 {
                    peer.sample();
                }
            }
            self.t_peer += t2.elapsed();
        }
        self.bar.inc(chunk.len() as u64);
    }
}

/// Runs `mmkit replay` and returns what to print: the table, or one JSON
/// object with `--json`.
///
/// # Errors
/// [`ReplayError`].
pub fn run(args: &ReplayArgs) -> Result<String, ReplayError> {
    if args.compare {
        let rows = compare::compare(args)?;
        return if args.json {
            let mut text = serde_json::to_string_pretty(&rows).map_err(|e| ReplayError::Failed(e.to_string()))?;
            text.push('\n');
            Ok(text)
        } else {
            Ok(compare::table(args, &rows))
        };
    }
    let report = replay(args, want_progress(args.json), |_, _| {})?;
    if args.check {
        check_passed(&report)?;
    }
    Ok(if args.json {
        let mut text = serde_json::to_string_pretty(&report).map_err(|e| ReplayError::Failed(e.to_string()))?;
        text.push('\n');
        text
    } else {
        report.to_table()
    })
}

/// The trace of `args`, opened once for every replay of the run: a file
/// where it is, a pipe or FIFO copied first (it is read twice).
///
/// # Errors
/// [`ReplayError::Usage`]: a directory, a device, a socket, a missing file.
pub fn open_trace(args: &ReplayArgs) -> Result<Input, ReplayError> {
    Input::open(&args.trace, Passes::Many).map_err(ReplayError::Usage)
}

/// `--check`'s verdict on a report.
///
/// # Errors
/// [`ReplayError::Failed`] naming the double hand-outs or the violation.
pub fn check_passed(report: &report::Report) -> Result<(), ReplayError> {
    let doubles = report.double_handouts.unwrap_or(0);
    let invariants = report.invariants.as_deref().unwrap_or("ok");
    if doubles > 0 || invariants != "ok" {
        return Err(ReplayError::Failed(format!(
            "check failed ({} policy): {doubles} blocks handed out twice; invariants: {invariants}",
            report.policy
        )));
    }
    Ok(())
}

/// Whether `mmkit replay` should draw a progress bar: stdout is a terminal
/// and the output is not JSON.
pub fn want_progress(json: bool) -> bool {
    !json && std::io::stdout().is_terminal()
}

fn progress_bar(show: bool, events: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(events), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} replay [{bar:40}] {pos}/{len} events ({per_sec}, eta {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

#[cfg(test)]
mod tests;
