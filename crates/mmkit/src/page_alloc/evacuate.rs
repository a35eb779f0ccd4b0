//! Sparsest-first compaction: empties the movable pageblocks with the fewest
//! pages in use into the holes of the fullest ones, so every move helps
//! free a whole pageblock.
//!
//! Linux's scanners (`compaction`) walk the zone from both ends: the
//! migrate scanner from the bottom, the free scanner from the top. Under an
//! address-ordered placement the bottom is where the zone is densest, so
//! they move pages out of nearly full pageblocks into the holes at the top
//! and free little. This pass instead surveys the movable pageblocks from
//! the movable free lists (free pages per pageblock, so pages in use are
//! the rest), then evacuates the sparsest pageblocks into
//! the holes of denser ones (ties broken by address), densest first, while
//! those holes last. A pageblock is only started when the denser
//! pageblocks have room for all of it, so moves are not spent on a
//! pageblock that stays in use; a pageblock that received pages is not
//! emptied in the same pass, so no page moves twice.
//!
//! Owns the survey and the choice of source and target; the moves are the
//! same as Linux's scanners make (`alloc_pages_at` for the target, then the
//! embedder's [`Migrator::migrate_page_to`](crate::Migrator::migrate_page_to)),
//! and free lists change only through those paths.
#![deny(unsafe_code)]

use crate::mem::page::{PageFlags, PageIdx};
use crate::page_alloc::compaction::{movable_candidate, CompactGoal, CompactResult};
use crate::page_alloc::migrate::{MigrateRequest, Migrator};
use crate::types::gfp::{Gfp, MigrateType};
use crate::PageAllocator;
use alloc::vec::Vec;

/// One movable pageblock as the survey found it.
#[derive(Clone, Copy, Debug)]
struct Block {
    /// First descriptor index.
    start: PageIdx,
    /// Pages in use.
    used: u32,
    /// Free pages on the buddy lists.
    free: u32,
    /// Where the next hole search starts (targets only).
    cursor: PageIdx,
    /// The smallest order a hole search found no block of (targets only):
    /// holes are only taken, never made, during a pass.
    no_hole_from: u32,
    /// Whether pages were moved into it this pass: it is never emptied in
    /// the same pass (no page moves twice).
    received: bool,
}

impl PageAllocator {
    /// Sparsest-first compaction of zone `zi` towards `goal`; see the
    /// module doc. `result` collects the counters.
    pub(crate) fn evacuate_sparse(
        &self,
        zi: usize,
        goal: CompactGoal,
        migrator: &dyn Migrator,
        result: &mut CompactResult,
    ) {
        let mut blocks = self.survey_movable_pageblocks(zi, result);
        // One order for both ends: sparsest first, and among equally used
        // pageblocks the highest address first, so that a zone of equally
        // used pageblocks still compacts towards its bottom. A pageblock
        // only ever moves pages to pageblocks ranked after it.
        let mut keyed: Vec<(u32, core::cmp::Reverse<PageIdx>, usize)> =
            blocks.iter().enumerate().map(|(i, b)| (b.used, core::cmp::Reverse(b.start), i)).collect();
        // Keys are unique (one start per pageblock), so unstable is exact.
        keyed.sort_unstable();
        let order: Vec<usize> = keyed.into_iter().map(|(_, _, i)| i).collect();
        let mut rank = alloc::vec![0usize; blocks.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        let sources: Vec<usize> = order.iter().copied().filter(|&i| blocks[i].used > 0).collect();
        // Holes only: a whole free pageblock is what compaction makes,
        // never a target.
        let targets: Vec<usize> =
            order.iter().rev().copied().filter(|&i| blocks[i].free > 0 && blocks[i].used > 0).collect();
        let mut is_source = alloc::vec![false; blocks.len()];
        let mut first_open = 0usize;
        // Whether an emptied pageblock still has pages on per-CPU lists.
        let mut parked = false;
        for &s in &sources {
            if self.compact_goal_met(zi, goal) {
                result.success = true;
                break;
            }
            if blocks[s].received {
                // Emptying it would move its new pages again.
                continue;
            }
            is_source[s] = true;
            while first_open < targets.len()
                && (blocks[targets[first_open]].free == 0 || is_source[targets[first_open]])
            {
                first_open += 1;
            }
            let open = &targets[first_open..];
            let room: u64 = open
                .iter()
                .take_while(|&&t| rank[t] > rank[s])
                .filter(|&&t| !is_source[t])
                .map(|&t| u64::from(blocks[t].free))
                .sum();
            if room < u64::from(blocks[s].used) {
                // Sparser sources came first: none after this fits either.
                break;
            }
            parked |= self.evacuate_block(s, &mut blocks, (open, &rank), &is_source, migrator, result) == Some(true);
        }
        if parked {
            // Pages of the emptied pageblocks parked on per-CPU lists merge
            // only once drained (Linux drains after direct compaction moves
            // out of an order-aligned block). Only then: a drain empties the
            // lists of every CPU, and refilling them costs.
            crate::Cpus::new(self).drain_all_pages();
        }
        if let CompactGoal::Order(_) | CompactGoal::Score(_) = goal {
            result.success = result.success || self.compact_goal_met(zi, goal);
        }
    }

    /// Moves every in-use block of source `s` into the holes of the
    /// densest targets, largest blocks first (an order-0 hole fits any
    /// page, so what cannot be placed shows before most moves are made).
    /// `None` when something in it could not move or found no hole, else
    /// whether pages of it sit on per-CPU lists.
    fn evacuate_block(
        &self,
        s: usize,
        blocks: &mut [Block],
        (targets, rank): (&[usize], &[usize]),
        is_source: &[bool],
        migrator: &dyn Migrator,
        result: &mut CompactResult,
    ) -> Option<bool> {
        let pb = 1u32 << self.mem.geometry.pageblock_order;
        let start = blocks[s].start;
        let mut parked = false;
        let nid = self.zones[self.zone_index_of(start).unwrap_or(0)].nid;
        // (order, index, compound) of every block to move.
        let mut moving: Vec<(u32, PageIdx, bool)> = Vec::new();
        let mut idx = start;
        while idx < start + pb {
            let page = self.mem.pages.get(idx);
            let flags = page.flags();
            let order = page.order().min(self.mem.geometry.pageblock_order);
            result.migrate_scanned += 1;
            if flags.contains(PageFlags::BUDDY) || flags.contains(PageFlags::PCP) {
                parked |= flags.contains(PageFlags::PCP);
                idx += 1 << order;
                continue;
            }
            if !movable_candidate(flags, page.tag()) || self.page_count(self.idx_to_pfn(idx)) != Ok(1) {
                // Pinned or changed since the survey: it would stay behind.
                return None;
            }
            moving.push((order, idx, flags.contains(PageFlags::HEAD)));
            idx += 1 << order;
        }
        moving.sort_unstable_by_key(|&(order, idx, _)| (core::cmp::Reverse(order), idx));
        for (order, idx, compound) in moving {
            let mut target = None;
            for &t in targets {
                if rank[t] <= rank[s] {
                    break;
                }
                if is_source[t] || blocks[t].free < 1 << order || order >= blocks[t].no_hole_from {
                    continue;
                }
                if let Some(at) = self.find_hole(&mut blocks[t], order, result) {
                    target = Some((t, at));
                    break;
                }
            }
            let (t, at) = target?;
            let gfp = if compound { Gfp::HIGHUSER_MOVABLE | Gfp::COMP } else { Gfp::HIGHUSER_MOVABLE };
            let target_pfn = self.idx_to_pfn(at);
            let request = MigrateRequest { pfn: self.idx_to_pfn(idx), order, gfp, nid };
            if self.alloc_pages_at(target_pfn, order, gfp).is_err() {
                result.failed += 1;
                return None;
            }
            if self.migrate_to_target(migrator, &request, target_pfn).is_err() {
                result.failed += 1;
                let _ = self.free_pages(target_pfn, order);
                return None;
            }
            result.migrated += 1;
            blocks[t].received = true;
            blocks[t].used += 1 << order;
            blocks[t].free = blocks[t].free.saturating_sub(1 << order);
            blocks[s].used = blocks[s].used.saturating_sub(1 << order);
        }
        Some(parked)
    }

    /// A free block of exactly `order` inside target `t` (the lowest part
    /// of the first free block large enough from its cursor), or `None`.
    fn find_hole(&self, t: &mut Block, order: u32, result: &mut CompactResult) -> Option<PageIdx> {
        let pb = 1u32 << self.mem.geometry.pageblock_order;
        let end = t.start + pb;
        let mut idx = t.cursor;
        // The first free block passed over for being too small: smaller
        // requests later should still find it.
        let mut first_small: Option<PageIdx> = None;
        while idx < end {
            let page = self.mem.pages.get(idx);
            result.free_scanned += 1;
            if page.has(PageFlags::BUDDY) {
                let size = 1u32 << page.order();
                if page.order() >= order {
                    t.cursor = first_small.unwrap_or(idx + (1 << order));
                    return Some(idx);
                }
                first_small.get_or_insert(idx);
                idx += size;
            } else {
                idx += 1 << page.order().min(self.mem.geometry.pageblock_order);
            }
        }
        t.cursor = first_small.unwrap_or(end);
        t.no_hole_from = t.no_hole_from.min(order);
        None
    }

    /// The movable pageblocks of zone `zi` that have free pages but are
    /// not wholly free, with their free and in-use page counts, from the
    /// zone's per-pageblock free counts (one read per pageblock under the
    /// zone lock). Pages on per-CPU lists count as in use; whether
    /// everything in use can move is checked when a pageblock is emptied.
    fn survey_movable_pageblocks(&self, zi: usize, result: &mut CompactResult) -> Vec<Block> {
        let zone = &self.zones[zi];
        let pb_order = self.mem.geometry.pageblock_order;
        let pb = 1u32 << pb_order;
        let mut out = Vec::new();
        let state = zone.state.lock();
        let Some(counts) = state.area.pageblock_free() else {
            return out;
        };
        let mut start = zone.start_idx.next_multiple_of(pb);
        while start + pb <= zone.end_idx {
            result.free_scanned += 1;
            let free = counts.free_in(start);
            if free > 0 && free < pb && self.mem.blocks.get(start) == MigrateType::Movable {
                out.push(Block {
                    start,
                    used: pb - free,
                    free,
                    cursor: start,
                    no_hole_from: pb_order,
                    received: false,
                });
            }
            start += pb;
        }
        out
    }
}
