//! `perf script` lines of the `kmem` page tracepoints.
//!
//! Owns the layout `perf script` prints by default,
//! `<comm> <pid> [<cpu>] <secs>.<frac>: kmem:<event>: key=value ...`, where
//! the command name may itself contain blanks: the line is anchored on the
//! first `[digits]` token, not on a column number. Must not touch anything
//! beyond the one line it is given.

use crate::{
    check_block, parse_cpu, parse_dec, parse_gfp_lenient, parse_hex, parse_migratetype, parse_order, EventKind,
    TraceEvent, TraceLine, TraceParseError,
};
use mmkit::gfp::Gfp;

/// Reads one `perf script` line. Lines of other tracepoints come back as
/// [`TraceLine::OtherEvent`]; `seq` of an event is 0 (the caller numbers
/// events).
///
/// Accepted: any blanks between fields; the `kmem:` prefix or none; the
/// `page=` field anywhere (a `(nil)` or zero page marks a failed
/// allocation, as the kernel prints it); unknown `key=value` fields
/// (ignored); timestamps with 1 to 9 fractional digits.
///
/// # Errors
/// [`TraceParseError`] with `line_no` for a missing `[cpu]`, timestamp,
/// `pfn=`/`page=`, `order=` or (allocations) `gfp_flags=`, or a malformed
/// value. Never panics.
pub fn parse_perf_line(text: &str, line_no: u64) -> Result<TraceLine<'_>, TraceParseError> {
    let err = |reason| TraceParseError { line: line_no, reason };
    let mut tokens = text.split_ascii_whitespace();
    // The CPU column anchors the line: everything before it is the command
    // name and pid.
    let cpu = loop {
        let Some(tok) = tokens.next() else {
            return Err(err("no [cpu] column"));
        };
        if let Some(inner) = tok.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            if parse_dec(inner).is_some() {
                break parse_cpu(inner).map_err(err)?;
            }
        }
    };
    let time = tokens.next().ok_or_else(|| err("truncated line: no timestamp"))?;
    let time_ns = parse_time(time).ok_or_else(|| err("timestamp is not `seconds.fraction:`"))?;
    let event = tokens.next().ok_or_else(|| err("truncated line: no event name"))?;
    let name = event.strip_suffix(':').ok_or_else(|| err("event name does not end with `:`"))?;
    let short = name.strip_prefix("kmem:").unwrap_or(name);
    let kind = match short {
        "mm_page_alloc" => EventKind::Alloc,
        "mm_page_free" => EventKind::Free,
        "mm_page_free_batched" => EventKind::FreeBatched,
        _ => return Ok(TraceLine::OtherEvent(name)),
    };

    let (mut page, mut pfn, mut order, mut mt, mut gfp) = (None, None, None, None, None);
    for field in tokens {
        let (key, value) = field.split_once('=').ok_or_else(|| err("field is not `key=value`"))?;
        match key {
            "page" => page = Some(value),
            "pfn" => pfn = Some(value),
            "order" => order = Some(value),
            "migratetype" => mt = Some(value),
            "gfp_flags" => gfp = Some(value),
            _ => {}
        }
    }
    let failed = kind == EventKind::Alloc && page.is_some_and(is_null_page);
    let pfn = match (pfn, failed) {
        (_, true) => None,
        (Some(v), false) => Some(parse_prefixed_hex(v).ok_or_else(|| err("pfn is not a hex number"))?),
        // Kernels before 4.x printed only `page=`; its value is not a PFN.
        (None, false) => return Err(err("truncated line: no pfn=")),
    };
    let order = parse_order(order.ok_or_else(|| err("truncated line: no order="))?).map_err(err)?;
    check_block(pfn, order).map_err(err)?;
    let (migratetype, gfp, unknown_gfp) = if kind == EventKind::Alloc {
        let mt = match mt {
            None => None,
            Some(v) => Some(parse_migratetype(v).map_err(err)?),
        };
        let (gfp, unknown) =
            parse_gfp_lenient(gfp.ok_or_else(|| err("truncated line: no gfp_flags="))?).map_err(err)?;
        (mt, gfp, unknown)
    } else {
        (None, Gfp::EMPTY, false)
    };
    let event = TraceEvent { seq: 0, time_ns, cpu, kind, pfn, order, migratetype, gfp, unknown_gfp };
    Ok(TraceLine::Event { event, numbered: false })
}

/// `154.747343:` → nanoseconds.
fn parse_time(tok: &str) -> Option<u64> {
    let tok = tok.strip_suffix(':')?;
    let (secs, frac) = tok.split_once('.')?;
    if frac.is_empty() || frac.len() > 9 {
        return None;
    }
    let scale = 10u64.pow(9 - frac.len() as u32);
    parse_dec(secs)?.checked_mul(1_000_000_000)?.checked_add(parse_dec(frac)? * scale)
}

/// `0x1f` (or bare `1f`) → 31.
fn parse_prefixed_hex(v: &str) -> Option<u64> {
    parse_hex(v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")).unwrap_or(v))
}

/// The kernel prints a NULL page as `(nil)` or as zeroes.
fn is_null_page(v: &str) -> bool {
    v == "(nil)" || parse_prefixed_hex(v) == Some(0)
}
