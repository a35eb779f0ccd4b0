//! Fragmentation metrics of an allocator at one moment of a replay: free
//! pages per order and migratetype, pageblocks per migratetype and how many
//! are mixed, the unusable free space index and fragmentation index for
//! order 9, and the Linux numbers from a trace header.
//!
//! Owns what a sample contains and how it is computed from mmkit's numeric
//! accessors (`ZoneSnapshot`, `procfs`); must not touch the allocator's
//! state (read-only) or the replay loop.

use super::engine::{Counts, NR_ORDERS};
use mmkit::gfp::MIGRATE_TYPES;
use mmkit::Cpus;
use mmkit::{procfs, MigrateType, PageAllocator, Pfn, Report};
use serde::Serialize;

/// The order the headline indices are computed for (a 2 MiB huge page).
pub const INDEX_ORDER: u32 = 9;

/// The allocator's free memory and pageblocks at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Events applied before this sample.
    pub event: u64,
    /// Pages in live (replayed, not yet freed) blocks.
    pub live_pages: u64,
    /// Free pages on the buddy lists (per-CPU lists not included).
    pub free_pages: u64,
    /// Free pages per order 0..=10.
    pub free_pages_by_order: Vec<u64>,
    /// Free pages per migratetype (Unmovable, Movable, Reclaimable,
    /// HighAtomic, CMA, Isolate).
    pub free_pages_by_type: Vec<u64>,
    /// Pageblocks per migratetype.
    pub pageblocks_by_type: Vec<u64>,
    /// Free pages in blocks below order 9 per migratetype: the unusable
    /// part of `free_pages`, by the list it sits on.
    pub unusable_pages_by_type: Vec<u64>,
    /// Live pages per request mobility (unmovable, movable, reclaimable).
    pub live_pages_by_mobility: Vec<u64>,
    /// Pageblocks holding live pages whose GFP mobility differs from the
    /// pageblock's type.
    pub mixed_pageblocks: u64,
    /// Unusable free space index for order 9, 0..1 (debugfs
    /// `extfrag/unusable_index`).
    pub unusable_index_order9: f64,
    /// Fragmentation index for order 9 (debugfs `extfrag/extfrag_index`;
    /// -1 when an order-9 block is free).
    pub fragmentation_index_order9: f64,
    /// mmkit allocation failures so far.
    pub failures: u64,
}

/// The end state, with the per-order and per-type detail.
#[derive(Clone, Debug, Serialize)]
pub struct FinalState {
    /// The last sample's numbers, taken after draining per-CPU lists.
    #[serde(flatten)]
    pub sample: Sample,
    /// Free pages per order and migratetype, `[order][migratetype]`.
    pub free_pages_by_order_and_type: Vec<Vec<u64>>,
    /// All pageblocks of the map.
    pub pageblocks: u64,
    /// Pages the drain moved from per-CPU lists to the buddy lists.
    pub pcp_pages_drained: u64,
    /// `/proc/buddyinfo` text of the end state.
    pub buddyinfo: String,
}

/// Where the replay broke pageblock-sized free blocks and how fallbacks and
/// per-CPU lists went (the instrumentation behind the placement code's
/// module doc), summed over zones.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PlacementStats {
    /// Free blocks of order ≥ 9 split for a smaller request, by the order
    /// requested.
    pub pageblock_breaks_by_order: Vec<u64>,
    /// The same by the migratetype of the list the pieces went to
    /// (Unmovable, Movable, Reclaimable, HighAtomic, CMA, Isolate).
    pub pageblock_breaks_by_type: Vec<u64>,
    /// Allocations served from another migratetype's lists.
    pub fallback_allocs: u64,
    /// Pageblocks whose type changed to the requester's.
    pub pageblocks_claimed: u64,
    /// Fallbacks that took one block without claiming its pageblock.
    pub steals: u64,
    /// Per-CPU list refills from the buddy, and the pages they brought.
    pub pcp_refills: u64,
    /// Pages brought by refills.
    pub pcp_refill_pages: u64,
    /// Per-CPU list spills to the buddy.
    pub pcp_spills: u64,
    /// Pages returned by spills (and the final drain).
    pub pcp_spill_pages: u64,
}

/// The placement counters of every zone of `mm`.
pub fn placement_stats(mm: &PageAllocator) -> PlacementStats {
    let mut s = PlacementStats {
        pageblock_breaks_by_order: vec![0; NR_ORDERS],
        pageblock_breaks_by_type: vec![0; MIGRATE_TYPES],
        ..PlacementStats::default()
    };
    for z in Report::new(mm).zone_snapshots() {
        for (o, n) in z.placement.pageblock_breaks_by_order.iter().enumerate().take(NR_ORDERS) {
            s.pageblock_breaks_by_order[o] += n;
        }
        for (mt, n) in z.placement.pageblock_breaks_by_type.iter().enumerate() {
            s.pageblock_breaks_by_type[mt] += n;
        }
        s.fallback_allocs += z.counters.fallback_allocs;
        s.pageblocks_claimed += z.counters.pageblocks_claimed;
        s.steals += z.placement.steals;
        s.pcp_refills += z.pcp.refills;
        s.pcp_refill_pages += z.pcp.refill_pages;
        s.pcp_spills += z.pcp.spills;
        s.pcp_spill_pages += z.pcp.spill_pages;
    }
    s
}

/// Compaction's vmstat counters after a replay with compaction on.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CompactionStats {
    /// Direct compaction attempts.
    pub compact_stall: u64,
    /// Those after which the allocation succeeded.
    pub compact_success: u64,
    /// Those after which it still failed.
    pub compact_fail: u64,
    /// Pages the migrate scanner looked at.
    pub compact_migrate_scanned: u64,
    /// Pages the free scanner looked at.
    pub compact_free_scanned: u64,
    /// Blocks moved.
    pub pgmigrate_success: u64,
    /// Blocks that could not be moved.
    pub pgmigrate_fail: u64,
    /// kcompactd checks that started a proactive round.
    pub proactive_runs: u64,
    /// Moves the replay followed (live entries repointed).
    pub followed_moves: u64,
}

/// The compaction counters of `mm` and the replay's own.
pub fn compaction_stats(mm: &PageAllocator, counts: &Counts, proactive_runs: u64) -> CompactionStats {
    let s = Report::new(mm).stats();
    CompactionStats {
        compact_stall: s.compact_stall,
        compact_success: s.compact_success,
        compact_fail: s.compact_fail,
        compact_migrate_scanned: s.compact_migrate_scanned,
        compact_free_scanned: s.compact_free_scanned,
        pgmigrate_success: s.pgmigrate_success,
        pgmigrate_fail: s.pgmigrate_fail,
        proactive_runs,
        followed_moves: counts.compaction_moves,
    }
}

/// Time average of the samples' order-9 unusable index: the mean over the
/// samples after the first (which is the empty start, index 0), taken at
/// evenly spaced event counts.
pub fn mean_unusable_index(samples: &[Sample]) -> f64 {
    let later: Vec<f64> = samples.iter().filter(|s| s.event > 0).map(|s| s.unusable_index_order9).collect();
    if later.is_empty() {
        0.0
    } else {
        later.iter().sum::<f64>() / later.len() as f64
    }
}

/// Takes a sample of `mm` after `counts.events` events.
pub fn sample(mm: &PageAllocator, composition: &[[u32; 3]], counts: &Counts) -> Sample {
    let zones = Report::new(mm).zone_snapshots();
    let mut blocks_by_order = vec![0u64; NR_ORDERS];
    let mut free_by_type = vec![0u64; MIGRATE_TYPES];
    let mut pageblocks_by_type = vec![0u64; MIGRATE_TYPES];
    let mut unusable_by_type = vec![0u64; MIGRATE_TYPES];
    let mut free_pages = 0;
    for z in &zones {
        for row in z.free_pages_by_order_and_type().iter().take(INDEX_ORDER as usize) {
            for (mt, n) in row.iter().enumerate() {
                unusable_by_type[mt] += n;
            }
        }
        for (o, n) in z.free.free_blocks_per_order.iter().enumerate().take(NR_ORDERS) {
            blocks_by_order[o] += n;
        }
        for (mt, n) in z.free_pages_by_type.iter().enumerate() {
            free_by_type[mt] += n;
        }
        for (mt, n) in z.free.pageblocks_per_type.iter().enumerate().take(MIGRATE_TYPES) {
            pageblocks_by_type[mt] += n;
        }
        free_pages += z.free_pages;
    }
    Sample {
        event: counts.events,
        live_pages: counts.live_pages,
        free_pages,
        free_pages_by_order: blocks_by_order.iter().enumerate().map(|(o, n)| n << o).collect(),
        free_pages_by_type: free_by_type,
        pageblocks_by_type,
        unusable_pages_by_type: unusable_by_type,
        live_pages_by_mobility: (0..3).map(|mt| composition.iter().map(|live| u64::from(live[mt])).sum()).collect(),
        mixed_pageblocks: mixed_pageblocks(mm, composition),
        unusable_index_order9: f64::from(procfs::unusable_index(&blocks_by_order, INDEX_ORDER)) / 1000.0,
        fragmentation_index_order9: f64::from(procfs::fragmentation_index(&blocks_by_order, INDEX_ORDER)) / 1000.0,
        failures: counts.failures(),
    }
}

/// Drains per-CPU lists, then takes the final sample with full detail.
pub fn final_state(mm: &PageAllocator, composition: &[[u32; 3]], counts: &Counts) -> FinalState {
    let pcp = Report::new(mm).nr_pcp_pages();
    Cpus::new(mm).drain_all_pages();
    let sample = sample(mm, composition, counts);
    let mut matrix = vec![vec![0u64; MIGRATE_TYPES]; NR_ORDERS];
    for z in Report::new(mm).zone_snapshots() {
        for (o, row) in z.free_pages_by_order_and_type().iter().enumerate().take(NR_ORDERS) {
            for (mt, n) in row.iter().enumerate() {
                matrix[o][mt] += n;
            }
        }
    }
    FinalState {
        pageblocks: sample.pageblocks_by_type.iter().sum(),
        sample,
        free_pages_by_order_and_type: matrix,
        pcp_pages_drained: pcp,
        buddyinfo: Report::new(mm).buddyinfo(),
    }
}

/// Type of pageblock `i` of the map.
pub fn pageblock_type(mm: &PageAllocator, i: usize) -> Option<MigrateType> {
    let pfn = mm.start_pfn().0 + ((i as u64) << mm.geometry().pageblock_order);
    Report::new(mm).pageblock_migratetype(Pfn(pfn))
}

/// Pageblocks holding live pages of a mobility other than their type.
fn mixed_pageblocks(mm: &PageAllocator, composition: &[[u32; 3]]) -> u64 {
    let mixed = composition.iter().enumerate().filter(|(i, live)| is_mixed(live, pageblock_type(mm, *i)));
    mixed.count() as u64
}

/// Whether a pageblock of type `ty` with `live` pages per mobility
/// (unmovable, movable, reclaimable) holds pages of another mobility.
pub fn is_mixed(live: &[u32; 3], ty: Option<mmkit::MigrateType>) -> bool {
    let own = ty.map_or(usize::MAX, |t| t as usize);
    live.iter().enumerate().any(|(mt, &n)| n > 0 && mt != own)
}

/// Linux's own numbers for one zone from a `buddyinfo_*:` header line.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LinuxState {
    /// Free pages in the zone.
    pub free_pages: u64,
    /// Free pages per order.
    pub free_pages_by_order: Vec<u64>,
    /// Unusable free space index for order 9, 0..1.
    pub unusable_index_order9: f64,
    /// Fragmentation index for order 9.
    pub fragmentation_index_order9: f64,
}

/// Reads `buddyinfo_before:` / `buddyinfo_after:` (per `key`) for zone
/// Normal from trace header lines (without their `#`).
pub fn linux_state(header: &[String], key: &str) -> Option<LinuxState> {
    let line = header.iter().find_map(|h| {
        let rest = h.trim_start().strip_prefix(key)?.strip_prefix(':')?;
        rest.contains("zone Normal").then_some(rest)
    })?;
    let (_, _, counts) = procfs::parse_buddyinfo(line).ok()?.into_iter().next()?;
    Some(LinuxState {
        free_pages: counts.iter().enumerate().map(|(o, n)| n << o).sum(),
        free_pages_by_order: counts.iter().enumerate().map(|(o, n)| n << o).collect(),
        unusable_index_order9: f64::from(procfs::unusable_index(&counts, INDEX_ORDER)) / 1000.0,
        fragmentation_index_order9: f64::from(procfs::fragmentation_index(&counts, INDEX_ORDER)) / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_state_from_a_header() {
        let header = vec![
            " buddyinfo_after: Node 0, zone DMA 0 0 0 0 0 0 0 0 1 1 3".to_string(),
            " buddyinfo_after: Node 0, zone Normal 602 184 126 179 317 130 66 14 137 112 368".to_string(),
        ];
        let s = linux_state(&header, "buddyinfo_after").unwrap();
        let free: u64 =
            [602u64, 184, 126, 179, 317, 130, 66, 14, 137, 112, 368].iter().enumerate().map(|(o, n)| n << o).sum();
        assert_eq!(s.free_pages, free);
        let suitable = (112u64 << 9) + (368 << 10);
        assert_eq!(s.unusable_index_order9, ((free - suitable) * 1000 / free) as f64 / 1000.0);
        assert_eq!(s.fragmentation_index_order9, -1.0);
        assert!(linux_state(&header, "buddyinfo_before").is_none());
    }
}
