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
//! # What decides order-9 fragmentation under pressure
//!
//! Measured by replaying seven whole-machine traces at 1.25× their peak of
//! live pages against `buddy_system_allocator` (`mmkit replay --compare`;
//! the rows and the commands: `docs/perf-log/2026-11.md`, "replay —
//! placement and compaction", and the findings this doc once quoted in
//! full: `docs/perf-log/2026-12-one-front-door.md`). What they showed, and
//! so why the default (`lean`) is Linux's placement and per-CPU lists
//! unchanged with sparsest-first compaction and the policy's proactive
//! marks ([`PlacementPolicy::proactive_marks`](crate::PlacementPolicy::proactive_marks)):
//! - *Placement alone cannot beat the peer.* With per-CPU lists off every
//!   policy lands near an address-ordered buddy: workloads free memory in
//!   an order unrelated to where it was put.
//! - *Pages parked on Linux's auto-tuned per-CPU lists cannot merge,* and
//!   come back scattered between live pages; smaller lists merge more but
//!   refill and spill more often, which the replay loop pays.
//! - *Most unusable free space lies in movable pageblocks:* holes a
//!   migration can fill. Compaction is what wins, and Linux's scanners
//!   start at the zone's densest part; sparsest-first evacuation
//!   (`page_alloc::evacuate`) moves a pageblock only when denser ones have
//!   room for all of it, reading per-pageblock free counts kept with the
//!   free lists (`PageblockFree`) instead of scanning descriptors. A round
//!   that empties a pageblock with pages on the lists drains them.
//! - *Grouping is what lets compaction work:* without it every pageblock
//!   ends up unmovable and nothing can move.
//! - *Address order adds little once compaction runs,* at an index update
//!   on every list change.
//! - *Where unmovable pages are freed on another CPU than the one that
//!   allocated them* (pipe buffers in `gittar`), the freeing CPU's list
//!   grows while the allocating CPU claims new pageblocks; keeping
//!   unmovable and reclaimable pages off the lists (`lean-movable-pcp`)
//!   fixes that at a zone-lock hold per such request, and is not the
//!   default for want of the other traces' measure. No policy that keeps
//!   pageblocks pure can reach the peer there: one partly filled pageblock
//!   per mobility is its floor, and compaction moves only movable pages.
//! - *Linux decays the lists* (`decay_pcp_high` from the vmstat worker);
//!   `PinnedCpu::decay_pcp_high` and `mmkit replay --pcp-upkeep` run it
//!   for pinned CPUs. It changes every configuration of every trace, so it
//!   stays off by default.
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

/// Free pages per pageblock of one zone in blocks below pageblock order,
/// kept up to date on every free list change when the policy compacts
/// sparsest-first: compaction's survey reads one counter per pageblock
/// instead of walking the free lists. A pageblock inside a larger free
/// block counts 0, as a full one does; the survey wants neither.
pub(crate) struct PageblockFree {
    /// Free pages per pageblock, from the zone's first pageblock. `u32`:
    /// a pageblock may hold 2^20 pages (`Geometry`'s limit), and one
    /// page out of a 2^17-page pageblock leaves more free pages in it than
    /// a `u16` counts.
    counts: Vec<u32>,
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
    #[inline(always)]
    pub(crate) fn update(&mut self, idx: PageIdx, order: u32, add: bool) {
        if order >= self.pageblock_order {
            return;
        }
        let pb = ((idx >> self.pageblock_order) - self.origin) as usize;
        if let Some(c) = self.counts.get_mut(pb) {
            let pages = 1u32 << order;
            *c = if add { c.wrapping_add(pages) } else { c.wrapping_sub(pages) };
        }
    }

    /// Adds `delta` pages to the count of the pageblock holding `idx`: the
    /// net change of a whole split or merge, booked once.
    #[inline(always)]
    pub(crate) fn adjust(&mut self, idx: PageIdx, delta: i32) {
        let pb = ((idx >> self.pageblock_order) - self.origin) as usize;
        if let Some(c) = self.counts.get_mut(pb) {
            *c = c.wrapping_add(delta as u32);
        }
    }

    /// Free pages in blocks below pageblock order in the pageblock starting
    /// at descriptor index `pb_start`.
    #[inline]
    pub(crate) fn free_in(&self, pb_start: PageIdx) -> u32 {
        let pb = (pb_start >> self.pageblock_order).wrapping_sub(self.origin);
        self.counts.get(pb as usize).copied().unwrap_or(0)
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
    fn pageblock_counts_follow_blocks_below_pageblock_order() {
        let mut c = PageblockFree::new(1000, 5000, 9);
        c.update(1024, 10, true);
        c.update(1536, 9, true);
        assert_eq!((c.free_in(1024), c.free_in(1536)), (0, 0), "whole free pageblocks count 0");
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
