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
//! # What decides order-9 fragmentation under pressure (measured)
//!
//! Seven whole-machine traces replayed with `--memory` at 1.25× their peak
//! of live pages, from an empty start, on two CPUs (`docs/perf-log/2026-11.md`,
//! "replay — placement and compaction", has every row and the commands):
//! `gittar` (`../shared/traces`) and six recorded for this work, `configure`
//! (an autoconf `configure`), `cbuild` (`make -j2` of a C library),
//! `rustbuild` (`cargo build` of a small crate), `pytest` (CPython tests),
//! `thp` (a program churning `MADV_HUGEPAGE` regions) and `filescan`
//! (reading every small file under `/usr` and `/var`). Indices are the
//! order-9 unusable free space index, end (per-CPU lists drained) / time
//! average (per-CPU pages count as in use, as in Linux);
//! `buddy_system_allocator` (the peer: address-ordered, no migratetypes, no
//! per-CPU lists) is the bar.
//!
//! - *Linux's per-CPU lists.* `--policy linux` ends `gittar` at 0.233 /
//!   0.0123 against the peer's 0.013 / 0.0021. Without per-CPU lists the
//!   same replay ends at 0.021 / 0.006: Linux auto-tunes each list's `high`
//!   up to an eighth of the zone per CPU (1063 refills bring 267988 pages;
//!   13875 pages sit on the lists at the end), pages parked there cannot
//!   merge and come back scattered between live pages. Of the 518 free
//!   blocks of order ≥ 9 broken, 237 were for order-0 refills; fallbacks are
//!   rare (21, claiming 42 pageblocks, no steals), so no pageblock is mixed.
//! - *Placement alone cannot beat the peer.* With per-CPU lists off, every
//!   policy, grouping on or off, lands within a few percent of the peer on
//!   every trace (e.g. `cbuild` 0.383–0.400 / 0.105–0.112 against 0.386 /
//!   0.105, `configure` 0.639–0.670 against 0.639): the workloads free page
//!   cache and anonymous memory in an order unrelated to where it was put,
//!   and an address-ordered buddy is already close to what any placement
//!   that never moves a page can keep whole.
//! - *Where the unusable free space is.* At the end of five of the six new
//!   traces 94–99 % of the free pages outside order-9 blocks lie in
//!   *movable* pageblocks (`cbuild` 81796 of 84136, `rustbuild` 125871 of
//!   129688, `configure` 31805 of 33290, `thp` 390878 of 394582;
//!   `filescan` 77 %): holes a migration can fill. `gittar` is the
//!   exception: 1942 in unmovable and 545 in reclaimable pageblocks against
//!   933 in movable ones.
//! - *Compaction is what wins, and Linux's scanners waste it here.* Linux's
//!   migrate scanner starts at the bottom of the zone, which under address
//!   order (and often under list-head order) is the densest part: with
//!   proactive rounds at 1.5 % / 0.5 % marks, Linux's placement and
//!   scanners leave `cbuild` at 0.432 / 0.080 (94301 moves) and
//!   `configure` at 0.690 / 0.171, while sparsest-first evacuation
//!   (`page_alloc::evacuate`) under the same placement and lists (`lean`)
//!   reaches 0.080 / 0.015 and 0.175 / 0.053. It moves a
//!   pageblock only when denser ones have room for all of it, ranks equally
//!   used pageblocks by address (a zone of evenly used pageblocks still
//!   compacts), and reads per-pageblock free counts kept with the free lists
//!   (`PageblockFree`) instead of scanning descriptors (`cbuild`: 23 s of
//!   compaction per replay down to about 1 s for the same 727k moves).
//! - *Grouping is what lets compaction work.* With grouping off every
//!   request is unmovable and every pageblock ends up unmovable, so nothing
//!   can move: `lean --no-grouping` is Linux's `--no-grouping` (e.g.
//!   `cbuild` 0.480 / 0.079) while `lean` reaches 0.080 / 0.015.
//! - *Per-CPU list size.* Small lists (the low-watermark share, as the
//!   address-ordered policies keep them) with merge-first frees give the
//!   lowest end indices (`lean` with them, a one-off build: `gittar`
//!   0.054 / 0.0071, `configure` 0.103 / 0.053, `pytest` 0.019 / 0.019,
//!   against 0.176 / 0.012, 0.175 / 0.053 and 0.041 / 0.018 with Linux's
//!   auto-tuned lists), but they refill and spill about four times as
//!   often: the replay loop ran 14–49 % slower than Linux's (medians per
//!   trace; 579 against 373 instructions per event on `configure`).
//!   Linux's lists also halve the pages compaction moves (`cbuild` 394659
//!   against 726911: pages on the lists count as in use, so fewer rounds
//!   start) and give lower time averages on the large traces (`cbuild`
//!   0.015 against 0.022), provided a round that empties a pageblock with
//!   pages on the lists drains them (`cbuild` 0.206 / 0.044 without that
//!   drain, 0.080 / 0.015 with it). Merge-first frees with Linux's lists
//!   changed the indices by a few thousandths either way but took the zone
//!   lock on the per-CPU fast path, so `lean` leaves the lists as Linux
//!   has them.
//! - *Address order adds little once compaction runs.* With the same small
//!   lists, `two-ends` and `addr` (an address index beside the lists) end
//!   within a few thousandths of list-head order on average (better on
//!   `cbuild`, 0.049 against 0.088; worse on `configure`, 0.123 against
//!   0.103) and cost another 67 instructions per event on `configure` (the
//!   index update on every list change).
//! - *Proactive marks.* Linux's `vm.compaction_proactiveness` can go no
//!   lower than 5 % / 15 %; on these traces that leaves 0.13–0.19 at the
//!   end. Marks of 1.5 % / 0.5 % (the default of the policies other than
//!   `linux`) cost `lean` 0.3–8.3 % of the trace's allocations in moved
//!   blocks (`cbuild` 394659 moves for 4755137 allocations, `filescan`
//!   0.9 %); 1 % / 0.3 % or lower change little. With small lists, only
//!   evacuating pageblocks at most half used cut the moves by five to seven
//!   times but left `cbuild` at 0.313 / 0.071 instead of 0.088 / 0.022.
//! - *What `gittar`'s index is made of* (the replay's samples give free
//!   pages below order 9 per migratetype and live pages per mobility).
//!   Under `lean`, after the final drain, 11100 of the 62812 free pages lie
//!   outside order-9 blocks: 9622 in unmovable pageblocks (30 of them, for
//!   5738 live unmovable pages, 11.2 pageblocks' worth), 1057 in
//!   reclaimable and 421 in movable ones. 8405 of those unmovable pages
//!   were on per-CPU lists until the drain (15740 in all). The cause is the
//!   workload: 94 % of the unmovable blocks (pipe buffers,
//!   `GFP_HIGHUSER|__GFP_ACCOUNT`) are freed on the other CPU than the one
//!   that allocated them (14 % of movable ones). The freeing CPU's list
//!   grows under Linux's auto-tuned `high` (`nr_pcp_high`,
//!   mm/page_alloc.c) while the allocating CPU refills from the buddy and,
//!   when the unmovable lists run dry, claims another pageblock: 30
//!   unmovable pageblocks instead of 12. Over the replay the free pages
//!   below order 9 average 1053 unmovable, 255 movable and 252
//!   reclaimable, with 11338 pages on the lists.
//! - *No policy that keeps pageblocks pure can meet the aim on `gittar`.*
//!   With each mobility's live pages packed into whole pageblocks and one
//!   partly filled pageblock per mobility, the free pages below order 9
//!   are the sum over the three of (−live) mod 512. At the end that is
//!   406, 421 and 33: 860 of 62812 free pages, an index of 0.0137, printed
//!   0.013: the peer's figure, so at best equal. Averaged over the samples
//!   it is 0.0047 (per-CPU pages counted as free), more than twice the
//!   peer's 0.0021 (whose own floor, one partly filled pageblock, is
//!   0.0015), and above half of `--no-grouping`'s 0.0037. Only movable
//!   pages in the holes of unmovable pageblocks could go lower, which was
//!   tried: on `addr` that gave 0.021 / 0.0031, but unmovable requests then
//!   claimed new pageblocks (206 unmovable and 255 mixed at the end).
//!   Again here (a one-off build): a movable request that would break a
//!   pageblock took the smallest unmovable or reclaimable hole that fits
//!   first; `lean-movable-pcp` then ends at 0.029 / 0.0041 with 258 mixed
//!   pageblocks (116 unmovable, 144 reclaimable), `lean` at 0.111 / 0.0042
//!   with 184 unmovable ones. Compaction cannot help either: it moves only
//!   movable pages out of movable pageblocks.
//! - *Unmovable and reclaimable pages off the per-CPU lists*
//!   (`lean-movable-pcp`). Every free of such a page is then a hole that the
//!   next unmovable request fills (`__rmqueue_smallest` takes the smallest
//!   block first), so the cross-CPU frees no longer force claims: `gittar`
//!   ends at 0.021 / 0.0047 (0.176 / 0.0123 for `lean`), at the floor
//!   above on average, with 14 unmovable pageblocks at the end (12 at
//!   least) and 825 blocks moved. It costs every unmovable request and
//!   free a zone-lock hold: 737 instructions per replayed event against
//!   710 for `lean` and 671 for `linux --no-compact` (callgrind, the
//!   replay loop with its samples and compaction). Half measures do not
//!   work: unmovable frees to the buddy while their allocations still
//!   refill a list, 0.087 / 0.0118; the reverse, 0.184 / 0.0119. Not the
//!   default: it could not be measured on the six other traces, where the
//!   lists also hide short-lived kernel pages from the index (pages on a
//!   list count as in use) and where unmovable requests are as frequent
//!   (page tables, pipes of the builds).
//! - *Linux decays the lists; the replay did not.* Linux's vmstat worker
//!   shrinks each list's `high` by an eighth every second and spills at
//!   most a batch (`decay_pcp_high`, mm/page_alloc.c, from
//!   `refresh_cpu_vm_stats`, mm/vmstat.c). The replay's CPUs are pinned,
//!   which `Tuning::decay_pcp_high` skips; `PinnedCpu::decay_pcp_high`
//!   and `mmkit replay --pcp-upkeep decay` run it at every kcompactd check.
//!   On `gittar`: `lean` 0.095 / 0.0128, `linux` 0.111 / 0.0128,
//!   `lean-movable-pcp` 0.021 / 0.0049; draining the lists at every check
//!   (`--pcp-upkeep drain`) `lean` 0.103 / 0.0138. It halves the end but
//!   not the average, and changes every configuration of every trace, so
//!   it stays off by default.
//! - Earlier one-off builds on `gittar`: unmovable and reclaimable
//!   requests kept off small per-CPU lists under `two-ends` end at 0.029 /
//!   0.005, and marks down to 0.3 % / 0.1 % leave small-list `lean` at
//!   0.046 / 0.0068.
//!
//! So the default, `lean`, is Linux's placement and per-CPU lists
//! unchanged, with sparsest-first compaction at 1.5 % / 0.5 %: below the
//! peer at the end and on average on the six new traces (e.g. `cbuild`
//! 0.080 / 0.015 against 0.386 / 0.105, `configure` 0.175 / 0.053 against
//! 0.639 / 0.174), grouping at under half of no grouping there (`filescan`
//! 0.0017 against 0.0039, the others 0.36 or less), the replay loop within
//! a fifth of Linux's. On `gittar` it ends at 0.176 / 0.0123 (Linux's 0.233
//! / 0.0123, the peer's 0.013 / 0.0021); `lean-movable-pcp` reaches 0.021 /
//! 0.0047 there, as low as pure pageblocks allow on average, and `two-ends`
//! and `addr`, with small lists, 0.054 / 0.0068.
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
