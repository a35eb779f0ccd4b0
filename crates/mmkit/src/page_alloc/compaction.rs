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
//! Owns only the scanners and the counters of a pass; free lists change
//! through the ordinary allocation and free paths.
#![deny(unsafe_code)]

use crate::mem::page::{PageFlags, PageIdx};
use crate::page_alloc::migrate::MigrateRequest;
use crate::types::gfp::{Gfp, MigrateType};
use crate::PageAllocator;
use core::sync::atomic::Ordering::Relaxed;

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

impl PageAllocator {
    /// Compacts zone `zone_index` (Linux's `compact_zone`): until a free
    /// block of `order` exists, or with `None` over the whole zone (as
    /// proactive compaction and `/proc/sys/vm/compact_memory` do). Needs a
    /// migrator that implements
    /// [`migrate_page_to`](crate::Migrator::migrate_page_to); without one
    /// it does nothing. Call with no allocator lock held.
    pub fn compact_zone(&self, zone_index: usize, order: Option<u32>) -> CompactResult {
        let mut result = CompactResult::default();
        let (Some(migrator), Some(zone)) = (self.migrator.as_deref(), self.zones.get(zone_index)) else {
            return result;
        };
        let pb = 1u32 << self.mem.geometry.pageblock_order;
        let mut migrate_pb = zone.start_idx.next_multiple_of(pb);
        // The free scanner starts at the last whole pageblock.
        let mut free_pb = (zone.end_idx / pb * pb).saturating_sub(pb);
        // Where the free scanner resumes inside its pageblock.
        let mut free_at = free_pb;
        'pass: while migrate_pb < free_pb {
            if let Some(order) = order {
                if self.zone_has_free_block(zone_index, order) {
                    result.success = true;
                    break;
                }
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
                        self.isolate_free_block(migrate_pb, &mut free_pb, &mut free_at, block_order, &mut result)
                    else {
                        break 'pass;
                    };
                    let compound = flags.contains(PageFlags::HEAD);
                    let gfp = if compound { Gfp::HIGHUSER_MOVABLE | Gfp::COMP } else { Gfp::HIGHUSER_MOVABLE };
                    let target_pfn = self.idx_to_pfn(target);
                    let request = MigrateRequest { pfn: self.idx_to_pfn(idx), order: block_order, gfp, nid: zone.nid };
                    match self.alloc_pages_at(target_pfn, block_order, gfp) {
                        Ok(_) => match migrator.migrate_page_to(self, &request, target_pfn) {
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
        if let Some(order) = order {
            if !result.success && result.migrated > 0 {
                // Sources freed onto per-CPU lists merge only in the buddy.
                self.drain_all_pages();
            }
            result.success = result.success || self.zone_has_free_block(zone_index, order);
        }
        let s = &self.stats;
        s.compact_migrate_scanned.fetch_add(result.migrate_scanned, Relaxed);
        s.compact_free_scanned.fetch_add(result.free_scanned, Relaxed);
        s.pgmigrate_success.fetch_add(result.migrated, Relaxed);
        s.pgmigrate_fail.fetch_add(result.failed, Relaxed);
        result
    }

    /// Direct compaction for a failing request of `order` on node `nid`
    /// (Linux's `try_to_compact_pages`): only for pageblock-sized and larger
    /// requests, each zone of the node until one has a block of `order`.
    /// True if any block moved.
    pub(crate) fn direct_compact_zones(&self, order: u32, nid: usize) -> bool {
        if order < self.mem.geometry.pageblock_order || self.migrator.is_none() {
            return false;
        }
        let mut moved = false;
        for zi in 0..self.zones.len() {
            if self.zones[zi].nid != nid {
                continue;
            }
            let result = self.compact_zone(zi, Some(order));
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
    fn zone_has_free_block(&self, zone_index: usize, order: u32) -> bool {
        let state = self.zones[zone_index].state.lock();
        (order..=state.area.max_order()).any(|o| state.area.nr_free(o) > 0)
    }
}

/// Whether a page with `flags` and migratetype tag `tag` heads an in-use
/// block compaction may move: allocated as movable, not owned by a layer.
fn movable_candidate(flags: PageFlags, tag: u8) -> bool {
    flags.contains(PageFlags::ALLOCATED)
        && !flags.contains(PageFlags::OWNED)
        && !flags.contains(PageFlags::HWPOISON)
        && tag == MigrateType::Movable as u8
}
