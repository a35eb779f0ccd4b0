//! Per-CPU page lists ("pcp"): small caches of free blocks in front of each
//! zone, one pageset per (CPU, zone), so the common order-0 allocation and
//! free touch no shared lock.
//!
//! Owns `Pageset` (lists per (migratetype, order) for orders
//! 0..=`PAGE_ALLOC_COSTLY_ORDER` plus two pageblock-order lists, `count`,
//! `high`, `batch`), the sizing rules (`zone_batchsize`, `zone_highsize`,
//! `nr_pcp_alloc`, `nr_pcp_high`, `nr_pcp_free`) and the two bulk transfers
//! with the buddy: `rmqueue_bulk` (refill) and `free_pcppages_bulk` (spill).
//!
//! Lock order: pageset lock → zone lock. The allocator only ever *tries* a
//! pageset lock on its fast paths (on failure it goes straight to the zone);
//! drains take it blocking, which is safe because no path holds a zone lock
//! while taking a pageset lock.
//!
//! A block on a pcp list is free but not on a buddy list: its head carries
//! `PCP`, its order and its list's type; it is not counted in the zone's
//! free pages (as in Linux), which is why watermark checks see pcp pages as
//! used.
#![deny(unsafe_code)]

pub(crate) mod cpus;

use crate::mem::list::PageList;
use crate::mem::page::{Descs, PageDesc, PageFlags, PageIdx};
use crate::mem::sync::Lock;
use crate::types::gfp::MigrateType;
use crate::zone::buddy::BuddyCtx;
use crate::zone::fallback::{self, RmqueueMode, RmqueueRequest};
use crate::zone::{Zone, ZoneState};
use crate::PAGE_ALLOC_COSTLY_ORDER;

/// Lists for orders 0..=3, three pcp migratetypes each.
const NR_LOWORDER_PCP_LISTS: usize = 3 * (PAGE_ALLOC_COSTLY_ORDER as usize + 1);
/// Plus pageblock-order lists: one for movable, one for the rest.
pub(crate) const NR_PCP_LISTS: usize = NR_LOWORDER_PCP_LISTS + 2;
/// How far batches may scale up under sustained traffic (Linux's
/// `CONFIG_PCP_BATCH_SCALE_MAX`).
const PCP_BATCH_SCALE_MAX: u32 = 5;

/// Per-pageset event counters (plain integers under the pageset lock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcpCounters {
    /// Pages handed out from the lists.
    pub alloc_pages: u64,
    /// Pages freed onto the lists.
    pub free_pages: u64,
    /// Refills from the buddy (one zone-lock hold each).
    pub refills: u64,
    /// Pages brought in by refills.
    pub refill_pages: u64,
    /// Spills to the buddy (one zone-lock hold each).
    pub spills: u64,
    /// Pages returned to the buddy by spills and drains.
    pub spill_pages: u64,
}

/// Sizing of one pageset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpSizing {
    /// Blocks moved per refill or spill.
    pub batch: u32,
    /// Lower bound of `high`.
    pub high_min: u32,
    /// Upper bound of `high`.
    pub high_max: u32,
}

/// One CPU's lists for one zone. See the module doc.
pub(crate) struct PcpState {
    lists: [PageList; NR_PCP_LISTS],
    /// Pages (not blocks) on all lists.
    pub count: u32,
    pub high: u32,
    pub sizing: PcpSizing,
    /// Recent frees without allocations; grows spill batches.
    free_count: u32,
    /// Refill scale: batch << alloc_factor for order 0.
    alloc_factor: u32,
    prev_free_high_order: bool,
    pub counters: PcpCounters,
}

/// A pageset behind its own lock, padded so neighbouring CPUs never share a
/// cache line.
#[repr(align(128))]
pub(crate) struct Pageset {
    pub lock: Lock<PcpState>,
}

impl Pageset {
    pub(crate) fn new(sizing: PcpSizing) -> Self {
        Self {
            lock: Lock::new(PcpState {
                lists: [PageList::EMPTY; NR_PCP_LISTS],
                count: 0,
                high: sizing.high_min,
                sizing,
                free_count: 0,
                alloc_factor: 0,
                prev_free_high_order: false,
                counters: PcpCounters::default(),
            }),
        }
    }
}

/// Whether blocks of `order` are cached per CPU.
#[inline]
pub(crate) fn pcp_allowed_order(order: u32, pageblock_order: u32) -> bool {
    order <= PAGE_ALLOC_COSTLY_ORDER || order == pageblock_order
}

/// List index of (order, pcp migratetype); `order` must be pcp-allowed.
#[inline]
pub(crate) fn order_to_pindex(mt: MigrateType, order: u32) -> usize {
    if order <= PAGE_ALLOC_COSTLY_ORDER {
        3 * order as usize + mt as usize
    } else {
        NR_LOWORDER_PCP_LISTS + usize::from(mt == MigrateType::Movable)
    }
}

#[inline]
pub(crate) fn pindex_to_order(pindex: usize, pageblock_order: u32) -> u32 {
    if pindex < NR_LOWORDER_PCP_LISTS {
        (pindex / 3) as u32
    } else {
        pageblock_order
    }
}

/// Linux's `zone_batchsize`: about a quarter of a 1 MiB worth of pages, at
/// most 256 KiB, rounded to 2^n - 1 so batches do not alias cache colours.
pub(crate) fn zone_batchsize(managed_pages: u64, page_size: u64) -> u32 {
    let mut batch = (managed_pages >> 12).min((256 * 1024) / page_size);
    batch = batch.max(1);
    let scaled = batch + batch / 2;
    let pow = 1u64 << (63 - scaled.leading_zeros());
    (pow - 1).max(1) as u32
}

/// Linux's `zone_highsize`: the low watermark (or managed / fraction) split
/// across the CPUs, at least four batches.
pub(crate) fn zone_highsize(zone: &Zone, batch: u32, nr_cpus: usize, fraction: u32) -> u32 {
    let total = if fraction == 0 {
        zone.watermark(crate::types::gfp::Watermark::Low)
    } else {
        zone.managed_pages() / fraction as u64
    };
    let high = total / nr_cpus.max(1) as u64;
    high.max(batch as u64 * 4).min(u32::MAX as u64 / 2) as u32
}

/// Sizing for every pageset of `zone`; `fraction` is
/// `percpu_pagelist_high_fraction` (0 = auto-tune between low-watermark and
/// managed/8 shares, or with a placement policy that keeps the lists small,
/// `high` pinned at the low-watermark share).
pub(crate) fn pcp_sizing(zone: &Zone, page_size: u64, nr_cpus: usize, fraction: u32) -> PcpSizing {
    let batch = zone_batchsize(zone.managed_pages(), page_size);
    if fraction == 0 && zone.placement.keeps_pcp_small() {
        // Pages parked on per-CPU lists cannot merge; when the drain puts
        // thousands back at once they are scattered over the zone (see
        // `zone::placement`), so these policies never grow the lists.
        let high = zone_highsize(zone, batch, nr_cpus, 0);
        PcpSizing { batch, high_min: high, high_max: high }
    } else if fraction != 0 {
        let high = zone_highsize(zone, batch, nr_cpus, fraction);
        PcpSizing { batch, high_min: high, high_max: high }
    } else {
        // A large watermark_scale_factor can put the low-watermark share
        // above managed/8: Linux's clamp() then settles on the upper bound,
        // so high_min is capped at high_max here (the lists' clamp would
        // otherwise panic).
        let high_max = zone_highsize(zone, batch, nr_cpus, 8);
        PcpSizing { batch, high_min: zone_highsize(zone, batch, nr_cpus, 0).min(high_max), high_max }
    }
}

impl PcpState {
    /// Pushes block `idx` at the head of list `pindex` (hot end).
    #[inline]
    pub(crate) fn push(&mut self, pages: Descs<'_>, idx: PageIdx, order: u32, mt: MigrateType, pindex: usize) {
        let page = pages.get(idx);
        page.set_free_state(PageFlags::PCP, order, mt as u8);
        self.lists[pindex].push_head(pages, idx, page);
        self.count += 1 << order;
    }

    /// Appends block `idx` at the tail of list `pindex` (refills keep
    /// physical order this way).
    fn push_tail(&mut self, pages: Descs<'_>, idx: PageIdx, order: u32, mt: MigrateType, pindex: usize) {
        let page = pages.get(idx);
        page.set_free_state(PageFlags::PCP, order, mt as u8);
        self.lists[pindex].push_tail(pages, idx, page);
        self.count += 1 << order;
    }

    /// Pops the hottest block of list `pindex`.
    #[inline]
    pub(crate) fn pop(&mut self, pages: Descs<'_>, pindex: usize, order: u32) -> Option<PageIdx> {
        let idx = self.lists[pindex].pop_head(pages)?;
        self.count -= 1 << order;
        Some(idx)
    }

    /// Pops order-0 blocks off the hot end of list `pindex` until `take`
    /// has accepted `want` (see `PageList::pop_head_run`); returns how many
    /// it accepted.
    #[inline(always)]
    pub(crate) fn pop_run(
        &mut self,
        pages: Descs<'_>,
        pindex: usize,
        want: usize,
        take: impl FnMut(PageIdx, &PageDesc) -> bool,
    ) -> usize {
        let (taken, popped) = self.lists[pindex].pop_head_run(pages, want, take);
        self.count -= popped;
        taken
    }

    /// Pushes order-0 pages `idxs`, already marked as on list `pindex`, at
    /// its hot end in one go (see `PageList::push_head_all`).
    #[inline]
    pub(crate) fn push_run(&mut self, pages: Descs<'_>, pindex: usize, idxs: &[PageIdx]) {
        self.lists[pindex].push_head_all(pages, idxs);
        self.count += idxs.len() as u32;
    }

    /// Pops the coldest block of list `pindex`.
    fn pop_tail(&mut self, pages: Descs<'_>, pindex: usize, order: u32) -> Option<PageIdx> {
        let idx = self.lists[pindex].pop_tail(pages)?;
        self.count -= 1 << order;
        Some(idx)
    }

    /// Blocks on list `pindex`, head to tail (invariant checks).
    pub(crate) fn iter_list<'a>(&self, pages: Descs<'a>, pindex: usize) -> impl Iterator<Item = PageIdx> + 'a {
        self.lists[pindex].iter(pages)
    }

    /// Whether list `pindex` is empty.
    #[inline]
    pub(crate) fn is_empty(&self, pindex: usize) -> bool {
        self.lists[pindex].is_empty()
    }

    /// Blocks to bring in on a refill of `order` (Linux's `nr_pcp_alloc`);
    /// grows `high` and the order-0 scale factor while refills keep coming.
    pub(crate) fn nr_pcp_alloc(&mut self, order: u32, zone_below_high: bool) -> u32 {
        let PcpSizing { batch, high_min, high_max } = self.sizing;
        self.high = self.high.clamp(high_min, high_max);
        if self.high < batch {
            return 1;
        }
        let mut want = if order > 0 { batch } else { batch << self.alloc_factor };
        if high_min != high_max && !zone_below_high {
            self.high = (self.high + want).min(high_max);
        }
        if order == 0 {
            let room = (self.high as i64 - self.count as i64 - batch as i64).max(batch as i64) as u32;
            if want <= room && self.alloc_factor < PCP_BATCH_SCALE_MAX {
                self.alloc_factor += 1;
            }
            want = want.min(room);
        }
        if want > 1 {
            want = (want >> order).max(2);
        }
        want
    }

    /// After a free: decides how many pages to spill, 0 for none (Linux's
    /// `nr_pcp_high` + `nr_pcp_free`). The common case (room left, nothing
    /// to retune) stays inline; the rest is out of line.
    #[inline(always)]
    pub(crate) fn pages_to_spill(&mut self, order: u32, zone_below_high: bool) -> u32 {
        let batch = self.sizing.batch;
        self.alloc_factor >>= 1;
        // Freeing many high-order pages without allocating fragments the
        // zone: spill them sooner.
        let mut free_high = false;
        if order > 0 && order <= PAGE_ALLOC_COSTLY_ORDER {
            free_high = self.free_count >= batch + self.sizing.high_min / 2 && self.prev_free_high_order;
            self.prev_free_high_order = true;
        } else {
            self.prev_free_high_order = false;
        }
        if self.free_count < (batch << PCP_BATCH_SCALE_MAX) {
            self.free_count += 1 << order;
        }
        if !free_high && !zone_below_high && self.count < self.high {
            return 0;
        }
        self.pages_to_spill_slow(free_high, zone_below_high)
    }

    /// [`pages_to_spill`](Self::pages_to_spill) for `nr` order-0 frees at
    /// once, booked after the batch is on the list: the tuning ends where
    /// `nr` calls would leave it (`alloc_factor` halved `nr` times,
    /// `free_count` raised by `nr` up to its cap), and the spill is decided
    /// once on the final count. Linux's `free_unref_folios` runs
    /// `free_unref_page_commit` per folio; one decision per batch may spill
    /// one larger batch where that would spill twice.
    #[inline]
    pub(crate) fn pages_to_spill_batch(&mut self, nr: u32, zone_below_high: bool) -> u32 {
        if nr == 0 {
            return 0;
        }
        let cap = self.sizing.batch << PCP_BATCH_SCALE_MAX;
        self.alloc_factor = self.alloc_factor.checked_shr(nr).unwrap_or(0);
        self.prev_free_high_order = false;
        if self.free_count < cap {
            self.free_count = self.free_count.saturating_add(nr).min(cap);
        }
        if !zone_below_high && self.count < self.high {
            return 0;
        }
        self.pages_to_spill_slow(false, zone_below_high)
    }

    #[cold]
    #[inline(never)]
    fn pages_to_spill_slow(&mut self, free_high: bool, zone_below_high: bool) -> u32 {
        let PcpSizing { batch, high_min, high_max } = self.sizing;
        self.high = self.high.clamp(high_min, high_max);
        let high = if self.high == 0 {
            0
        } else if free_high {
            self.high = self.high.saturating_sub(batch << PCP_BATCH_SCALE_MAX).max(high_min);
            0
        } else if high_min == high_max {
            self.high
        } else if zone_below_high {
            let recent = self.free_count.max(batch);
            self.high = self.high.saturating_sub(recent).max(high_min);
            self.count.max(high_min)
        } else {
            if self.count >= self.high {
                let need = self.free_count + batch;
                if self.high < need {
                    self.high = need.clamp(high_min, high_max);
                }
            }
            self.high
        };
        if self.count < high {
            return 0;
        }
        if free_high {
            return self.count.min(batch << PCP_BATCH_SCALE_MAX);
        }
        if high < batch {
            return 1;
        }
        self.free_count.clamp(batch, (high - batch).max(batch))
    }

    /// Called on every pcp allocation: recent frees decay.
    #[inline]
    pub(crate) fn note_alloc(&mut self) {
        self.free_count >>= 1;
    }

    /// Linux's `decay_pcp_high`: shrinks `high` by an eighth towards
    /// `high_min`; returns pages to spill to get back under it.
    pub(crate) fn decay_high(&mut self) -> u32 {
        let PcpSizing { batch, high_min, .. } = self.sizing;
        if self.high > high_min {
            let by_count = self.count.saturating_sub(batch << PCP_BATCH_SCALE_MAX);
            self.high = by_count.max(self.high - (self.high >> 3)).max(high_min);
        }
        self.count.saturating_sub(self.high).min(batch)
    }
}

/// Refills list `pindex` with up to `count` blocks of `order` taken from the
/// buddy under one zone-lock hold (Linux's `rmqueue_bulk`). Returns blocks
/// added.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rmqueue_bulk(
    zone: &Zone,
    state: &mut ZoneState,
    cx: BuddyCtx<'_>,
    pcp: &mut PcpState,
    req: RmqueueRequest,
    count: u32,
) -> u32 {
    let RmqueueRequest { order, mt, .. } = req;
    let pindex = order_to_pindex(mt, order);
    let mut mode = RmqueueMode::Normal;
    let mut added = 0;
    while added < count {
        let Some(idx) = fallback::rmqueue(zone, state, cx, req, &mut mode) else {
            break;
        };
        pcp.push_tail(cx.pages, idx, order, mt, pindex);
        added += 1;
    }
    if added > 0 {
        pcp.counters.refills += 1;
        pcp.counters.refill_pages += (added as u64) << order;
        zone.publish(state);
    }
    added
}

/// Returns `count` pages from the pageset to the buddy under one zone-lock
/// hold, coldest first, round-robin over the lists starting with `pindex`
/// (Linux's `free_pcppages_bulk`). `release` frees one block under the lock
/// (it knows about hardware poison).
pub(crate) fn free_pcppages_bulk(
    pcp: &mut PcpState,
    pages: Descs<'_>,
    pageblock_order: u32,
    count: u32,
    pindex: usize,
    mut release: impl FnMut(PageIdx, u32),
) -> u32 {
    let mut left = count.min(pcp.count) as i64;
    let mut pindex = if pindex == 0 { NR_PCP_LISTS - 1 } else { pindex - 1 };
    let mut freed = 0u32;
    while left > 0 && pcp.count > 0 {
        loop {
            pindex = (pindex + 1) % NR_PCP_LISTS;
            if !pcp.is_empty(pindex) {
                break;
            }
        }
        let order = pindex_to_order(pindex, pageblock_order);
        while left > 0 {
            let Some(idx) = pcp.pop_tail(pages, pindex, order) else {
                break;
            };
            // Back to a prepared page: the buddy may merge it under another
            // head, so no list marking may stay behind (poison does stay, so
            // the release skips the page).
            let page = pages.get(idx);
            page.set_free_state(page.flags().intersection(PageFlags::HWPOISON), 0, 0);
            release(idx, order);
            left -= 1 << order;
            freed += 1 << order;
        }
    }
    if freed > 0 {
        pcp.counters.spills += 1;
        pcp.counters.spill_pages += freed as u64;
    }
    freed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_is_63_for_big_zones_with_4k_pages() {
        assert_eq!(zone_batchsize(1 << 20, 4096), 63);
        assert_eq!(zone_batchsize(1 << 30, 4096), 63);
        // Small zones get small batches, never zero.
        assert_eq!(zone_batchsize(4096, 4096), 1);
        assert_eq!(zone_batchsize(1 << 16, 4096), 15);
    }

    #[test]
    fn pindex_layout_matches_linux() {
        assert_eq!(order_to_pindex(MigrateType::Unmovable, 0), 0);
        assert_eq!(order_to_pindex(MigrateType::Reclaimable, 3), 11);
        assert_eq!(order_to_pindex(MigrateType::Unmovable, 9), 12);
        assert_eq!(order_to_pindex(MigrateType::Movable, 9), 13);
        assert_eq!(pindex_to_order(13, 9), 9);
        assert_eq!(pindex_to_order(7, 9), 2);
        assert!(pcp_allowed_order(3, 9) && pcp_allowed_order(9, 9) && !pcp_allowed_order(4, 9));
    }

    fn state(batch: u32, high_min: u32, high_max: u32) -> PcpState {
        let Pageset { lock } = Pageset::new(PcpSizing { batch, high_min, high_max });
        lock.into_inner()
    }

    #[test]
    fn refill_scales_up_and_high_grows() {
        let mut pcp = state(63, 252, 2000);
        let first = pcp.nr_pcp_alloc(0, false);
        let second = pcp.nr_pcp_alloc(0, false);
        assert!(second >= first, "repeated refills never shrink ({first} then {second})");
        assert!(pcp.high > 252, "high grows while the zone is above its high mark");
        assert_eq!(pcp.nr_pcp_alloc(3, false), 63 >> 3);
    }

    #[test]
    fn batch_booking_tunes_like_page_by_page() {
        for (nr, free_count, alloc_factor) in
            [(1, 0, 5), (3, 0, 5), (64, 10, 2), (64, 63 << 5, 0), (40, (63 << 5) - 7, 1)]
        {
            let mut one = state(63, 252, 4000);
            one.count = 10;
            one.free_count = free_count;
            one.alloc_factor = alloc_factor;
            one.prev_free_high_order = true;
            let mut batched = state(63, 252, 4000);
            batched.count = 10;
            batched.free_count = free_count;
            batched.alloc_factor = alloc_factor;
            batched.prev_free_high_order = true;
            for _ in 0..nr {
                assert_eq!(one.pages_to_spill(0, false), 0);
            }
            assert_eq!(batched.pages_to_spill_batch(nr, false), 0);
            assert_eq!(
                (batched.free_count, batched.alloc_factor, batched.prev_free_high_order, batched.high),
                (one.free_count, one.alloc_factor, one.prev_free_high_order, one.high),
                "{nr} frees"
            );
        }
        // Past `high` the batch spills once, at least a batch.
        let mut pcp = state(63, 252, 252);
        pcp.count = 300;
        let n = pcp.pages_to_spill_batch(64, false);
        assert!(n >= 63, "spill {n} pages");
        assert_eq!(pcp.pages_to_spill_batch(0, true), 0, "an empty batch books nothing");
    }

    #[test]
    fn spill_keeps_a_batch() {
        let mut pcp = state(63, 252, 252);
        pcp.count = 252;
        let n = pcp.pages_to_spill(0, false);
        assert!((63..=252 - 63).contains(&n), "spill {n} pages");
        pcp.count = 10;
        assert_eq!(pcp.pages_to_spill(0, false), 0);
    }
}
