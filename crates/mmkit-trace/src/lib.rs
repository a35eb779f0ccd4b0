//! # mmkit-trace — Linux page-allocator traces, line by line
//!
//! The event type, the compact text format of `shared/traces` (parse and
//! print), and the `perf script` text of the `kmem:mm_page_alloc`,
//! `kmem:mm_page_free` and `kmem:mm_page_free_batched` tracepoints
//! (`include/trace/events/kmem.h` in Linux). The line parser is `no_std` +
//! `alloc`; the default `std` feature adds [`TraceReader`].
//!
//! # What this crate owns
//!
//! Turning one line of text into a [`TraceEvent`] (or a typed
//! [`TraceParseError`] carrying the line number), and an event back into a
//! compact line. GFP names as the kernel prints them (`show_gfp_flags()`,
//! `include/trace/events/mmflags.h`) map onto [`Gfp`] through
//! [`Gfp::parse`]'s table, one `|` term at a time, so that a name this
//! kernel does not know costs only that bit (the event is marked
//! [`TraceEvent::unknown_gfp`]) instead of the whole line. With `std`,
//! [`TraceReader`] streams events from any `BufRead` in constant memory and
//! counts (and remembers the first few of) the lines it had to skip.
//!
//! # What it must not touch
//!
//! The allocator. It uses mmkit's public GFP types (`mmkit::gfp`) and
//! nothing else of mmkit; nothing here allocates pages or knows what a
//! replay does with an event; decompression and file handling belong to the
//! caller. Line parsing never panics, whatever the bytes.
//!
//! # The compact format (v1)
//!
//! One event per line, eight columns separated by blanks:
//! `<seq> <t_ns> <cpu> <a|f> <pfn_hex> <order> <migratetype> <gfp_hex>`,
//! e.g. `0 0 1 a 199258 0 0 0x500cc2` and `1 81562 1 f 199271 0 - -`. A
//! failed allocation has pfn `-`; frees have `-` for migratetype and GFP.
//! Lines starting with `#` are header lines.
//!
//! # The binary format
//!
//! [`binary`] keeps a trace as 8-byte words (one per event in the common
//! case) with its summary in a trailer, so a replay reads it without
//! parsing text: the codec, framing and metadata, `no_std` like the rest.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

use core::fmt;
use mmkit::gfp::{Gfp, GfpParseErrorKind};

pub mod binary;
mod perf;
#[cfg(feature = "std")]
mod reader;
#[cfg(test)]
mod tests;

pub use perf::parse_perf_line;
#[cfg(feature = "std")]
pub use reader::{ReadStats, TraceReader, MAX_LINE_BYTES, MAX_REMEMBERED_ERRORS};

/// Largest order a trace line may carry. Orders above the allocator's own
/// maximum are valid lines; the replayer decides what to do with them.
pub const MAX_TRACE_ORDER: u32 = 30;

/// CPUs a trace line may name: Linux's largest `NR_CPUS` (`CONFIG_NR_CPUS`
/// with `MAXSMP` on x86-64 is 8192). A line naming CPU 8192 or above is
/// malformed.
pub const MAX_TRACE_CPUS: u32 = 8192;

/// One past the last PFN a block may reach: 2^52 pages of 4 KiB is the
/// whole of a 64-bit address space. A line whose block ends past it is
/// malformed.
pub const MAX_TRACE_PFN_END: u64 = 1 << 52;

/// Migratetypes a trace line may carry: Linux's `MIGRATE_TYPES` is at most
/// 7 in every configuration (unmovable, movable, reclaimable, high-atomic,
/// CMA, isolate).
pub const MAX_TRACE_MIGRATETYPES: u64 = 8;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `mm_page_alloc`: a block was handed out (or, with no PFN, the
    /// allocation failed).
    Alloc,
    /// `mm_page_free`: a block went back.
    Free,
    /// `mm_page_free_batched`: an order-0 page went back through a batched
    /// free. The compact format writes it as an ordinary free.
    FreeBatched,
}

impl EventKind {
    /// Whether this is one of the two free kinds.
    #[must_use]
    pub const fn is_free(self) -> bool {
        matches!(self, EventKind::Free | EventKind::FreeBatched)
    }
}

/// One allocator event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceEvent {
    /// Position in the trace (the compact format's first column; events of a
    /// `perf script` text are numbered by [`TraceReader`] as they come).
    pub seq: u64,
    /// Nanoseconds: since the first event (compact) or perf's clock (perf).
    pub time_ns: u64,
    /// CPU the event fired on.
    pub cpu: u32,
    /// Allocation or free.
    pub kind: EventKind,
    /// First PFN of the block; `None` for a failed allocation.
    pub pfn: Option<u64>,
    /// The block is 2^order pages.
    pub order: u32,
    /// The migratetype the kernel reported for an allocation (Linux's
    /// numbering: 0 unmovable, 1 movable, 2 reclaimable, …); `None` for
    /// frees and when the line did not say.
    pub migratetype: Option<u8>,
    /// Request flags of an allocation; empty for frees.
    pub gfp: Gfp,
    /// The GFP text named a flag this kernel does not know; its bit is lost.
    pub unknown_gfp: bool,
}

impl TraceEvent {
    /// Writes the event as one compact-format line, without a newline.
    /// [`parse_compact_line`] reads it back to the same event (a batched
    /// free comes back as [`EventKind::Free`]; unknown GFP names are gone).
    ///
    /// # Errors
    /// Only those of the writer.
    pub fn write_compact<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        write!(out, "{} {} {} ", self.seq, self.time_ns, self.cpu)?;
        out.write_str(if self.kind == EventKind::Alloc { "a " } else { "f " })?;
        match self.pfn {
            Some(pfn) => write!(out, "{pfn:x} ")?,
            None => out.write_str("- ")?,
        }
        write!(out, "{} ", self.order)?;
        match (self.kind, self.migratetype) {
            (EventKind::Alloc, Some(mt)) => write!(out, "{mt} ")?,
            _ => out.write_str("- ")?,
        }
        if self.kind == EventKind::Alloc {
            write!(out, "{:#x}", self.gfp.bits())
        } else {
            out.write_str("-")
        }
    }
}

/// Why a line could not be read as an event, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParseError {
    /// 1-based line number.
    pub line: u64,
    /// What was wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for TraceParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TraceParseError {}

/// What one line of a trace holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceLine<'a> {
    /// Nothing but blanks.
    Blank,
    /// A `#` header or comment line, without the `#`.
    Header(&'a str),
    /// An event. `numbered` is false for `perf script` lines, which carry
    /// no sequence number (`seq` is then 0).
    Event {
        /// The event.
        event: TraceEvent,
        /// Whether `seq` came from the line.
        numbered: bool,
    },
    /// A `perf script` line of another tracepoint (named here), ignored.
    OtherEvent(&'a str),
}

/// Reads one line of either format: blank, `#` header, compact event, or
/// `perf script` line (recognised by its `:`; compact lines have none).
///
/// # Errors
/// [`TraceParseError`] with `line_no` and the reason; never panics.
pub fn parse_line(text: &str, line_no: u64) -> Result<TraceLine<'_>, TraceParseError> {
    let trimmed = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if trimmed.is_empty() {
        return Ok(TraceLine::Blank);
    }
    if let Some(rest) = trimmed.strip_prefix('#') {
        return Ok(TraceLine::Header(rest));
    }
    if trimmed.contains(':') {
        return parse_perf_line(trimmed, line_no);
    }
    parse_compact_line(trimmed, line_no).map(|event| TraceLine::Event { event, numbered: true })
}

/// Reads one compact-format event line (see the module doc).
///
/// # Errors
/// [`TraceParseError`] for a wrong column count, a malformed number, an
/// unknown event letter, a free without PFN, an order above
/// [`MAX_TRACE_ORDER`]; never panics.
pub fn parse_compact_line(text: &str, line_no: u64) -> Result<TraceEvent, TraceParseError> {
    let err = |reason| TraceParseError { line: line_no, reason };
    let mut cols = text.split_ascii_whitespace();
    let mut next = |missing: &'static str| cols.next().ok_or_else(|| err(missing));
    let seq = next("truncated line: no sequence number")?;
    let time = next("truncated line: no timestamp")?;
    let cpu = next("truncated line: no cpu column")?;
    let kind = next("truncated line: no event letter")?;
    let pfn = next("truncated line: no pfn column")?;
    let order = next("truncated line: no order column")?;
    let mt = next("truncated line: no migratetype column")?;
    let gfp = next("truncated line: no gfp column")?;
    if cols.next().is_some() {
        return Err(err("more than 8 columns"));
    }
    let seq = parse_dec(seq).ok_or_else(|| err("sequence number is not a decimal number"))?;
    let time_ns = parse_dec(time).ok_or_else(|| err("timestamp is not a decimal number"))?;
    let cpu = parse_cpu(cpu).map_err(err)?;
    let kind = match kind {
        "a" => EventKind::Alloc,
        "f" => EventKind::Free,
        _ => return Err(err("event letter is neither `a` nor `f`")),
    };
    let pfn = match pfn {
        "-" if kind == EventKind::Alloc => None,
        "-" => return Err(err("a free needs a pfn")),
        hex => Some(parse_hex(hex).ok_or_else(|| err("pfn is not a hex number"))?),
    };
    let order = parse_order(order).map_err(err)?;
    check_block(pfn, order).map_err(err)?;
    let (migratetype, gfp) = if kind == EventKind::Alloc {
        let mt = match mt {
            "-" => None,
            dec => Some(parse_migratetype(dec).map_err(err)?),
        };
        let bits =
            gfp.strip_prefix("0x").and_then(parse_hex).ok_or_else(|| err("gfp is not a 0x-prefixed hex number"))?;
        let bits = u32::try_from(bits).map_err(|_| err("gfp does not fit in 32 bits"))?;
        (mt, Gfp::from_bits(bits))
    } else {
        if mt != "-" || gfp != "-" {
            return Err(err("a free has `-` for migratetype and gfp"));
        }
        (None, Gfp::EMPTY)
    };
    Ok(TraceEvent { seq, time_ns, cpu, kind, pfn, order, migratetype, gfp, unknown_gfp: false })
}

/// A decimal `u64` of bare digits.
pub(crate) fn parse_dec(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// A hex `u64` of bare digits (no prefix, no sign).
pub(crate) fn parse_hex(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, b| {
        let digit = (b as char).to_digit(16)?;
        Some((acc << 4) | u64::from(digit))
    })
}

/// An order column: decimal, at most [`MAX_TRACE_ORDER`].
pub(crate) fn parse_order(s: &str) -> Result<u32, &'static str> {
    match parse_dec(s) {
        None => Err("order is not a decimal number"),
        Some(o) if o > u64::from(MAX_TRACE_ORDER) => Err("order too large"),
        Some(o) => Ok(o as u32),
    }
}

/// A CPU column: decimal, below [`MAX_TRACE_CPUS`].
pub(crate) fn parse_cpu(s: &str) -> Result<u32, &'static str> {
    match parse_dec(s) {
        None => Err("bad cpu number"),
        Some(c) if c >= u64::from(MAX_TRACE_CPUS) => Err("cpu number out of range (Linux has at most 8192 CPUs)"),
        Some(c) => Ok(c as u32),
    }
}

/// A migratetype column: decimal, below [`MAX_TRACE_MIGRATETYPES`].
pub(crate) fn parse_migratetype(s: &str) -> Result<u8, &'static str> {
    match parse_dec(s) {
        None => Err("bad migratetype"),
        Some(m) if m >= MAX_TRACE_MIGRATETYPES => Err("migratetype out of range (Linux has at most 7)"),
        Some(m) => Ok(m as u8),
    }
}

/// A block that ends past [`MAX_TRACE_PFN_END`] is out of range.
pub(crate) fn check_block(pfn: Option<u64>, order: u32) -> Result<(), &'static str> {
    match pfn {
        Some(pfn) if pfn.checked_add(1 << order).is_none_or(|end| end > MAX_TRACE_PFN_END) => {
            Err("pfn out of range (the block ends past 2^52 pages, the whole 64-bit address space)")
        }
        _ => Ok(()),
    }
}

/// GFP text as the kernel prints it (`GFP_KERNEL|__GFP_ZERO|0x4000000`),
/// one term at a time: known names and hex terms are combined; unknown
/// names are dropped and reported in the second value.
///
/// # Errors
/// An empty string or term, or a malformed hex term.
pub fn parse_gfp_lenient(text: &str) -> Result<(Gfp, bool), &'static str> {
    if text.is_empty() {
        return Err("empty gfp_flags");
    }
    let mut gfp = Gfp::EMPTY;
    let mut unknown = false;
    for term in text.split('|') {
        match Gfp::parse(term) {
            Ok(bits) => gfp |= bits,
            Err(e) if e.kind() == GfpParseErrorKind::UnknownName => unknown = true,
            Err(e) => {
                return Err(match e.kind() {
                    GfpParseErrorKind::Empty | GfpParseErrorKind::EmptyTerm => "empty term in gfp_flags",
                    _ => "malformed number in gfp_flags",
                })
            }
        }
    }
    Ok((gfp, unknown))
}
