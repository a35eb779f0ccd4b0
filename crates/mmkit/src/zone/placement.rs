//! Placement: which free block of a list serves a request, and the counters
//! that show where pageblock-sized free blocks get broken.
//!
//! Owns `AddrIndex`, an address-ordered index of the free blocks kept
//! beside the intrusive free lists when the map's
//! [`PlacementPolicy`](crate::types::placement::PlacementPolicy) asks for it
//! (one bitmap per (order, migratetype) with summary levels, so the lowest
//! or highest free block is found in a few word scans),
//! `PageblockFree` (free pages per pageblock, for sparsest-first
//! compaction's survey) and [`PlacementCounters`]. `buddy::FreeArea` keeps
//! them up to date; the fallback code asks it for blocks through
//! `FreeArea::pick`.
//!
//! # Why Linux's placement fragments under pressure (measured)
//!
//! Replay of `../shared/traces/gittar.trace.xz` with `--memory 1225M`
//! (1.25× its peak of 250922 live pages: 612 pageblocks, about 63000 pages
//! free at the end), from an empty start, two CPUs; the `mmkit replay`
//! report's `placement` line and `--json`'s `placement` object give the
//! counts. Indices are for order 9, final (after draining the per-CPU
//! lists) / time average; `buddy_system_allocator` gets 0.013 / 0.0021.
//!
//! - *Per-CPU lists are most of it.* `--policy linux` ends at 0.233 /
//!   0.0123, but the same replay without per-CPU lists ends at 0.021 /
//!   0.006. Linux auto-tunes each list's `high` up to an eighth of the zone
//!   per CPU (`nr_pcp_high`), refills in batches of up to 63 << 5 pages
//!   (1063 refills bring 267988 pages) and spills only past `high` (781
//!   spills, 114464 pages); at the end 13875 pages sit on the lists. Pages
//!   parked there cannot merge, and when the drain returns them they lie
//!   between live pages: almost all of the 0.233 is those pages.
//! - *Where order-9 blocks break.* 518 free blocks of order ≥ 9 are broken:
//!   by the order asked 237 for order 0 (per-CPU refills), 134 for order 6,
//!   76 for order 2, 38 for order 4, the rest scattered; by type 474
//!   movable, 32 unmovable, 12 reclaimable. Fallbacks are rare (21, claiming
//!   42 pageblocks, no steals), so grouping keeps 0 mixed pageblocks.
//! - *List head vs address order.* On this trace Linux's list head is
//!   already close to address order (the lists start sorted and splits put
//!   the upper halves at the head); address order alone changes the end
//!   state by a few blocks.
//! - *What grouping costs.* With address order and no per-CPU lists,
//!   grouping off gives exactly the peer's 0.013 / 0.002; grouping on ends
//!   at 0.021. With `two-ends` (per-CPU lists on) the 3420 free pages in
//!   blocks below order 9 at the end lie 1942 in unmovable, 545 in
//!   reclaimable and 933 in movable pageblocks: the holes short-lived
//!   unmovable pages (probably pipe buffers: `GFP_HIGHUSER|__GFP_ACCOUNT`, 110521
//!   allocations) leave in their own pageblocks are free memory no movable
//!   request may use.
//!
//! So the address-ordered policies keep per-CPU lists at their smallest
//! `high` (the low-watermark share, at least four batches; 2852 refills,
//! 1331 pages on the lists at the end) and free a block whose buddy is free
//! straight to the buddy: 0.054 / 0.0068 with grouping, 0.021 / 0.0026
//! without. Tried and dropped: letting a movable request take a hole in an
//! unmovable pageblock before breaking a free pageblock (0.021 / 0.0031,
//! but unmovable requests then claim new pageblocks for the holes they
//! lost: 206 unmovable pageblocks and 255 mixed ones at the end).
//! The list size is no free win: on a recorded Python memory-churn trace
//! (`BENCHMARKS.md`, `pyalloc`) address order with Linux's auto-tuned lists
//! ends at 0.269 / 0.130 and with the small ones at 0.406 / 0.176.
//! Compaction (`page_alloc::compaction`) barely moves these numbers: even
//! forced to run at every sample point it finds few holes in movable
//! pageblocks to move into (two-ends 0.054 / 0.006 after 138 passes),
//! because the rest of the small free blocks are in unmovable and
//! reclaimable pageblocks or on per-CPU lists.
#![deny(unsafe_code)]

use crate::mem::page::PageIdx;
use crate::types::gfp::MIGRATE_TYPES;
use alloc::vec;
use alloc::vec::Vec;

/// Where pageblock-sized free blocks were broken, and how fallbacks went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlacementCounters {
    /// Free blocks of pageblock order or more split for a smaller request,
    /// by the order requested (0..=10).
    pub pageblock_breaks_by_order: [u64; 11],
    /// The same breaks by the migratetype of the list the pieces went to.
    pub pageblock_breaks_by_type: [u64; MIGRATE_TYPES],
    /// Fallbacks that took one block of another type without claiming its
    /// pageblock (Linux's steal: the pageblock becomes mixed).
    pub steals: u64,
}

impl PlacementCounters {
    /// Books one pageblock break for a request of `order` on list `mt`.
    #[inline]
    pub(crate) fn note_break(&mut self, order: u32, mt: usize) {
        self.pageblock_breaks_by_order[(order as usize).min(10)] += 1;
        self.pageblock_breaks_by_type[mt] += 1;
    }

    /// All pageblock breaks.
    #[must_use]
    pub fn pageblock_breaks(&self) -> u64 {
        self.pageblock_breaks_by_order.iter().sum()
    }
}

/// Free pages per pageblock of one zone, kept up to date on every free
/// list change when the policy compacts sparsest-first: compaction's survey
/// reads one counter per pageblock instead of walking the free lists.
pub(crate) struct PageblockFree {
    /// Free pages per pageblock, from the zone's first pageblock.
    counts: Vec<u16>,
    /// `start >> pageblock_order`: the pageblock of `counts[0]`.
    origin: u32,
    pageblock_order: u32,
}

impl PageblockFree {
    /// Zero counts for the pageblocks touching descriptor indices
    /// `[start, end)`.
    pub(crate) fn new(start: PageIdx, end: PageIdx, pageblock_order: u32) -> Self {
        let origin = start >> pageblock_order;
        let last = end.saturating_sub(1) >> pageblock_order;
        Self { counts: vec![0; (last - origin + 1) as usize], origin, pageblock_order }
    }

    /// Books free block `idx` of `order` in (`add`) or out of the counts.
    #[inline]
    pub(crate) fn update(&mut self, idx: PageIdx, order: u32, add: bool) {
        let first = (idx >> self.pageblock_order) - self.origin;
        let (blocks, each) = if order >= self.pageblock_order {
            (1u32 << (order - self.pageblock_order), 1u16 << self.pageblock_order)
        } else {
            (1, 1u16 << order)
        };
        for pb in first..first + blocks {
            let c = &mut self.counts[pb as usize];
            *c = if add { c.wrapping_add(each) } else { c.wrapping_sub(each) };
        }
    }

    /// Free pages in the pageblock starting at descriptor index `pb_start`.
    #[inline]
    pub(crate) fn free_in(&self, pb_start: PageIdx) -> u32 {
        let pb = (pb_start >> self.pageblock_order).wrapping_sub(self.origin);
        self.counts.get(pb as usize).map_or(0, |&c| u32::from(c))
    }
}

/// Most summary levels a set needs: 64^5 positions cover any map.
const MAX_LEVELS: usize = 5;

/// Where one ordered set of positions `0..len` lives in a shared word
/// array: a bitmap (level 0) with summary levels above it (bit `i` of level
/// `l + 1` says whether word `i` of level `l` is non-zero), so the first
/// and last members are a few word reads away. One array for all sets keeps
/// the walk to dependent loads of words only.
#[derive(Clone, Copy, Debug)]
struct SetLayout {
    /// First word of each level, bottom (the bitmap) up.
    level_at: [u32; MAX_LEVELS],
    /// Levels in use; the top one has one word.
    levels: u32,
}

impl SetLayout {
    /// Lays out a set of `len` positions at word `at`; returns it and the
    /// words it takes.
    fn new(len: usize, at: usize) -> (Self, usize) {
        let mut layout = SetLayout { level_at: [0; MAX_LEVELS], levels: 0 };
        let mut words = len.div_ceil(64).max(1);
        let mut next = at;
        loop {
            layout.level_at[layout.levels as usize] = next as u32;
            layout.levels += 1;
            next += words;
            if words == 1 {
                break;
            }
            words = words.div_ceil(64);
        }
        (layout, next - at)
    }

    #[inline]
    fn insert(&self, words: &mut [u64], pos: usize) {
        let mut pos = pos;
        for l in 0..self.levels as usize {
            let word = &mut words[self.level_at[l] as usize + pos / 64];
            let was_empty = *word == 0;
            *word |= 1 << (pos % 64);
            if !was_empty {
                return;
            }
            pos /= 64;
        }
    }

    #[inline]
    fn remove(&self, words: &mut [u64], pos: usize) {
        let mut pos = pos;
        for l in 0..self.levels as usize {
            let word = &mut words[self.level_at[l] as usize + pos / 64];
            *word &= !(1 << (pos % 64));
            if *word != 0 {
                return;
            }
            pos /= 64;
        }
    }

    /// Smallest member, or with `highest` the largest.
    #[inline]
    fn extreme(&self, words: &[u64], highest: bool) -> Option<usize> {
        let mut pos = 0usize;
        for l in (0..self.levels as usize).rev() {
            let word = words[self.level_at[l] as usize + pos];
            if word == 0 {
                return None;
            }
            let bit = if highest { 63 - word.leading_zeros() } else { word.trailing_zeros() };
            pos = pos * 64 + bit as usize;
        }
        Some(pos)
    }
}

/// The free blocks of one zone by address: one ordered set per
/// (order, migratetype) over the block positions of that order.
pub(crate) struct AddrIndex {
    words: Vec<u64>,
    sets: Vec<SetLayout>,
    /// `start >> order` for each order: position 0 of that order's sets.
    origin: Vec<u32>,
}

impl AddrIndex {
    /// An empty index for blocks of orders `0..=max_order` inside
    /// descriptor indices `[start, end)`.
    pub(crate) fn new(start: PageIdx, end: PageIdx, max_order: u32) -> Self {
        let mut sets = Vec::with_capacity((max_order as usize + 1) * MIGRATE_TYPES);
        let mut origin = Vec::with_capacity(max_order as usize + 1);
        let mut words = 0usize;
        for order in 0..=max_order {
            let first = start >> order;
            let len = (end.saturating_sub(1) >> order) - first + 1;
            origin.push(first);
            for _ in 0..MIGRATE_TYPES {
                let (layout, taken) = SetLayout::new(len as usize, words);
                sets.push(layout);
                words += taken;
            }
        }
        Self { words: vec![0; words], sets, origin }
    }

    #[inline]
    fn at(&self, idx: PageIdx, order: u32) -> usize {
        ((idx >> order) - self.origin[order as usize]) as usize
    }

    /// Records free block `idx` of `order` on list `slot`.
    #[inline]
    pub(crate) fn insert(&mut self, slot: usize, idx: PageIdx, order: u32) {
        let pos = self.at(idx, order);
        self.sets[slot].insert(&mut self.words, pos);
    }

    /// Forgets free block `idx` of `order` on list `slot`.
    #[inline]
    pub(crate) fn remove(&mut self, slot: usize, idx: PageIdx, order: u32) {
        let pos = self.at(idx, order);
        self.sets[slot].remove(&mut self.words, pos);
    }

    /// Lowest (or with `highest`, highest) free block on list `slot` of
    /// `order`.
    #[inline]
    pub(crate) fn pick(&self, slot: usize, order: u32, highest: bool) -> Option<PageIdx> {
        let pos = self.sets[slot].extreme(&self.words, highest)?;
        Some((pos as u32 + self.origin[order as usize]) << order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One set of `len` positions in its own word array.
    fn set(len: usize) -> (SetLayout, Vec<u64>) {
        let (layout, words) = SetLayout::new(len, 0);
        (layout, vec![0; words])
    }

    #[test]
    fn ordered_set_finds_extremes_across_levels() {
        let (s, mut w) = set(300_000);
        assert_eq!(s.levels, 4);
        assert_eq!((s.extreme(&w, false), s.extreme(&w, true)), (None, None));
        for pos in [299_999, 5, 64, 4096, 262_143] {
            s.insert(&mut w, pos);
        }
        assert_eq!((s.extreme(&w, false), s.extreme(&w, true)), (Some(5), Some(299_999)));
        s.remove(&mut w, 5);
        assert_eq!(s.extreme(&w, false), Some(64));
        s.remove(&mut w, 299_999);
        assert_eq!(s.extreme(&w, true), Some(262_143));
        s.insert(&mut w, 64); // already there: no change
        s.remove(&mut w, 64);
        assert_eq!(s.extreme(&w, false), Some(4096));
        s.remove(&mut w, 4096);
        s.remove(&mut w, 262_143);
        assert_eq!((s.extreme(&w, false), s.extreme(&w, true)), (None, None));
        assert!(w.iter().all(|&x| x == 0), "summaries cleared too");
    }

    #[test]
    fn ordered_set_of_one_word() {
        let (s, mut w) = set(10);
        assert_eq!(s.levels, 1);
        s.insert(&mut w, 9);
        s.insert(&mut w, 0);
        assert_eq!((s.extreme(&w, false), s.extreme(&w, true)), (Some(0), Some(9)));
    }

    #[test]
    fn pageblock_counts_follow_blocks_of_every_order() {
        let mut c = PageblockFree::new(1000, 5000, 9);
        c.update(1024, 10, true);
        assert_eq!((c.free_in(1024), c.free_in(1536)), (512, 512), "an order-10 block fills two");
        c.update(1024, 10, false);
        c.update(1030, 1, true);
        c.update(1032, 3, true);
        assert_eq!((c.free_in(1024), c.free_in(1536)), (10, 0));
        c.update(1030, 1, false);
        assert_eq!(c.free_in(1024), 8);
        c.update(4999, 0, true);
        assert_eq!(c.free_in(4608), 1, "the zone's last, partial pageblock");
        assert_eq!(c.free_in(0), 0, "outside the zone");
    }

    #[test]
    fn index_maps_blocks_back_from_an_unaligned_start() {
        let mut ix = AddrIndex::new(1000, 5000, 10);
        ix.insert(3, 1024, 10);
        ix.insert(3, 4096, 10);
        assert_eq!(ix.pick(3, 10, false), Some(1024));
        assert_eq!(ix.pick(3, 10, true), Some(4096));
        ix.insert(0, 1001, 0);
        ix.insert(0, 4999, 0);
        assert_eq!(ix.pick(0, 0, false), Some(1001));
        assert_eq!(ix.pick(0, 0, true), Some(4999));
        ix.remove(0, 1001, 0);
        assert_eq!(ix.pick(0, 0, false), Some(4999));
    }
}
