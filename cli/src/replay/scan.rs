//! The first, quick pass over a trace: how many events, which PFNs and
//! CPUs, the peak of live pages, the header, the parser's skip counts.
//!
//! Owns the conversion of parsed events into the engine's compact [`Ev`]
//! (shared by both passes) and the summary the replay sizes its memory
//! from. Streams the file once in constant memory apart from the set of
//! live blocks; must not touch an allocator.

use super::engine::{Ev, Op, MAX_ORDER};
use super::source::{self, Compression};
use mmkit::gfp::gfp_migratetype;
use mmkit_trace::{EventKind, ReadStats, TraceEvent, TraceReader};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

/// What the first pass learned.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Scan {
    /// How the file was stored.
    #[serde(skip)]
    pub compression: Option<Compression>,
    /// Events the replay will apply (after `--limit` and unsupported orders).
    pub events: u64,
    /// Events with an order above 10, skipped.
    pub unsupported_order: u64,
    /// Allocations whose migratetype column disagrees with their GFP bits.
    pub migratetype_mismatches: u64,
    /// Lowest PFN an event touches.
    pub min_pfn: u64,
    /// One past the highest PFN an event touches.
    pub end_pfn: u64,
    /// Highest CPU number.
    pub max_cpu: u32,
    /// Most pages held at once by blocks allocated inside the trace.
    pub peak_live_pages: u64,
    /// Event index at which the peak was reached.
    pub peak_live_at_event: u64,
    /// Pages still held by traced blocks at the end.
    pub live_pages_at_end: u64,
    /// Blocks still held at the end.
    pub live_blocks_at_end: u64,
    /// Parser counts (lines, skips and the first few reasons).
    #[serde(skip)]
    pub stats: ReadStats,
    /// `#` header lines (without `#`).
    #[serde(skip)]
    pub header: Vec<String>,
    /// Wall time of this pass.
    pub seconds: f64,
}

/// The engine's form of a parsed event; `None` for orders above 10.
#[inline]
pub fn convert(ev: &TraceEvent) -> Option<Ev> {
    if ev.order > MAX_ORDER {
        return None;
    }
    let (op, pfn) = match (ev.kind, ev.pfn) {
        (EventKind::Alloc, Some(pfn)) => (Op::Alloc, pfn),
        (EventKind::Alloc, None) => (Op::FailedAlloc, 0),
        (_, pfn) => (Op::Free, pfn.unwrap_or(0)),
    };
    Some(Ev { pfn, gfp: ev.gfp.bits(), cpu: ev.cpu.min(u32::from(u16::MAX)) as u16, order: ev.order as u8, op })
}

/// Reads the whole trace once.
///
/// # Errors
/// The file cannot be opened or read (the message says which).
pub fn scan(path: &Path, limit: Option<u64>) -> Result<Scan, String> {
    let started = Instant::now();
    let (input, compression) = source::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = TraceReader::new(input);
    let mut s = Scan { compression: Some(compression), min_pfn: u64::MAX, ..Scan::default() };
    let mut live: HashMap<u64, u8> = HashMap::new();
    let mut live_pages = 0u64;
    let limit = limit.unwrap_or(u64::MAX);
    while s.events < limit {
        let Some(ev) = reader.next() else {
            break;
        };
        let Some(e) = convert(&ev) else {
            s.unsupported_order += 1;
            continue;
        };
        s.events += 1;
        if let (EventKind::Alloc, Some(mt)) = (ev.kind, ev.migratetype) {
            s.migratetype_mismatches += u64::from(mt != gfp_migratetype(ev.gfp) as u8);
        }
        if e.op == Op::FailedAlloc {
            continue;
        }
        s.max_cpu = s.max_cpu.max(u32::from(e.cpu));
        s.min_pfn = s.min_pfn.min(e.pfn);
        s.end_pfn = s.end_pfn.max(e.pfn.saturating_add(1 << e.order));
        if e.op == Op::Alloc {
            if let Some(old) = live.insert(e.pfn, e.order) {
                live_pages -= 1 << old;
            }
            live_pages += 1 << e.order;
            if live_pages > s.peak_live_pages {
                s.peak_live_pages = live_pages;
                s.peak_live_at_event = s.events - 1;
            }
        } else if let Some(old) = live.remove(&e.pfn) {
            live_pages -= 1 << old;
        }
    }
    if let Some(e) = reader.io_error() {
        return Err(format!("{}: reading line {}: {e}", path.display(), reader.stats().lines + 1));
    }
    if s.min_pfn == u64::MAX {
        s.min_pfn = 0;
    }
    s.live_pages_at_end = live_pages;
    s.live_blocks_at_end = live.len() as u64;
    s.stats = reader.stats().clone();
    s.header = reader.header().to_vec();
    s.seconds = started.elapsed().as_secs_f64();
    Ok(s)
}
