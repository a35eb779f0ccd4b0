//! Zones: a PFN span of one node with its own free lists, lock and watermarks.
//!
//! Owns `Zone` (identity, span, managed pages, min/low/high watermarks,
//! `lowmem_reserve`) and `ZoneState`, the part behind the zone lock: the buddy
//! `FreeArea`, the highatomic reserve size and per-zone counters. Computes
//! watermarks (`setup_per_zone_wmarks`) and answers `zone_watermark_ok`.
//!
//! Lock order: a zone lock is a leaf; nothing else is taken while holding it,
//! and no two zone locks are ever held together.
//!
//! It does not choose zones (the zonelists are `zonelist`'s, the walk is
//! `page_alloc::alloc_path`'s) and touches descriptors only through
//! `buddy`.
#![deny(unsafe_code)]

pub(crate) mod buddy;
pub(crate) mod cma_area;
pub(crate) mod fallback;
pub(crate) mod placement;
pub(crate) mod zonelist;

use crate::mem::page::PageIdx;
use crate::types::gfp::{AllocFlags, MigrateType, Watermark, ZoneType, MAX_NR_ZONES};
use crate::types::placement::PlacementPolicy;
use crate::zone::buddy::{BuddyCtx, FreeArea};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::mem::map::MemMap;
use crate::mem::sync::Lock;

/// Per-zone event counters, updated under the zone lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneCounters {
    /// Blocks allocated from this zone (`pgalloc_<zone>` counts pages: see `pgalloc_pages`).
    pub pgalloc_blocks: u64,
    /// Pages allocated from this zone.
    pub pgalloc_pages: u64,
    /// Pages freed to this zone.
    pub pgfree_pages: u64,
    /// Allocations served from a fallback migratetype.
    pub fallback_allocs: u64,
    /// Pageblocks whose type changed to the requester's (claims).
    pub pageblocks_claimed: u64,
    /// Pageblocks moved into the highatomic reserve.
    pub highatomic_reserved: u64,
    /// Pageblocks released from the highatomic reserve.
    pub highatomic_released: u64,
}

/// The part of a zone protected by its lock.
pub(crate) struct ZoneState {
    pub area: FreeArea,
    /// Pages in pageblocks currently reserved as HIGHATOMIC.
    pub nr_reserved_highatomic: u64,
    pub counters: ZoneCounters,
    /// Pages a free page reporting pass has taken off the lists and not
    /// yet returned (`page_alloc::reporting`): free, but in no count.
    pub reporting_pages: u64,
}

/// One zone of one node.
pub struct Zone {
    pub(crate) nid: usize,
    pub(crate) zone_type: ZoneType,
    /// First PFN of the span.
    pub(crate) start_pfn: u64,
    /// One past the last PFN of the span.
    pub(crate) end_pfn: u64,
    pub(crate) start_idx: PageIdx,
    pub(crate) end_idx: PageIdx,
    /// Pages in the span that are not holes.
    pub(crate) present_pages: u64,
    /// Present pages minus reserved ones: what the buddy allocator manages.
    pub(crate) managed_pages: u64,
    /// min, low, high, indexed by [`Watermark`].
    pub(crate) watermarks: [u64; 3],
    /// Temporary raise of every watermark after a fallback claimed another
    /// type's pageblock (Linux's `watermark_boost`): background reclaim then
    /// frees memory before fragmentation spreads. Written under the lock.
    watermark_boost: AtomicU64,
    /// Largest boost: `watermark_boost_factor` of the high mark, at least a
    /// pageblock; 0 disables boosting (small zones, factor 0).
    pub(crate) max_boost: u64,
    /// A boost happened for a request that may wake kswapd; the allocation
    /// that finishes first wakes it (Linux's `ZONE_BOOSTED_WATERMARK`).
    pub(crate) boost_pending: AtomicBool,
    /// Pages kept back from allocations whose highest usable zone is index `j`.
    pub(crate) lowmem_reserve: [u64; MAX_NR_ZONES],
    pub(crate) state: Lock<ZoneState>,
    /// Copies of the free counts readable without the lock, for the
    /// lockless watermark check of the per-CPU fast path and for statistics.
    /// Written under the lock by [`publish`](Self::publish).
    pub(crate) free_pages_hint: AtomicU64,
    free_cma_hint: AtomicU64,
    free_highatomic_hint: AtomicU64,
    free_isolate_hint: AtomicU64,
    /// Free pages no request can be refused for: free minus every kind of
    /// free page some request may not use (CMA, highatomic, isolated).
    usable_by_all_hint: AtomicU64,
    /// Above this many `usable_by_all` pages, every cached-order request
    /// passes every watermark (high mark + largest reserve + a block).
    pub(crate) comfortably_above: u64,
    /// Set when an allocation found the zone below its high watermark; pcp
    /// `high` then shrinks instead of growing (Linux's `ZONE_BELOW_HIGH`).
    pub(crate) below_high: AtomicBool,
    /// Linux's `page_group_by_mobility_disabled`: fallbacks always claim
    /// the whole pageblock (every request is unmovable anyway).
    pub(crate) mobility_disabled: bool,
    /// The map's placement policy (its free lists hold the same value).
    pub(crate) placement: PlacementPolicy,
}

impl Zone {
    pub(crate) fn new(
        nid: usize,
        zone_type: ZoneType,
        span: (u64, u64),
        idx_span: (PageIdx, PageIdx),
        present_pages: u64,
        managed_pages: u64,
        max_order: u32,
    ) -> Self {
        Self {
            nid,
            zone_type,
            start_pfn: span.0,
            end_pfn: span.1,
            start_idx: idx_span.0,
            end_idx: idx_span.1,
            present_pages,
            managed_pages,
            watermarks: [0; 3],
            watermark_boost: AtomicU64::new(0),
            max_boost: 0,
            boost_pending: AtomicBool::new(false),
            lowmem_reserve: [0; MAX_NR_ZONES],
            state: Lock::new(ZoneState {
                area: FreeArea::new(max_order),
                nr_reserved_highatomic: 0,
                counters: ZoneCounters::default(),
                reporting_pages: 0,
            }),
            free_pages_hint: AtomicU64::new(0),
            free_cma_hint: AtomicU64::new(0),
            free_highatomic_hint: AtomicU64::new(0),
            free_isolate_hint: AtomicU64::new(0),
            usable_by_all_hint: AtomicU64::new(0),
            comfortably_above: u64::MAX,
            below_high: AtomicBool::new(false),
            mobility_disabled: false,
            placement: PlacementPolicy::Linux,
        }
    }

    /// The buddy view of this zone.
    #[inline]
    pub(crate) fn cx<'a>(&self, mem: &'a MemMap) -> BuddyCtx<'a> {
        BuddyCtx {
            pages: mem.pages.descs(),
            blocks: &mem.blocks,
            start: self.start_idx,
            end: self.end_idx,
            max_order: mem.geometry.merge_order(),
            pageblock_order: mem.geometry.pageblock_order,
        }
    }

    /// Node id.
    pub fn nid(&self) -> usize {
        self.nid
    }
    /// Zone type.
    pub fn zone_type(&self) -> ZoneType {
        self.zone_type
    }
    /// PFN span `[start, end)`.
    pub fn span(&self) -> core::ops::Range<u64> {
        self.start_pfn..self.end_pfn
    }
    /// Pages the buddy allocator manages in this zone.
    pub fn managed_pages(&self) -> u64 {
        self.managed_pages
    }
    /// Pages present (span minus holes).
    pub fn present_pages(&self) -> u64 {
        self.present_pages
    }
    /// A watermark, in pages.
    pub fn watermark(&self, mark: Watermark) -> u64 {
        self.watermarks[mark as usize] + self.watermark_boost.load(Relaxed)
    }
    /// Current boost of every watermark, in pages (0 unless a fallback
    /// recently claimed a pageblock and reclaim has not reset it).
    pub fn watermark_boost(&self) -> u64 {
        self.watermark_boost.load(Relaxed)
    }

    /// Raises the boost by a pageblock, up to `max_boost` (Linux's
    /// `boost_watermark`). Caller holds the zone lock. False if boosting is
    /// off for this zone.
    pub(crate) fn boost_watermark(&self, pageblock_pages: u64) -> bool {
        if self.max_boost == 0 {
            return false;
        }
        let boosted = (self.watermark_boost.load(Relaxed) + pageblock_pages).min(self.max_boost);
        self.watermark_boost.store(boosted, Relaxed);
        true
    }

    /// Drops the boost (what kswapd does once it has reclaimed).
    pub(crate) fn reset_watermark_boost(&self) {
        self.watermark_boost.store(0, Relaxed);
    }
    /// `lowmem_reserve[highest_zone]`, in pages.
    pub fn lowmem_reserve(&self, highest_zone: ZoneType) -> u64 {
        self.lowmem_reserve[highest_zone.index()]
    }
    /// Free pages (read without the lock; exact when the allocator is idle).
    pub fn free_pages(&self) -> u64 {
        self.free_pages_hint.load(Relaxed)
    }

    /// Publishes the free count after a change under the lock.
    #[inline]
    pub(crate) fn publish(&self, state: &ZoneState) {
        let area = &state.area;
        self.free_pages_hint.store(area.free_pages(), Relaxed);
        self.free_cma_hint.store(area.free_pages_of(MigrateType::Cma), Relaxed);
        self.free_highatomic_hint.store(area.free_pages_of(MigrateType::HighAtomic), Relaxed);
        self.free_isolate_hint.store(area.free_pages_of(MigrateType::Isolate), Relaxed);
        let unusable_by_some = area.free_pages_of(MigrateType::Cma)
            + area.free_pages_of(MigrateType::HighAtomic)
            + area.free_pages_of(MigrateType::Isolate);
        // A boost waiting for kswapd keeps the hint at 0, so the fast
        // paths' one compare (`comfortably_free`) also says no wake is due,
        // and they look for one only on their slower branch.
        let usable = if self.boost_pending.load(Relaxed) { 0 } else { area.free_pages() - unusable_by_some };
        self.usable_by_all_hint.store(usable, Relaxed);
    }

    /// Notes a boost for kswapd (caller holds the zone lock): until the
    /// wake clears it and a publish follows, the zone is not
    /// `comfortably_free`.
    pub(crate) fn mark_boost_pending(&self) {
        self.boost_pending.store(true, Relaxed);
        self.usable_by_all_hint.store(0, Relaxed);
    }

    /// One load and one compare: true when the zone is so far above its
    /// high watermark that no request of a cached order can fail any check,
    /// and no watermark boost is waiting to wake kswapd.
    #[inline(always)]
    pub(crate) fn comfortably_free(&self) -> bool {
        self.usable_by_all_hint.load(Relaxed) > self.comfortably_above
    }

    /// Usable free pages beyond the margin above which every request of a
    /// cached order passes every check (0 below it): what a zone's holder
    /// may allocate before checking its watermark again.
    #[inline]
    pub(crate) fn usable_above_margin(&self) -> u64 {
        self.usable_by_all_hint.load(Relaxed).saturating_sub(self.comfortably_above)
    }

    /// Lockless part of the watermark check (Linux's `zone_watermark_fast`
    /// for order 0, and its first half for higher orders): enough free
    /// pages above `mark`? Uses the published counts, so it may be slightly
    /// stale; the locked paths re-check exactly.
    #[inline(always)]
    pub(crate) fn watermark_fast(
        &self,
        order: u32,
        mark: u64,
        highest_zone: ZoneType,
        alloc_flags: AllocFlags,
    ) -> bool {
        let counts = FreeCounts {
            free: self.free_pages_hint.load(Relaxed),
            highatomic: self.free_highatomic_hint.load(Relaxed),
            cma: self.free_cma_hint.load(Relaxed),
            isolate: self.free_isolate_hint.load(Relaxed),
        };
        self.free_above_mark(counts, order, mark, highest_zone, alloc_flags)
    }

    #[inline(always)]
    fn free_above_mark(
        &self,
        c: FreeCounts,
        order: u32,
        mark: u64,
        highest_zone: ZoneType,
        alloc_flags: AllocFlags,
    ) -> bool {
        let mut free = c.free as i64 - ((1i64 << order) - 1);
        let mut min = mark as i64;
        // Free pages this request may not use.
        if !alloc_flags.intersects(AllocFlags::RESERVES) {
            free -= c.highatomic as i64;
        }
        if !alloc_flags.contains(AllocFlags::CMA) {
            free -= c.cma as i64;
        }
        // Isolated pages are never usable by ordinary allocations.
        free -= c.isolate as i64;
        if alloc_flags.intersects(AllocFlags::RESERVES) {
            if alloc_flags.contains(AllocFlags::MIN_RESERVE) {
                min -= min / 2;
                // Only together with MIN_RESERVE: GFP_NOWAIT alone gets no
                // extra reserve (the Linux code, not its comment).
                if alloc_flags.contains(AllocFlags::NON_BLOCK) {
                    min -= min / 4;
                }
            }
            if alloc_flags.contains(AllocFlags::OOM) {
                min -= min / 2;
            }
        }
        free > min + self.lowmem_reserve[highest_zone.index()] as i64
    }

    /// Linux's `__zone_watermark_ok`: may an allocation of `order` with
    /// `alloc_flags` leave this zone above `mark` (+ reserve for
    /// `highest_zone`)? `state` is the locked zone state.
    pub(crate) fn watermark_ok(
        &self,
        state: &ZoneState,
        order: u32,
        mark: u64,
        highest_zone: ZoneType,
        alloc_flags: AllocFlags,
    ) -> bool {
        let area = &state.area;
        let counts = FreeCounts {
            free: area.free_pages(),
            highatomic: area.free_pages_of(MigrateType::HighAtomic),
            cma: area.free_pages_of(MigrateType::Cma),
            isolate: area.free_pages_of(MigrateType::Isolate),
        };
        if !self.free_above_mark(counts, order, mark, highest_zone, alloc_flags) {
            return false;
        }
        if order == 0 {
            return true;
        }
        // Linux's per-order loop over the free areas, as one mask test: is
        // there a block of at least `order` on a list this request may use?
        let mut usable = area.orders_of(MigrateType::Unmovable)
            | area.orders_of(MigrateType::Movable)
            | area.orders_of(MigrateType::Reclaimable);
        if alloc_flags.contains(AllocFlags::CMA) {
            usable |= area.orders_of(MigrateType::Cma);
        }
        if alloc_flags.intersects(AllocFlags::HIGHATOMIC.union(AllocFlags::OOM)) {
            usable |= area.orders_of(MigrateType::HighAtomic);
        }
        usable >> order != 0
    }
}

/// Free page counts a watermark check looks at.
#[derive(Clone, Copy)]
struct FreeCounts {
    free: u64,
    highatomic: u64,
    cma: u64,
    isolate: u64,
}

/// Watermark tuning knobs (Linux's sysctls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatermarkConfig {
    /// `vm.min_free_kbytes`; `None` computes Linux's default from memory size.
    pub min_free_kbytes: Option<u64>,
    /// `vm.watermark_scale_factor` in units of 1/10000 of managed memory.
    pub watermark_scale_factor: u64,
    /// `vm.lowmem_reserve_ratio` per zone type (0 = no reserve).
    pub lowmem_reserve_ratio: [u64; MAX_NR_ZONES],
    /// `vm.watermark_boost_factor` in 1/10000 of the high watermark (0 turns
    /// boosting off).
    pub watermark_boost_factor: u64,
}

impl Default for WatermarkConfig {
    fn default() -> Self {
        Self {
            min_free_kbytes: None,
            watermark_scale_factor: 10,
            lowmem_reserve_ratio: [256, 256, 32, 0],
            watermark_boost_factor: 15_000,
        }
    }
}

/// Linux's default `min_free_kbytes`: sqrt(lowmem_kbytes × 16), clamped to
/// [128, 262144].
pub fn default_min_free_kbytes(lowmem_kbytes: u64) -> u64 {
    isqrt(lowmem_kbytes.saturating_mul(16)).clamp(128, 262_144)
}

fn isqrt(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    // Newton's iteration from an upper bound; converges in a few steps.
    let mut x = 1u64 << (64 - n.leading_zeros()).div_ceil(2);
    loop {
        let y = (x + n / x) / 2;
        if y >= x {
            return x;
        }
        x = y;
    }
}

/// Sets min/low/high of every zone and the lowmem reserves of each node
/// (Linux's `__setup_per_zone_wmarks` and `setup_per_zone_lowmem_reserve`).
/// Returns the `min_free_kbytes` in force.
pub(crate) fn setup_watermarks(
    zones: &mut [Zone],
    page_size: u64,
    pageblock_pages: u64,
    config: &WatermarkConfig,
) -> u64 {
    // Pages may be smaller than a KiB: convert with products, not a ratio.
    let to_kbytes = |pages: u64| (pages as u128 * page_size as u128 / 1024) as u64;
    let lowmem_pages: u64 = zones.iter().filter(|z| z.zone_type != ZoneType::Movable).map(|z| z.managed_pages).sum();
    let min_free_kbytes = config.min_free_kbytes.unwrap_or_else(|| default_min_free_kbytes(to_kbytes(lowmem_pages)));
    let pages_min = (min_free_kbytes as u128 * 1024 / page_size as u128) as u64;
    for zone in zones.iter_mut() {
        let managed = zone.managed_pages;
        let share =
            if lowmem_pages == 0 { 0 } else { (pages_min as u128 * managed as u128 / lowmem_pages as u128) as u64 };
        let min = if zone.zone_type == ZoneType::Movable {
            // Like highmem: a small fixed pool, since nothing but movable
            // allocations can use this zone anyway.
            (managed / 1024).clamp(32, 128).min(managed)
        } else {
            share
        };
        let step = (share / 4).max(managed * config.watermark_scale_factor / 10_000);
        zone.watermarks = [min, min + step, min + 2 * step];
        zone.reset_watermark_boost();
        // Linux does not boost zones of fewer than four pageblocks: a boost
        // there could exhaust them at once.
        zone.max_boost = if config.watermark_boost_factor == 0 || pageblock_pages * 4 > managed {
            0
        } else {
            (zone.watermarks[Watermark::High as usize] as u128 * config.watermark_boost_factor as u128 / 10_000)
                .max(pageblock_pages as u128) as u64
        };
    }
    // lowmem_reserve[j] of a lower zone i: pages of zones i+1..=j of the same
    // node divided by zone i's ratio.
    // Like Linux, the reserve is cleared only when the lower zone itself has
    // no ratio or no pages; absent upper zones just add nothing.
    let managed_of = |zones: &[Zone], nid: usize, t: usize| -> u64 {
        zones.iter().filter(|z| z.nid == nid && z.zone_type.index() == t).map(|z| z.managed_pages).sum()
    };
    let reserves: alloc::vec::Vec<[u64; MAX_NR_ZONES]> = zones
        .iter()
        .map(|zone| {
            let ti = zone.zone_type.index();
            let ratio = config.lowmem_reserve_ratio[ti];
            let clear = ratio == 0 || zone.managed_pages == 0;
            let mut reserve = [0u64; MAX_NR_ZONES];
            let mut above = 0u64;
            for (tj, slot) in reserve.iter_mut().enumerate().skip(ti + 1) {
                above += managed_of(zones, zone.nid, tj);
                *slot = if clear { 0 } else { above / ratio };
            }
            reserve
        })
        .collect();
    for (zone, reserve) in zones.iter_mut().zip(reserves) {
        zone.lowmem_reserve = reserve;
    }
    min_free_kbytes
}

/// Zone types present on node `nid`, by index.
pub(crate) fn node_zone_table(zones: &[Zone], nid: usize) -> [Option<usize>; MAX_NR_ZONES] {
    let mut table = [None; MAX_NR_ZONES];
    for (i, z) in zones.iter().enumerate() {
        if z.nid == nid {
            table[z.zone_type.index()] = Some(i);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_min_free_kbytes_matches_linux_table() {
        // Linux's table in mm/page_alloc.c: 16 MB → 512k, 1 GB → 4096k,
        // 16 GB → 16384k (roughly), clamped to 128..256 MiB.
        assert_eq!(default_min_free_kbytes(16 * 1024), 512);
        assert_eq!(default_min_free_kbytes(1024 * 1024), 4096);
        assert_eq!(default_min_free_kbytes(16 * 1024 * 1024), 16384);
        assert_eq!(default_min_free_kbytes(1), 128);
        assert_eq!(default_min_free_kbytes(u64::MAX / 32), 262_144);
    }

    #[test]
    fn a_boost_waiting_for_kswapd_keeps_the_zone_from_looking_comfortable() {
        // The fast paths look for a pending boost only when the zone is
        // not comfortably free, so the two must not be true together.
        let mm = crate::MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
        let zone = mm.zones.iter().max_by_key(|z| z.managed_pages).unwrap();
        assert!(zone.comfortably_free());
        let state = zone.state.lock();
        zone.mark_boost_pending();
        assert!(!zone.comfortably_free());
        zone.publish(&state);
        assert!(!zone.comfortably_free(), "a publish keeps the hint down while the boost waits");
        zone.boost_pending.store(false, Relaxed);
        zone.publish(&state);
        assert!(zone.comfortably_free());
    }

    #[test]
    fn isqrt_is_exact_floor() {
        for n in [0u64, 1, 2, 3, 4, 15, 16, 17, 1 << 40, (1 << 40) + 1, u64::MAX] {
            let r = isqrt(n);
            assert!(r as u128 * r as u128 <= n as u128);
            assert!((r as u128 + 1) * (r as u128 + 1) > n as u128);
        }
    }

    fn zone(nid: usize, t: ZoneType, managed: u64) -> Zone {
        Zone::new(nid, t, (0, managed), (0, managed as u32), managed, managed, 10)
    }

    #[test]
    fn watermarks_are_shares_of_min_free() {
        let mut zones = [zone(0, ZoneType::Dma32, 3 << 18), zone(0, ZoneType::Normal, 1 << 18)];
        let cfg = WatermarkConfig { min_free_kbytes: Some(4096), ..Default::default() };
        setup_watermarks(&mut zones, 4096, 512, &cfg);
        // 1024 pages of min split 3:1.
        assert_eq!(zones[0].watermark(Watermark::Min), 768);
        assert_eq!(zones[1].watermark(Watermark::Min), 256);
        // step = max(min/4, managed * 10 / 10000) = max(64, 262) = 262
        let step1 = 262;
        assert_eq!(zones[1].watermark(Watermark::Low), 256 + step1);
        assert_eq!(zones[1].watermark(Watermark::High), 256 + 2 * step1);
        // DMA32 keeps Normal's pages / 256 back from Normal-capable requests.
        assert_eq!(zones[0].lowmem_reserve(ZoneType::Normal), (1 << 18) / 256);
        assert_eq!(zones[1].lowmem_reserve(ZoneType::Normal), 0);
        // An absent MOVABLE zone adds nothing, but does not clear the reserve.
        assert_eq!(zones[0].lowmem_reserve(ZoneType::Movable), (1 << 18) / 256);
    }
}
