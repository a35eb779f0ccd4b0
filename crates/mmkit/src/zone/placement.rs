//! Placement: which free block of a list serves a request, and the counters
//! that show where pageblock-sized free blocks get broken.
//!
//! Owns [`AddrIndex`], an address-ordered index of the free blocks kept
//! beside the intrusive free lists when the map's
//! [`PlacementPolicy`](crate::types::placement::PlacementPolicy) asks for it
//! (one bitmap per (order, migratetype) with summary levels, so the lowest
//! or highest free block is found in a few word scans), and
//! [`PlacementCounters`]. `buddy::FreeArea` keeps both up to date; the
//! fallback code asks it for blocks through `FreeArea::pick`.
//!
//! # Why Linux's placement fragments under pressure (measured)
//!
//! Replay of `../shared/traces/gittar.trace.xz` at `--memory 1225M`
//! (1.25× its peak of 250922 live pages, 612 pageblocks), from an empty
//! start; the `mmkit replay` report's "placement" lines give these numbers:
//!
//! - *Where order-9 blocks break.* Linux's choice is the head of a free
//!   list: a block freed a moment ago (`buddy_merge_likely` sends only
//!   blocks one free away from merging to the tail). Under pressure the
//!   order-0 requests (95 % of the trace) are served from whatever
//!   pageblock last freed a page, so long-lived page cache lands in every
//!   pageblock and short-lived pages leave holes in all of them. Free
//!   pageblock-sized blocks are broken only when no smaller block of the
//!   type is left; see the report's `pageblock_breaks` counts by order and
//!   type (almost all by movable order-0 per-CPU refills).
//! - *Fallbacks.* Unmovable and reclaimable requests claim whole pageblocks
//!   (largest block first), so grouping keeps 0 mixed pageblocks, but each
//!   claimed pageblock is a partly used one whose free remainder is useless
//!   to order 9; with the list-head choice the claimed pageblocks are
//!   scattered over the zone.
//! - *Per-CPU lists.* Refills take a batch of 63 (up to 63 << 5) order-0
//!   pages at once; with the list-head choice they come from many
//!   pageblocks, and pages parked on the lists cannot merge.
//!
//! Address order fixes the first and the last: every request takes the
//! lowest (or, for [`TwoEnds`](crate::types::placement::PlacementPolicy::TwoEnds)
//! non-movable requests, the highest) free block that fits, so holes are
//! refilled before untouched memory is broken, and the untouched memory is
//! one run of whole free blocks. `TwoEnds` also keeps the claimed
//! unmovable/reclaimable pageblocks together at the top of the zone.
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

/// An ordered set of positions `0..len`: a bitmap with summary levels
/// (bit `i` of level `l + 1` says whether word `i` of level `l` is
/// non-zero), so the first and last members are a few word scans away.
#[derive(Clone, Debug)]
pub(crate) struct OrderedSet {
    /// Level 0 is the bitmap itself; the last level has one word.
    levels: Vec<Vec<u64>>,
}

impl OrderedSet {
    /// An empty set of positions `0..len`.
    pub(crate) fn new(len: usize) -> Self {
        let mut levels = Vec::new();
        let mut words = len.div_ceil(64).max(1);
        loop {
            levels.push(vec![0u64; words]);
            if words == 1 {
                break;
            }
            words = words.div_ceil(64);
        }
        Self { levels }
    }

    /// Adds `pos`.
    #[inline]
    pub(crate) fn insert(&mut self, pos: usize) {
        let mut pos = pos;
        for level in &mut self.levels {
            let word = &mut level[pos / 64];
            let was_empty = *word == 0;
            *word |= 1 << (pos % 64);
            if !was_empty {
                return;
            }
            pos /= 64;
        }
    }

    /// Removes `pos`.
    #[inline]
    pub(crate) fn remove(&mut self, pos: usize) {
        let mut pos = pos;
        for level in &mut self.levels {
            let word = &mut level[pos / 64];
            *word &= !(1 << (pos % 64));
            if *word != 0 {
                return;
            }
            pos /= 64;
        }
    }

    /// Smallest member.
    #[inline]
    pub(crate) fn first(&self) -> Option<usize> {
        let mut pos = 0usize;
        for level in self.levels.iter().rev() {
            let word = level[pos];
            if word == 0 {
                return None;
            }
            pos = pos * 64 + word.trailing_zeros() as usize;
        }
        Some(pos)
    }

    /// Largest member.
    #[inline]
    pub(crate) fn last(&self) -> Option<usize> {
        let mut pos = 0usize;
        for level in self.levels.iter().rev() {
            let word = level[pos];
            if word == 0 {
                return None;
            }
            pos = pos * 64 + 63 - word.leading_zeros() as usize;
        }
        Some(pos)
    }
}

/// The free blocks of one zone by address: one [`OrderedSet`] per
/// (order, migratetype) over the block positions of that order.
pub(crate) struct AddrIndex {
    sets: Vec<OrderedSet>,
    /// `start >> order` for each order: position 0 of that order's sets.
    origin: Vec<u32>,
}

impl AddrIndex {
    /// An empty index for blocks of orders `0..=max_order` inside
    /// descriptor indices `[start, end)`.
    pub(crate) fn new(start: PageIdx, end: PageIdx, max_order: u32) -> Self {
        let mut sets = Vec::with_capacity((max_order as usize + 1) * MIGRATE_TYPES);
        let mut origin = Vec::with_capacity(max_order as usize + 1);
        for order in 0..=max_order {
            let first = start >> order;
            let len = (end.saturating_sub(1) >> order) - first + 1;
            origin.push(first);
            for _ in 0..MIGRATE_TYPES {
                sets.push(OrderedSet::new(len as usize));
            }
        }
        Self { sets, origin }
    }

    #[inline]
    fn at(&self, idx: PageIdx, order: u32) -> usize {
        ((idx >> order) - self.origin[order as usize]) as usize
    }

    /// Records free block `idx` of `order` on list `slot`.
    #[inline]
    pub(crate) fn insert(&mut self, slot: usize, idx: PageIdx, order: u32) {
        let pos = self.at(idx, order);
        self.sets[slot].insert(pos);
    }

    /// Forgets free block `idx` of `order` on list `slot`.
    #[inline]
    pub(crate) fn remove(&mut self, slot: usize, idx: PageIdx, order: u32) {
        let pos = self.at(idx, order);
        self.sets[slot].remove(pos);
    }

    /// Lowest (or with `highest`, highest) free block on list `slot` of
    /// `order`.
    #[inline]
    pub(crate) fn pick(&self, slot: usize, order: u32, highest: bool) -> Option<PageIdx> {
        let set = &self.sets[slot];
        let pos = if highest { set.last() } else { set.first() }?;
        Some((pos as u32 + self.origin[order as usize]) << order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_set_finds_extremes_across_levels() {
        let mut s = OrderedSet::new(300_000);
        assert_eq!((s.first(), s.last()), (None, None));
        for pos in [299_999, 5, 64, 4096, 262_143] {
            s.insert(pos);
        }
        assert_eq!((s.first(), s.last()), (Some(5), Some(299_999)));
        s.remove(5);
        assert_eq!(s.first(), Some(64));
        s.remove(299_999);
        assert_eq!(s.last(), Some(262_143));
        s.insert(64); // already there: no change
        s.remove(64);
        assert_eq!(s.first(), Some(4096));
        s.remove(4096);
        s.remove(262_143);
        assert_eq!((s.first(), s.last()), (None, None));
    }

    #[test]
    fn ordered_set_of_one_word() {
        let mut s = OrderedSet::new(10);
        s.insert(9);
        s.insert(0);
        assert_eq!((s.first(), s.last()), (Some(0), Some(9)));
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
