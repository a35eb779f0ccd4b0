//! Text renderers for the allocator's statistics, byte for byte in the layouts
//! of Linux's `/proc/buddyinfo`, `/proc/pagetypeinfo` and `/proc/vmstat`, plus
//! the debugfs files `extfrag/unusable_index` and `extfrag/extfrag_index`.
//!
//! # What this module owns
//!
//! The text formats: field widths, alignment, trailing spaces, header lines and
//! the arithmetic of the two fragmentation indices (unusable free space index
//! and fragmentation index, both in thousandths). It also owns the reverse
//! direction for buddyinfo ([`parse_buddyinfo`]), used by tests and by
//! `mmkit replay` to read trace headers.
//!
//! # What it must not touch
//!
//! Allocator state. Nothing here reads, locks or changes a zone: callers take a
//! snapshot of plain numbers (under the zone lock where consistency matters)
//! into [`ZoneFreeInfo`] values and every function here is a pure function of
//! its arguments. Zones are printed in the order given, so callers pass only
//! populated zones, sorted by node then zone index, as Linux walks them.
//!
//! All renderers are infallible and never panic, whatever the numbers; writing
//! into a `String` cannot fail.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

/// Writes formatted text into a `String`; formatting into a `String` cannot fail.
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// One zone's free-memory picture, taken under the zone lock by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneFreeInfo {
    /// NUMA node id the zone belongs to.
    pub node: usize,
    /// Zone name as Linux prints it: "DMA", "DMA32", "Normal", "Movable", ...
    pub zone_name: &'static str,
    /// Free block counts per order, one entry per order (`MAX_PAGE_ORDER + 1` entries).
    pub free_blocks_per_order: Vec<u64>,
    /// Free block counts per migratetype then order: `free_blocks_per_type[mt][order]`,
    /// migratetypes in Linux order (the order of the names given to [`pagetypeinfo`]).
    pub free_blocks_per_type: Vec<Vec<u64>>,
    /// Pageblock counts per migratetype, in the same order.
    pub pageblocks_per_type: Vec<u64>,
}

/// Context needed by pagetypeinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageblockGeometry {
    /// log2 of the number of pages in one pageblock (Linux's `pageblock_order`).
    pub pageblock_order: u32,
}

/// Why a buddyinfo text could not be parsed, and on which line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcParseError {
    /// 1-based line number of the offending line.
    pub line: usize,
    /// What was wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for ProcParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Linux stops walking a pagetypeinfo free list after this many entries and
/// prints the count as `>100000`.
const PAGETYPEINFO_COUNT_CAP: u64 = 100_000;

/// Writes the `"Node %d, zone %8s "` prefix shared by buddyinfo, the pagetypeinfo
/// block-count rows and both extfrag files.
fn zone_prefix(out: &mut String, zone: &ZoneFreeInfo) {
    put!(out, "Node {}, zone {:>8} ", zone.node, zone.zone_name);
}

/// Renders `/proc/buddyinfo`: one line per zone,
/// `"Node %d, zone %8s "` followed by `"%6lu "` per order and a newline.
pub fn buddyinfo(zones: &[ZoneFreeInfo]) -> String {
    let mut out = String::new();
    for zone in zones {
        zone_prefix(&mut out, zone);
        for count in &zone.free_blocks_per_order {
            put!(out, "{count:6} ");
        }
        out.push('\n');
    }
    out
}

/// Number of orders shown for one node: the longest per-order row of its zones.
fn node_order_count(zones: &[ZoneFreeInfo]) -> usize {
    zones
        .iter()
        .flat_map(|z| {
            core::iter::once(z.free_blocks_per_order.len()).chain(z.free_blocks_per_type.iter().map(Vec::len))
        })
        .max()
        .unwrap_or(0)
}

/// Renders `/proc/pagetypeinfo` (the free-count and block-count sections; the
/// page_owner-only "Number of mixed blocks" section is not produced).
///
/// Zones are grouped into runs of equal `node`; like Linux, each node prints the
/// whole report: `"Page block order: %d"`, `"Pages per block:  %lu"`, a blank
/// line, the header `"%-43s "` of "Free pages count per migrate type at order"
/// followed by `"%6d "` per order, then per zone and migratetype
/// `"Node %4d, zone %8s, type %12s "` with `"%6lu "` per order; then
/// `"\n%-23s"` of "Number of blocks type " with `"%12s "` per migratetype name,
/// and per zone `"Node %d, zone %8s "` with `"%12lu "` per migratetype.
///
/// Columns follow `migratetype_names`; a count missing from a zone's vectors is
/// shown as 0 and extra entries are ignored. A node shows as many orders as its
/// longest row. Free counts of 100000 or more print as `>100000`, as Linux caps
/// its list walk there (the exact totals are in [`buddyinfo`]).
pub fn pagetypeinfo(geometry: &PageblockGeometry, migratetype_names: &[&str], zones: &[ZoneFreeInfo]) -> String {
    let mut out = String::new();
    for node_zones in zones.chunk_by(|a, b| a.node == b.node) {
        let nr_orders = node_order_count(node_zones);
        put!(out, "Page block order: {}\n", geometry.pageblock_order);
        // Pageblock orders are small in practice; saturate rather than overflow.
        let per_block = 1u128.checked_shl(geometry.pageblock_order).unwrap_or(u128::MAX);
        put!(out, "Pages per block:  {per_block}\n\n");

        put!(out, "{:<43} ", "Free pages count per migrate type at order");
        for order in 0..nr_orders {
            put!(out, "{order:6} ");
        }
        out.push('\n');
        for zone in node_zones {
            for (mt, name) in migratetype_names.iter().enumerate() {
                put!(out, "Node {:4}, zone {:>8}, type {:>12} ", zone.node, zone.zone_name, name);
                let row = zone.free_blocks_per_type.get(mt).map_or(&[][..], Vec::as_slice);
                for order in 0..nr_orders {
                    let count = row.get(order).copied().unwrap_or(0);
                    if count >= PAGETYPEINFO_COUNT_CAP {
                        put!(out, ">{PAGETYPEINFO_COUNT_CAP:6} ");
                    } else {
                        put!(out, "{count:6} ");
                    }
                }
                out.push('\n');
            }
        }

        put!(out, "\n{:<23}", "Number of blocks type ");
        for name in migratetype_names {
            put!(out, "{name:>12} ");
        }
        out.push('\n');
        for zone in node_zones {
            zone_prefix(&mut out, zone);
            for mt in 0..migratetype_names.len() {
                let blocks = zone.pageblocks_per_type.get(mt).copied().unwrap_or(0);
                put!(out, "{blocks:12} ");
            }
            out.push('\n');
        }
    }
    out
}

/// vmstat: one "name value" line per counter, in the given order (`/proc/vmstat`
/// layout: name, one space, decimal value, newline). Linux appends the
/// deprecated `nr_unstable 0` after its last counter; include it in `counters`
/// to reproduce that.
pub fn vmstat(counters: &[(&str, u64)]) -> String {
    let mut out = String::new();
    for (name, value) in counters {
        put!(out, "{name} {value}\n");
    }
    out
}

const ERR_NODE_KEYWORD: &str = "expected the line to start with `Node`";
const ERR_NODE_ID: &str = "expected a decimal node id followed by `,`";
const ERR_ZONE_KEYWORD: &str = "expected `zone` after the node id";
const ERR_ZONE_NAME: &str = "missing zone name";
const ERR_NO_COUNTS: &str = "zone has no free-block counts";
const ERR_NOT_DECIMAL: &str = "free-block count is not a decimal number";
const ERR_TOO_LARGE: &str = "number is too large";

/// Parses a run of ASCII digits (no sign, no spaces) into a `u64`.
fn parse_decimal(token: &str, not_decimal: &'static str) -> Result<u64, &'static str> {
    if token.is_empty() {
        return Err(not_decimal);
    }
    token.bytes().try_fold(0u64, |acc, b| {
        if !b.is_ascii_digit() {
            return Err(not_decimal);
        }
        acc.checked_mul(10).and_then(|v| v.checked_add(u64::from(b - b'0'))).ok_or(ERR_TOO_LARGE)
    })
}

/// Parse buddyinfo text back into (node, zone name, per-order counts) — used by
/// tests and by `mmkit replay` to read trace headers. Returns a typed error,
/// never panics, on malformed input.
///
/// Accepts any amount of whitespace between fields (so it reads both Linux's
/// output and [`buddyinfo`]'s) and skips blank lines. Rows may differ in their
/// number of orders. Zone names are single tokens, so a rendering round-trips
/// for every non-empty zone name without whitespace.
///
/// # Errors
///
/// [`ProcParseError`] with the 1-based line number when a non-blank line is not
/// `Node <id>, zone <name> <count>...` with decimal, `u64`-sized numbers.
pub fn parse_buddyinfo(text: &str) -> Result<Vec<(usize, String, Vec<u64>)>, ProcParseError> {
    let mut zones = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let err = |reason| ProcParseError { line: index + 1, reason };
        let mut tokens = raw.split_ascii_whitespace();
        let Some(first) = tokens.next() else {
            continue;
        };
        if first != "Node" {
            return Err(err(ERR_NODE_KEYWORD));
        }
        let node_token = tokens.next().and_then(|t| t.strip_suffix(',')).ok_or_else(|| err(ERR_NODE_ID))?;
        let node = parse_decimal(node_token, ERR_NODE_ID).map_err(err)?;
        let node = usize::try_from(node).map_err(|_| err(ERR_TOO_LARGE))?;
        if tokens.next() != Some("zone") {
            return Err(err(ERR_ZONE_KEYWORD));
        }
        let name = tokens.next().ok_or_else(|| err(ERR_ZONE_NAME))?;
        let counts = tokens.map(|t| parse_decimal(t, ERR_NOT_DECIMAL)).collect::<Result<Vec<u64>, _>>().map_err(err)?;
        if counts.is_empty() {
            return Err(err(ERR_NO_COUNTS));
        }
        zones.push((node, String::from(name), counts));
    }
    Ok(zones)
}

/// `count << shift` without overflow: exact for `shift < 64`, saturating beyond.
fn pages_of(count: u64, shift: usize) -> u128 {
    match count {
        0 => 0,
        _ if shift >= 64 => u128::MAX,
        _ => u128::from(count) << shift,
    }
}

/// Linux's `contig_page_info` for one target order, in wide integers.
struct ContigInfo {
    /// Free base pages in the zone.
    free_pages: u128,
    /// Free blocks of any order.
    free_blocks_total: u128,
    /// Free base pages inside blocks of at least the target order.
    suitable_pages: u128,
}

fn contig_info(free_blocks_per_order: &[u64], suitable_order: u32) -> ContigInfo {
    let suitable_order = usize::try_from(suitable_order).unwrap_or(usize::MAX);
    let mut info = ContigInfo { free_pages: 0, free_blocks_total: 0, suitable_pages: 0 };
    for (order, &count) in free_blocks_per_order.iter().enumerate() {
        let pages = pages_of(count, order);
        info.free_blocks_total = info.free_blocks_total.saturating_add(u128::from(count));
        info.free_pages = info.free_pages.saturating_add(pages);
        if order >= suitable_order {
            info.suitable_pages = info.suitable_pages.saturating_add(pages);
        }
    }
    info
}

/// Unusable free space index for one order, in thousandths (0..=1000; Linux
/// prints it as `"%d.%03d"`, e.g. `0.066`): the share of free memory sitting in
/// blocks too small for an allocation of `order`. A zone with no free memory
/// counts as fully unusable (1000).
pub fn unusable_index(free_blocks_per_order: &[u64], order: u32) -> u32 {
    let info = contig_info(free_blocks_per_order, order);
    if info.free_pages == 0 {
        return 1000;
    }
    let unusable = info.free_pages - info.suitable_pages.min(info.free_pages);
    let index = match unusable.checked_mul(1000) {
        Some(scaled) => scaled / info.free_pages,
        // Only reachable with saturated (absurd) inputs; keep the ratio anyway.
        None => unusable / (info.free_pages / 1000),
    };
    // `index <= 1000`, so the narrowing is lossless.
    index.min(1000) as u32
}

/// Fragmentation index for one order, in thousandths, computed as Linux's
/// `__fragmentation_index`: -1000 (shown "-1.000") when a suitable block
/// exists; 0 for an empty zone or an order beyond the slice; otherwise
/// `1000 - (1000 + free_pages * 1000 / 2^order) / free_blocks_total`, where
/// values towards 0 mean the allocation fails for lack of memory and towards
/// 1000 for external fragmentation. Like Linux, the formula goes negative (down
/// to -500) when there are very few small blocks, e.g. a single order-0 block
/// at order 1 gives -500.
pub fn fragmentation_index(free_blocks_per_order: &[u64], order: u32) -> i32 {
    let in_range = usize::try_from(order).is_ok_and(|o| o < free_blocks_per_order.len());
    if !in_range || order >= 64 {
        return 0;
    }
    let info = contig_info(free_blocks_per_order, order);
    if info.free_blocks_total == 0 {
        return 0;
    }
    if info.suitable_pages > 0 {
        return -1000;
    }
    let requested = 1u128 << order;
    let scaled_free = info.free_pages.saturating_mul(1000) / requested;
    let quotient = 1000u128.saturating_add(scaled_free) / info.free_blocks_total;
    // Every free block is smaller than `requested`, so `quotient <= 1500`; the
    // clamp only keeps the narrowing obviously lossless.
    1000 - quotient.min(1_000_000) as i32
}

/// Orders `0..len` of a per-order slice, as `u32`.
fn orders(zone: &ZoneFreeInfo) -> impl Iterator<Item = u32> {
    let len = u32::try_from(zone.free_blocks_per_order.len()).unwrap_or(u32::MAX);
    0..len
}

/// Renders debugfs `extfrag/unusable_index`: per zone `"Node %d, zone %8s "`
/// then `"%d.%03d "` per order and a newline.
pub fn unusable_index_text(zones: &[ZoneFreeInfo]) -> String {
    let mut out = String::new();
    for zone in zones {
        zone_prefix(&mut out, zone);
        for order in orders(zone) {
            let index = unusable_index(&zone.free_blocks_per_order, order);
            put!(out, "{}.{:03} ", index / 1000, index % 1000);
        }
        out.push('\n');
    }
    out
}

/// Renders debugfs `extfrag/extfrag_index`: per zone `"Node %d, zone %8s "`
/// then `"%2d.%03d "` per order (C's truncating `/` and `%`, so -1000 prints
/// `-1.000`) and a newline.
pub fn extfrag_index_text(zones: &[ZoneFreeInfo]) -> String {
    let mut out = String::new();
    for zone in zones {
        zone_prefix(&mut out, zone);
        for order in orders(zone) {
            let index = fragmentation_index(&zone.free_blocks_per_order, order);
            put!(out, "{:2}.{:03} ", index / 1000, index % 1000);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "procfs/tests.rs"]
mod tests;
