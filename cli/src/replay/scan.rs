//! The first, quick pass over a trace: how many events, which PFNs and
//! CPUs, the peak of live pages, the header, the parser's skip counts.
//!
//! Owns the summary the replay sizes its memory from, and its round trip
//! through a binary file's metadata: a binary trace written by this pass
//! (`cache`) carries the summary, so replaying it needs no first pass.
//! Streams the file once in constant memory apart from the set of live
//! blocks; must not touch an allocator.

use super::engine::{Ev, Op};
use super::source::Compression;
use super::stream::EventStream;
use super::writer::CacheWriter;
use mmkit_trace::binary::BinaryMeta;
use serde::Serialize;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::time::Instant;

/// Events read per step of the pass.
const STEP: usize = 1 << 16;

/// What the text of a trace held besides events (the parser's counts), as
/// read or as a binary file's metadata kept them; part of the report's
/// `trace` object.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SourceCounts {
    /// Lines read, including headers, blanks and skipped ones.
    pub lines: u64,
    /// Malformed lines skipped.
    #[serde(rename = "skipped_lines")]
    pub skipped: u64,
    /// The first skipped lines: `line N: reason`.
    pub first_errors: Vec<String>,
    /// `perf script` lines of other tracepoints.
    pub other_events: u64,
    /// Events naming unknown GFP flags.
    pub unknown_gfp: u64,
    /// Allocation events (failed ones included).
    pub allocs: u64,
    /// Free events, batched ones included.
    pub frees: u64,
    /// Of those, `mm_page_free_batched`.
    pub batched_frees: u64,
}

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
    pub stats: SourceCounts,
    /// `#` header lines (without `#`).
    #[serde(skip)]
    pub header: Vec<String>,
    /// Wall time of this pass.
    pub seconds: f64,
    /// Why the binary copy this pass was asked to write could not be
    /// completed (the events were read all the same).
    #[serde(skip)]
    pub cache_error: Option<String>,
}

/// The live-block bookkeeping of the pass.
#[derive(Default)]
struct Live {
    blocks: HashMap<u64, u8>,
    pages: u64,
}

impl Scan {
    /// Books one event (the `events`-th, 0-based).
    #[inline]
    fn note(&mut self, e: &Ev, live: &mut Live) {
        self.events += 1;
        if e.op == Op::FailedAlloc {
            return;
        }
        self.max_cpu = self.max_cpu.max(u32::from(e.cpu));
        self.min_pfn = self.min_pfn.min(e.pfn);
        self.end_pfn = self.end_pfn.max(e.pfn.saturating_add(1 << e.order));
        if e.op == Op::Alloc {
            if let Some(old) = live.blocks.insert(e.pfn, e.order) {
                live.pages -= 1 << old;
            }
            live.pages += 1 << e.order;
            if live.pages > self.peak_live_pages {
                self.peak_live_pages = live.pages;
                self.peak_live_at_event = self.events - 1;
            }
        } else if let Some(old) = live.blocks.remove(&e.pfn) {
            live.pages -= 1 << old;
        }
    }

    /// The summary as binary metadata (the keys [`from_meta`](Self::from_meta) reads).
    pub fn to_meta(&self) -> BinaryMeta {
        let mut m = BinaryMeta { events: self.events, ..BinaryMeta::default() };
        let st = &self.stats;
        for (k, v) in [
            ("unsupported_order", self.unsupported_order),
            ("migratetype_mismatches", self.migratetype_mismatches),
            ("min_pfn", self.min_pfn),
            ("end_pfn", self.end_pfn),
            ("max_cpu", u64::from(self.max_cpu)),
            ("peak_live_pages", self.peak_live_pages),
            ("peak_live_at_event", self.peak_live_at_event),
            ("live_pages_at_end", self.live_pages_at_end),
            ("live_blocks_at_end", self.live_blocks_at_end),
            ("lines", st.lines),
            ("skipped", st.skipped),
            ("other_events", st.other_events),
            ("unknown_gfp", st.unknown_gfp),
            ("allocs", st.allocs),
            ("frees", st.frees),
            ("batched_frees", st.batched_frees),
        ] {
            m.push(k, v);
        }
        m.push("source_compression", self.compression.map_or("none", |c| c.name()));
        for e in &st.first_errors {
            m.push("error", e);
        }
        for h in &self.header {
            m.push("header", h);
        }
        m
    }

    /// The summary a binary file's metadata holds; `None` when a key is
    /// missing (a binary file not written by a first pass).
    pub fn from_meta(m: &BinaryMeta) -> Option<Scan> {
        let get = |k| m.get_u64(k);
        Some(Scan {
            compression: Some(Compression::Binary),
            events: m.events,
            unsupported_order: get("unsupported_order")?,
            migratetype_mismatches: get("migratetype_mismatches")?,
            min_pfn: get("min_pfn")?,
            end_pfn: get("end_pfn")?,
            max_cpu: u32::try_from(get("max_cpu")?).ok()?,
            peak_live_pages: get("peak_live_pages")?,
            peak_live_at_event: get("peak_live_at_event")?,
            live_pages_at_end: get("live_pages_at_end")?,
            live_blocks_at_end: get("live_blocks_at_end")?,
            stats: SourceCounts {
                lines: get("lines")?,
                skipped: get("skipped")?,
                first_errors: m.all("error").map(String::from).collect(),
                other_events: get("other_events")?,
                unknown_gfp: get("unknown_gfp")?,
                allocs: get("allocs")?,
                frees: get("frees")?,
                batched_frees: get("batched_frees")?,
            },
            header: m.all("header").map(String::from).collect(),
            seconds: 0.0,
            cache_error: None,
        })
    }
}

/// Reads the whole trace once from `file` (named `path` in messages; at
/// most `limit` events); with `cache`, writes every event to it as it goes
/// (only for a whole trace; when that fails, `cache_error` says why and
/// the pass goes on) and hands it back to be finished with the summary. A
/// binary file that carries the summary is not read at all unless `limit`
/// or `cache` is set.
///
/// # Errors
/// The file cannot be read (the message says which); with `strict`, a
/// malformed line (its number and why).
pub fn scan(
    file: File,
    path: &Path,
    limit: Option<u64>,
    mut cache: Option<CacheWriter>,
    strict: bool,
) -> Result<(Scan, Option<CacheWriter>), String> {
    let started = Instant::now();
    let mut stream = EventStream::from_file(file, path)?;
    if limit.is_none() && cache.is_none() {
        if let Some(s) = stream.binary_meta().and_then(Scan::from_meta) {
            return Ok((Scan { seconds: started.elapsed().as_secs_f64(), ..s }, None));
        }
    }
    let mut s = Scan { compression: Some(stream.compression), min_pfn: u64::MAX, ..Scan::default() };
    let mut live = Live::default();
    let limit = limit.unwrap_or(u64::MAX);
    let mut chunk: Vec<Ev> = Vec::with_capacity(STEP);
    while s.events < limit {
        chunk.clear();
        let want = (limit - s.events).min(STEP as u64) as usize;
        let n = stream.fill(&mut chunk, want).map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        if strict {
            stream.check_strict().map_err(|e| format!("{}: {e}", path.display()))?;
        }
        for e in &chunk {
            s.note(e, &mut live);
        }
        if let Some(w) = &mut cache {
            if let Err(e) = w.push_all(&chunk) {
                s.cache_error = Some(format!("cannot write {}: {e}", w.path().display()));
                cache = None;
            }
        }
    }
    if s.min_pfn == u64::MAX {
        s.min_pfn = 0;
    }
    s.unsupported_order = stream.unsupported_order;
    s.migratetype_mismatches = stream.migratetype_mismatches;
    s.live_pages_at_end = live.pages;
    s.live_blocks_at_end = live.blocks.len() as u64;
    if let Some((st, header)) = stream.text_stats() {
        s.stats = SourceCounts {
            lines: st.lines,
            skipped: st.skipped,
            first_errors: st.first_errors.iter().map(ToString::to_string).collect(),
            other_events: st.other_events,
            unknown_gfp: st.unknown_gfp,
            allocs: st.allocs,
            frees: st.frees + st.batched_frees,
            batched_frees: st.batched_frees,
        };
        s.header = header.to_vec();
    } else if let Some(prev) = stream.binary_meta().and_then(Scan::from_meta) {
        // A binary file read with a limit: its text's counts still hold.
        s.stats = prev.stats;
        s.header = prev.header;
    }
    if strict {
        stream.check_strict().map_err(|e| format!("{}: {e}", path.display()))?;
    }
    s.seconds = started.elapsed().as_secs_f64();
    Ok((s, cache))
}
