//! Compaction: moving in-use movable blocks out of the low pageblocks of a
//! zone into free blocks near its top, so free memory coalesces into blocks
//! of pageblock order (Linux's `mm/compaction.c`, `compact_zone`).
//!
//! Two scanners walk towards each other a pageblock at a time: the migrate
//! scanner from the zone's start looks at movable pageblocks for in-use
//! movable blocks (`isolate_migratepages_block`); the free scanner from the
//! zone's end looks at movable pageblocks for free blocks to move them into
//! (`isolate_freepages_block`, `suitable_migration_target`), holes only:
//! free blocks below pageblock order. Each move takes
//! the chosen free block with `alloc_pages_at` and hands both to the
//! embedder's [`Migrator::migrate_page_to`](crate::Migrator::migrate_page_to),
//! which copies, repoints the owner and frees the source. The pass ends
//! when the scanners meet or, for a given order, as soon as a free block of
//! that order exists (`__compact_finished`).
//!
//! Which pass runs is the map's [`CompactionMode`]: Linux's scanners
//! (`--policy linux`), or sparsest-first evacuation (`evacuate`), which the
//! address-ordered policies use because their densest pageblocks are the
//! ones Linux's migrate scanner meets first. Either pass stops at its goal:
//! a free block of the requested order (direct compaction), a fragmentation
//! score at or below a mark (proactive compaction, Linux's kcompactd with
//! `vm.compaction_proactiveness`), or the end of the zone.
//!
//! Owns the scanners, the goals, the fragmentation score and the counters of
//! a pass; free lists change through the ordinary allocation and free paths.
#![deny(unsafe_code)]

use crate::mem::page::{PageFlags, PageIdx};
use crate::page_alloc::migrate::{MigrateRequest, Migrator};
use crate::page_alloc::Tuning;
use crate::types::error::MigrateError;
use crate::types::gfp::{Gfp, MigrateType};
use crate::types::placement::CompactionMode;
use crate::{PageAllocator, Pfn};
use core::sync::atomic::Ordering::Relaxed;

/// Order whose unusable free space the fragmentation score measures
/// (Linux's `COMPACTION_HPAGE_ORDER`, a 2 MiB huge page with 4 KiB pages).
pub const COMPACTION_HPAGE_ORDER: u32 = 9;

/// Where a pass stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompactGoal {
    /// A free block of at least this order exists.
    Order(u32),
    /// The zone's fragmentation score, in thousandths, is at most this.
    Score(u32),
    /// The whole zone (`/proc/sys/vm/compact_memory`).
    Whole,
}

/// Linux's `fragmentation_score_wmark`: the score (0..=100) proactive
/// compaction brings a zone down to (`low`), and the node score above which
/// it starts (`!low`, ten points higher). `proactiveness` is
/// `vm.compaction_proactiveness` (0..=100; values above 100 count as 100).
#[must_use]
pub fn fragmentation_score_wmark(proactiveness: u32, low: bool) -> u32 {
    let wmark_low = 100u32.saturating_sub(proactiveness.min(100)).max(5);
    if low {
        wmark_low
    } else {
        (wmark_low + 10).min(100)
    }
}

/// What one compaction pass did (the vmstat `compact_*` counters of it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactResult {
    /// Pages the migrate scanner looked at (`compact_migrate_scanned`).
    pub migrate_scanned: u64,
    /// Pages the free scanner looked at (`compact_free_scanned`).
    pub free_scanned: u64,
    /// Blocks moved (`pgmigrate_success`, in blocks).
    pub migrated: u64,
    /// Blocks the migrator refused or could not move (`pgmigrate_fail`).
    pub failed: u64,
    /// A free block of the requested order exists at the end (always false
    /// for a whole-zone pass without an order).
    pub success: bool,
}

impl Tuning<'_> {
    /// Compacts zone `zone_index` (Linux's `compact_zone`): until a free
    /// block of `order` exists, or with `None` over the whole zone (as
    /// `/proc/sys/vm/compact_memory` does). Which pass runs is the map's
    /// [`CompactionMode`]. Needs a migrator that implements
    /// [`migrate_page_to`](crate::Migrator::migrate_page_to); without one
    /// it does nothing. Call with no allocator lock held.
    ///
    /// # Errors
    /// [`IndexError::NoSuchZone`](crate::IndexError::NoSuchZone) for a zone
    /// index the map lacks.
    pub fn compact_zone(&self, zone_index: usize, order: Option<u32>) -> Result<CompactResult, crate::IndexError> {
        self.mm.check_zone(zone_index)?;
        Ok(self.mm.compact_zone_to(zone_index, order.map_or(CompactGoal::Whole, CompactGoal::Order)))
    }

    /// Proactive compaction of node `nid` at `proactiveness` (Linux's
    /// kcompactd: `should_proactive_compact_node`, then
    /// `proactive_compact_node`): when the node's fragmentation score is
    /// above [`fragmentation_score_wmark`]`(proactiveness, false)`, each
    /// zone is compacted until its own score is at most the low mark.
    /// Returns `None` when the score was below the mark (nothing ran), else
    /// the summed result; `success` says the low mark was reached. An
    /// embedder calls this from a timer (Linux checks every 500 ms).
    ///
    /// # Errors
    /// [`IndexError::NoSuchNode`](crate::IndexError::NoSuchNode) for a node
    /// the map lacks.
    pub fn proactive_compact(
        &self,
        nid: usize,
        proactiveness: u32,
    ) -> Result<Option<CompactResult>, crate::IndexError> {
        self.mm.check_node(nid)?;
        if proactiveness == 0 {
            return Ok(None);
        }
        let high = fragmentation_score_wmark(proactiveness, false) * 10;
        self.proactive_compact_marks(nid, high, fragmentation_score_wmark(proactiveness, true) * 10)
    }

    /// One periodic check of kcompactd for node `nid` with the map's
    /// placement policy's marks
    /// ([`PlacementPolicy::proactive_marks`](crate::PlacementPolicy::proactive_marks)):
    /// what an embedder calls from a timer to get the policy's background
    /// compaction. `None` when nothing ran.
    ///
    /// # Errors
    /// [`IndexError::NoSuchNode`](crate::IndexError::NoSuchNode) for a node
    /// the map lacks.
    pub fn kcompactd_check(&self, nid: usize) -> Result<Option<CompactResult>, crate::IndexError> {
        self.mm.check_node(nid)?;
        let Some(zone) = self.mm.zones.iter().find(|z| z.nid == nid) else { return Ok(None) };
        let policy = zone.placement;
        let (start, stop) = policy.proactive_marks();
        self.proactive_compact_marks(nid, start, stop)
    }

    /// [`proactive_compact`](Self::proactive_compact) with the marks given
    /// directly, in thousandths of the score: a round starts when node
    /// `nid`'s score is above `start_above` and compacts each zone down to
    /// `stop_at` (Linux's marks are whole points, at least 5, i.e. 50
    /// here).
    ///
    /// # Errors
    /// [`IndexError::NoSuchNode`](crate::IndexError::NoSuchNode) for a node
    /// the map lacks.
    pub fn proactive_compact_marks(
        &self,
        nid: usize,
        start_above: u32,
        stop_at: u32,
    ) -> Result<Option<CompactResult>, crate::IndexError> {
        if self.fragmentation_score(nid)? <= start_above || self.mm.migrator.is_none() {
            return Ok(None);
        }
        self.mm.stats.compact_daemon_wake.fetch_add(1, Relaxed);
        let low = stop_at;
        let mut sum = CompactResult { success: true, ..CompactResult::default() };
        for zi in 0..self.mm.zones.len() {
            if self.mm.zones[zi].nid != nid || self.mm.zone_fragmentation_score(zi) <= low {
                continue;
            }
            let r = self.mm.compact_zone_to(zi, CompactGoal::Score(low));
            sum.migrate_scanned += r.migrate_scanned;
            sum.free_scanned += r.free_scanned;
            sum.migrated += r.migrated;
            sum.failed += r.failed;
            sum.success &= r.success;
        }
        let s = &self.mm.stats;
        s.compact_daemon_migrate_scanned.fetch_add(sum.migrate_scanned, Relaxed);
        s.compact_daemon_free_scanned.fetch_add(sum.free_scanned, Relaxed);
        Ok(Some(sum))
    }

    /// Node `nid`'s fragmentation score in thousandths (Linux's
    /// `fragmentation_score_node` in tenths of its points): each zone's
    /// order-9 unusable free space index weighted by its share of the
    /// node's managed pages; 0 for a node without memory.
    ///
    /// # Errors
    /// [`IndexError::NoSuchNode`](crate::IndexError::NoSuchNode) for a node
    /// the map lacks.
    pub fn fragmentation_score(&self, nid: usize) -> Result<u32, crate::IndexError> {
        self.mm.check_node(nid)?;
        let node_pages: u64 = self.mm.zones.iter().filter(|z| z.nid == nid).map(|z| z.managed_pages()).sum();
        if node_pages == 0 {
            return Ok(0);
        }
        let weighted: u64 = (0..self.mm.zones.len())
            .filter(|&zi| self.mm.zones[zi].nid == nid)
            .map(|zi| u64::from(self.mm.zone_fragmentation_score(zi)) * self.mm.zones[zi].managed_pages())
            .sum();
        Ok((weighted / node_pages) as u32)
    }
}

impl PageAllocator {
    /// One pass of zone `zi` towards `goal`, counted in vmstat.
    pub(crate) fn compact_zone_to(&self, zi: usize, goal: CompactGoal) -> CompactResult {
        let mut result = CompactResult::default();
        let (Some(migrator), Some(zone)) = (self.migrator.as_deref(), self.zones.get(zi)) else {
            return result;
        };
        match zone.placement.compaction() {
            CompactionMode::Linear => self.compact_linear(zi, goal, migrator, &mut result),
            CompactionMode::SparsestFirst => self.evacuate_sparse(zi, goal, migrator, &mut result),
        }
        let s = &self.stats;
        s.compact_migrate_scanned.fetch_add(result.migrate_scanned, Relaxed);
        s.compact_free_scanned.fetch_add(result.free_scanned, Relaxed);
        s.pgmigrate_success.fetch_add(result.migrated, Relaxed);
        s.pgmigrate_fail.fetch_add(result.failed, Relaxed);
        result
    }

    /// Zone `zi`'s score in thousandths (Linux's `extfrag_for_order` for
    /// [`COMPACTION_HPAGE_ORDER`]): free pages outside blocks of that
    /// order, per thousand free pages; 0 with nothing free.
    pub(crate) fn zone_fragmentation_score(&self, zi: usize) -> u32 {
        let state = self.zones[zi].state.lock();
        let area = &state.area;
        let free = area.free_pages();
        if free == 0 {
            return 0;
        }
        let order = COMPACTION_HPAGE_ORDER.min(area.max_order());
        let suitable: u64 = (order..=area.max_order()).map(|o| area.nr_free(o) << o).sum();
        ((free - suitable.min(free)) * 1000 / free) as u32
    }

    /// Whether `goal` holds for zone `zi` now.
    pub(crate) fn compact_goal_met(&self, zi: usize, goal: CompactGoal) -> bool {
        match goal {
            CompactGoal::Order(order) => self.zone_has_free_block(zi, order),
            CompactGoal::Score(low) => self.zone_fragmentation_score(zi) <= low,
            CompactGoal::Whole => false,
        }
    }

    /// Linux's two scanners over zone `zi` towards `goal` (see the module doc).
    fn compact_linear(&self, zi: usize, goal: CompactGoal, migrator: &dyn Migrator, result: &mut CompactResult) {
        let zone = &self.zones[zi];
        let pb = 1u32 << self.mem.geometry.pageblock_order;
        let mut migrate_pb = zone.start_idx.next_multiple_of(pb);
        // The free scanner starts at the last whole pageblock.
        let mut free_pb = (zone.end_idx / pb * pb).saturating_sub(pb);
        // Where the free scanner resumes inside its pageblock.
        let mut free_at = free_pb;
        'pass: while migrate_pb < free_pb {
            if goal != CompactGoal::Whole && self.compact_goal_met(zi, goal) {
                result.success = true;
                break;
            }
            if self.mem.blocks.get(migrate_pb) == MigrateType::Movable {
                let mut idx = migrate_pb;
                while idx < migrate_pb + pb {
                    let page = self.mem.pages.get(idx);
                    let flags = page.flags();
                    result.migrate_scanned += 1;
                    let size = 1u32 << page.order();
                    if flags.contains(PageFlags::BUDDY) || flags.contains(PageFlags::PCP) {
                        idx += size;
                        continue;
                    }
                    if !movable_candidate(flags, page.tag()) || self.page_count(self.idx_to_pfn(idx)) != Ok(1) {
                        idx += 1;
                        continue;
                    }
                    let block_order = page.order();
                    let Some(target) =
                        self.isolate_free_block(migrate_pb, &mut free_pb, &mut free_at, block_order, result)
                    else {
                        break 'pass;
                    };
                    let compound = flags.contains(PageFlags::HEAD);
                    let gfp = if compound { Gfp::HIGHUSER_MOVABLE | Gfp::COMP } else { Gfp::HIGHUSER_MOVABLE };
                    let target_pfn = self.idx_to_pfn(target);
                    let request = MigrateRequest { pfn: self.idx_to_pfn(idx), order: block_order, gfp, nid: zone.nid };
                    match self.alloc_pages_at(target_pfn, block_order, gfp) {
                        Ok(_) => match self.migrate_to_target(migrator, &request, target_pfn) {
                            Ok(_) => result.migrated += 1,
                            Err(_) => {
                                result.failed += 1;
                                let _ = self.free_pages(target_pfn, block_order);
                            }
                        },
                        Err(_) => result.failed += 1,
                    }
                    idx += size;
                }
            }
            migrate_pb += pb;
        }
        if goal != CompactGoal::Whole {
            if !result.success && result.migrated > 0 {
                // Sources freed onto per-CPU lists merge only in the buddy.
                crate::Cpus::new(self).drain_all_pages();
            }
            result.success = result.success || self.compact_goal_met(zi, goal);
        }
    }

    /// Direct compaction for a failing request of `order` on node `nid`
    /// (Linux's `try_to_compact_pages`): only for pageblock-sized and larger
    /// requests, each zone of the node until one has a block of `order`.
    /// True if any block moved.
    /// `migrator.migrate_page_to` into `target`, which the caller
    /// allocated: the migrator is the embedder's code, and a panic in it
    /// counts as an `Err` (the target is freed on the way out, as the
    /// caller frees it after an `Err`).
    pub(crate) fn migrate_to_target(
        &self,
        migrator: &dyn Migrator,
        request: &MigrateRequest,
        target: Pfn,
    ) -> Result<Pfn, MigrateError> {
        struct FreeOnUnwind<'a> {
            alloc: &'a PageAllocator,
            target: Pfn,
            order: u32,
            armed: bool,
        }
        impl Drop for FreeOnUnwind<'_> {
            fn drop(&mut self) {
                if self.armed {
                    let _ = self.alloc.free_pages(self.target, self.order);
                }
            }
        }
        let mut guard = FreeOnUnwind { alloc: self, target, order: request.order, armed: true };
        let moved = migrator.migrate_page_to(self, request, target);
        guard.armed = false;
        moved
    }

    pub(crate) fn direct_compact_zones(&self, order: u32, nid: usize) -> bool {
        if order < self.mem.geometry.pageblock_order || self.migrator.is_none() {
            return false;
        }
        let mut moved = false;
        for zi in 0..self.zones.len() {
            if self.zones[zi].nid != nid {
                continue;
            }
            let result = self.compact_zone_to(zi, CompactGoal::Order(order));
            moved |= result.migrated > 0;
            if result.success {
                break;
            }
        }
        moved
    }

    /// The free scanner: the next free block of at least `order` in a
    /// movable pageblock, from `free_at` downwards, never at or below the
    /// migrate scanner's pageblock. Returns the index of a block of exactly
    /// `order` inside it (its lowest part), or `None` when the scanners met.
    fn isolate_free_block(
        &self,
        migrate_pb: PageIdx,
        free_pb: &mut PageIdx,
        free_at: &mut PageIdx,
        order: u32,
        result: &mut CompactResult,
    ) -> Option<PageIdx> {
        let pageblock_order = self.mem.geometry.pageblock_order;
        let pb = 1u32 << pageblock_order;
        while *free_pb > migrate_pb {
            if self.mem.blocks.get(*free_pb) == MigrateType::Movable {
                while *free_at < *free_pb + pb {
                    let page = self.mem.pages.get(*free_at);
                    result.free_scanned += 1;
                    if page.has(PageFlags::BUDDY) {
                        let size = 1u32 << page.order();
                        // Holes only: moving a block into a whole free
                        // pageblock would break the very thing compaction
                        // makes (Linux's fast_isolate_freepages also
                        // searches the small orders' lists).
                        if page.order() >= order && page.order() < pageblock_order {
                            // Take the block's lowest part; the rest stays
                            // free and the scanner looks at it next.
                            let target = *free_at;
                            *free_at += 1 << order;
                            return Some(target);
                        }
                        *free_at += size;
                    } else {
                        *free_at += 1;
                    }
                }
            }
            *free_pb -= pb;
            *free_at = *free_pb;
        }
        None
    }

    /// Whether zone `zone_index` has a free block of at least `order`.
    pub(crate) fn zone_has_free_block(&self, zone_index: usize, order: u32) -> bool {
        let state = self.zones[zone_index].state.lock();
        state.area.orders_any() >> order != 0
    }
}

/// Whether a page with `flags` and migratetype tag `tag` heads an in-use
/// block compaction may move: allocated as movable, not owned by a layer,
/// not local to a pinned CPU.
pub(crate) fn movable_candidate(flags: PageFlags, tag: u8) -> bool {
    flags.contains(PageFlags::ALLOCATED)
        && !flags.intersects(PageFlags::OWNED.union(PageFlags::LOCAL))
        && !flags.contains(PageFlags::HWPOISON)
        && tag == MigrateType::Movable as u8
}
