//! The per-CPU lists, the second step of every cached order after the
//! per-CPU cache (`page_alloc::cache`): which CPU a call runs on, the one
//! path that takes from and frees to a CPU's lists, drains and the lists'
//! tuning. Handles that name a CPU and the [`Cpus`](crate::Cpus) view are
//! `cpus.rs`'s.
//!
//! Owns the glue between `PageAllocator` and `pcp`; list mechanics and
//! sizing rules are `pcp`'s, buddy edits go through the zone.
//!
//! # One list path, two ways to hold the lists
//! `Lists` says whose lists a call uses: CPU `cpu`'s behind their
//! try-lock (`Locked`: the shared API past its cache, a
//! [`CpuHandle`](crate::CpuHandle)),
//! or the ones a [`PinnedCpu`](crate::PinnedCpu) holds for its life
//! (`Held`). Everything else (the pop and its refill, the push and its
//! spill, the poison and isolation checks) is the same code for both.
//!
//! # What a hit costs
//! An order-0 allocation that hits its list is: the watermark check on
//! published counters, one compare-and-swap to try the pageset lock (none
//! when held), a pop, a release store to unlock, and the descriptor stores
//! of `prep_new_page`. A free is the validation loads, the reference drop
//! (the one atomic read-modify-write Linux semantics require), the same
//! lock try, a push and the unlock. The pair is `mmkit bench pcp`,
//! contender `mmkit_lists` (the shared API built with `cpu_caches(false)`,
//! the path where restartable sequences are unavailable); its instructions
//! are `examples/pcp_probe.rs lists` under callgrind (`docs/perf-log/`).
#![deny(unsafe_code)]

use crate::mem::page::{PageFlags, PageIdx};
use crate::mem::sync::LockGuard;
use crate::page_alloc::Tuning;
use crate::pcp::cpus::forget_cached_cpu;
use crate::pcp::cpus::{REQUEST_DRAIN, REQUEST_RESIZE};
use crate::pcp::{self, order_to_pindex, pcp_allowed_order, PcpCounters, PcpState};
use crate::types::gfp::{AllocFlags, MigrateType};
use crate::zone::fallback::RmqueueRequest;
use crate::zone::Zone;
use crate::PageAllocator;
use core::sync::atomic::Ordering::{Acquire, Relaxed};

/// Smallest non-zero `percpu_pagelist_high_fraction` Linux accepts.
pub const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u32 = 8;

/// A `percpu_pagelist_high_fraction` between 1 and 7: Linux refuses those
/// (each CPU could cache more than an eighth of a zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadHighFraction(pub u32);

impl core::fmt::Display for BadHighFraction {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "percpu_pagelist_high_fraction {} is below {MIN_PERCPU_PAGELIST_HIGH_FRACTION}", self.0)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BadHighFraction {}

/// Whose per-CPU lists a call takes from and frees to; see the module doc.
pub(crate) trait Lists {
    /// A pageset of these lists, held while it lives.
    type Pageset<'g>: core::ops::DerefMut<Target = PcpState>
    where
        Self: 'g;

    /// The CPU whose lists these are.
    fn cpu(&self) -> usize;

    /// The pageset of zone `zi`, or `None` when it cannot be had now:
    /// busy, or held by a pinned handle.
    fn get<'g>(&'g mut self, mm: &'g PageAllocator, zi: usize) -> Option<Self::Pageset<'g>>;
}

/// The lists of the CPU it names, behind their try-lock.
pub(crate) struct Locked(pub(crate) usize);

impl Lists for Locked {
    type Pageset<'g> = LockGuard<'g, PcpState>;

    #[inline(always)]
    fn cpu(&self) -> usize {
        self.0
    }

    #[inline(always)]
    fn get<'g>(&'g mut self, mm: &'g PageAllocator, zi: usize) -> Option<Self::Pageset<'g>> {
        mm.try_lock_pcp(self.0, zi)
    }
}

/// The lists a pinned handle holds for CPU `cpu`, one pageset per zone:
/// no lock to take.
pub(crate) struct Held<'l, 'a> {
    pub(crate) cpu: usize,
    pub(crate) lists: &'l mut [LockGuard<'a, PcpState>],
}

impl<'a> Lists for Held<'_, 'a> {
    type Pageset<'g>
        = &'g mut PcpState
    where
        Self: 'g;

    #[inline(always)]
    fn cpu(&self) -> usize {
        self.cpu
    }

    #[inline(always)]
    fn get<'g>(&'g mut self, _mm: &'g PageAllocator, zi: usize) -> Option<Self::Pageset<'g>> {
        self.lists.get_mut(zi).map(|pcp| &mut **pcp)
    }
}

impl PageAllocator {
    /// The calling thread's CPU, folded into the allocator's CPU count
    /// (see [`Cpus::current_cpu`]).
    #[inline]
    pub(crate) fn current_cpu(&self) -> usize {
        self.fold_cpu((self.pcp.cpu_id)())
    }

    /// The calling CPU where it decides something: with per-CPU lists
    /// (their list) or several nodes (the local node). Otherwise 0, without
    /// calling the CPU-id function, whose thread-local or rseq read a map
    /// without lists paid on every call (`buddy_probe frag0` under
    /// callgrind).
    #[inline(always)]
    pub(crate) fn cpu_if_it_matters(&self) -> usize {
        if self.pcp.enabled || self.zones.nr_nodes() > 1 {
            self.current_cpu()
        } else {
            0
        }
    }

    /// Folds a CPU number (the embedder's, or the kernel's for the per-CPU
    /// caches) onto the allocator's CPUs.
    #[inline(always)]
    pub(crate) fn fold_cpu(&self, cpu: usize) -> usize {
        if cpu < self.pcp.nr_cpus {
            cpu
        } else {
            cpu % self.pcp.nr_cpus
        }
    }

    #[inline]
    pub(crate) fn pageset(&self, cpu: usize, zone: usize) -> &crate::pcp::Pageset {
        &self.pcp.pagesets[cpu * self.zones.len() + zone]
    }

    /// Takes a block from `lists`' list for zone `zi`, refilling it from
    /// the buddy when empty (Linux's `rmqueue_pcplist`); `None` when the
    /// pageset is busy or the buddy could not refill it (the caller goes to
    /// the buddy either way).
    #[inline(always)]
    pub(crate) fn rmqueue_pcplist(
        &self,
        lists: &mut impl Lists,
        zi: usize,
        order: u32,
        mt: MigrateType,
        alloc_flags: AllocFlags,
    ) -> Option<PageIdx> {
        let mut pcp = lists.get(self, zi)?;
        self.pcp_take_locked(&mut pcp, zi, order, mt, alloc_flags)
    }

    /// Pops a block from a locked pageset of zone `zi`, refilling the list
    /// from the buddy (one zone-lock hold) when it is empty.
    #[inline(always)]
    pub(crate) fn pcp_take_locked(
        &self,
        pcp: &mut PcpState,
        zi: usize,
        order: u32,
        mt: MigrateType,
        alloc_flags: AllocFlags,
    ) -> Option<PageIdx> {
        pcp.note_alloc();
        let pindex = order_to_pindex(mt, order);
        loop {
            if let Some(idx) = pcp.pop(self.mem.pages.descs(), pindex, order) {
                if self.is_hwpoisoned(idx) {
                    // Poisoned while cached: drop it for good.
                    self.drop_poisoned(idx);
                    continue;
                }
                pcp.counters.alloc_pages += 1 << order;
                return Some(idx);
            }
            self.pcp_refill(pcp, zi, order, mt, alloc_flags)?;
        }
    }

    /// Refills a locked pageset's list for (`order`, `mt`) from the buddy
    /// under one zone-lock hold; `None` when the buddy had nothing.
    #[cold]
    pub(crate) fn pcp_refill(
        &self,
        pcp: &mut PcpState,
        zi: usize,
        order: u32,
        mt: MigrateType,
        alloc_flags: AllocFlags,
    ) -> Option<()> {
        let zone = &self.zones[zi];
        let want = pcp.nr_pcp_alloc(order, zone.below_high.load(Relaxed));
        let cx = zone.cx(&self.mem);
        let mut state = zone.state.lock();
        let added = pcp::rmqueue_bulk(zone, &mut state, cx, pcp, RmqueueRequest { order, mt, alloc_flags }, want);
        (added > 0).then_some(())
    }

    /// Puts a prepared block on `lists`' list; false when the block must
    /// go to the buddy instead (isolated pageblock, poison pending, order not
    /// cached, or the pageset is busy).
    #[inline(always)]
    pub(crate) fn free_to_pcp(&self, lists: &mut impl Lists, zi: usize, idx: PageIdx, order: u32) -> bool {
        let Some(mt) = self.pcp_list_type(idx, order) else {
            return false;
        };
        let Some(mut pcp) = lists.get(self, zi) else {
            return false;
        };
        self.pcp_free_locked(&mut pcp, zi, idx, order, mt)
    }

    /// The pcp list type a freed block would go on, or `None` when it must
    /// bypass the lists (order not cached, pageblock isolated, or not
    /// movable under a policy that caches movable pages only). Always
    /// inlined: the pageblock-order free kept it as a call, with the saved
    /// registers around it (docs/perf-log/2026-11.md, "The block free's
    /// last call").
    #[inline(always)]
    pub(crate) fn pcp_list_type(&self, idx: PageIdx, order: u32) -> Option<MigrateType> {
        if !self.pcp.enabled || !pcp_allowed_order(order, self.mem.geometry.pageblock_order) {
            return None;
        }
        match self.mem.blocks.get(idx) {
            MigrateType::Isolate => None,
            mt if mt.is_pcp_type() => (mt == MigrateType::Movable || !self.pcp.movable_only).then_some(mt),
            // CMA and highatomic pages ride on the movable list; a spill puts
            // them back on their pageblock's buddy list.
            _ => Some(MigrateType::Movable),
        }
    }

    /// Pushes a prepared block onto a locked pageset of zone `zi`, spilling
    /// to the buddy when the list grows past `high`. False (nothing done)
    /// while hardware poison is pending.
    #[inline(always)]
    pub(crate) fn pcp_free_locked(
        &self,
        pcp: &mut PcpState,
        zi: usize,
        idx: PageIdx,
        order: u32,
        mt: MigrateType,
    ) -> bool {
        // Checked under the pageset lock: memory_failure raises the count and
        // then drains every pageset, so it cannot miss this page.
        if self.hwpoison.any() {
            return false;
        }
        let zone = &self.zones[zi];
        if zone.placement.merges_before_caching() && self.buddy_is_free(zone, idx, order) {
            // The block would merge: parked on the list it would keep its
            // buddy's larger block broken until the next spill, so it goes
            // to the buddy now (the caller frees it there).
            return false;
        }
        let pindex = order_to_pindex(mt, order);
        pcp.push(self.mem.pages.descs(), idx, order, mt, pindex);
        pcp.counters.free_pages += 1 << order;
        let spill = pcp.pages_to_spill(order, zone.below_high.load(Relaxed));
        if spill > 0 {
            self.spill(zone, pcp, spill, pindex);
        }
        true
    }

    /// Returns blocks of `order` a cache took from the lists (a pinned
    /// magazine's or a per-CPU cache's: free, `PCP`, on no list) to `pcp`
    /// when given, else to the buddy.
    pub(crate) fn uncache_pages(
        &self,
        mut pcp: Option<&mut PcpState>,
        zi: usize,
        mt: MigrateType,
        order: u32,
        pages: &[PageIdx],
    ) {
        for &idx in pages {
            // Back to a prepared block, as the general free leaves it.
            let page = self.desc(idx);
            page.set_free_state(page.flags().intersection(PageFlags::HWPOISON), 0, 0);
            let listed = match pcp.as_deref_mut() {
                Some(pcp) => self.pcp_free_locked(pcp, zi, idx, order, mt),
                None => false,
            };
            if !listed {
                self.release_prepared(&self.zones[zi], idx, 1 << order, crate::zone::buddy::Placement::Auto);
            }
        }
    }

    /// Whether block `idx` of `order` has a free buddy of the same order on
    /// the buddy lists of `zone`: read without the zone lock, so only a
    /// hint (the free path merges under the lock whatever it says).
    #[inline(always)]
    fn buddy_is_free(&self, zone: &Zone, idx: PageIdx, order: u32) -> bool {
        let buddy = idx ^ (1 << order);
        if buddy < zone.start_idx || buddy >= zone.end_idx {
            return false;
        }
        let page = self.mem.pages.get(buddy);
        page.has(PageFlags::BUDDY) && page.order() == order
    }

    /// Locks CPU `cpu`'s pageset of zone `zi`, waiting for short holders;
    /// `None` if a [`PinnedCpu`](crate::PinnedCpu) owns it.
    pub(crate) fn lock_pcp_unless_pinned(
        &self,
        cpu: usize,
        zi: usize,
    ) -> Option<crate::mem::sync::LockGuard<'_, PcpState>> {
        loop {
            if let Some(guard) = self.pageset(cpu, zi).lock.try_lock() {
                return Some(guard);
            }
            if self.pcp.slots[cpu].pinned.load(Acquire) {
                return None;
            }
            crate::mem::sync::spin_wait();
        }
    }

    /// Locks CPU `cpu`'s pageset of zone `zi` if it is free. A busy pageset
    /// usually means this thread's cached CPU id is stale (it migrated and
    /// now shares a CPU's lists with the thread running there), so the
    /// cache is refreshed on the next call. A pinned pageset is not
    /// contention: its owner (or a thread that shares its CPU) goes to the
    /// buddy, and the cached id may well be right.
    #[inline]
    pub(crate) fn try_lock_pcp(&self, cpu: usize, zi: usize) -> Option<crate::mem::sync::LockGuard<'_, PcpState>> {
        let guard = self.pageset(cpu, zi).lock.try_lock();
        if guard.is_none() && !self.pcp.slots[cpu].pinned.load(Relaxed) {
            self.stats.pcp_contended.fetch_add(1, Relaxed);
            forget_cached_cpu();
        }
        guard
    }

    /// Returns `count` pages of a pageset to the buddy under one zone lock.
    pub(crate) fn spill(&self, zone: &Zone, pcp: &mut PcpState, count: u32, pindex: usize) {
        let cx = zone.cx(&self.mem);
        let mut state = zone.state.lock();
        pcp::free_pcppages_bulk(pcp, self.mem.pages.descs(), cx.pageblock_order, count, pindex, |idx, order| {
            self.release_locked(&mut state, cx, idx, 1 << order, crate::zone::buddy::Placement::Auto);
        });
        zone.publish(&state);
        if zone.below_high.load(Relaxed) {
            let high = zone.watermark(crate::types::gfp::Watermark::High);
            if zone.watermark_ok(&state, 0, high, crate::ZoneType::Movable, AllocFlags::EMPTY) {
                zone.below_high.store(false, Relaxed);
            }
        }
    }

    /// [`drain_cpu_pages`](Self::drain_cpu_pages) of a CPU that exists.
    pub(crate) fn drain_cpu_lists(&self, cpu: usize) -> bool {
        self.drain_cpu_caches(cpu);
        for zi in 0..self.zones.len() {
            let Some(mut pcp) = self.lock_pcp_unless_pinned(cpu, zi) else {
                self.pcp.slots[cpu].request(REQUEST_DRAIN);
                return false;
            };
            self.drain_locked(zi, &mut pcp);
        }
        true
    }

    /// Spills everything on a locked pageset of zone `zi`.
    pub(crate) fn drain_locked(&self, zi: usize, pcp: &mut PcpState) {
        if pcp.count > 0 {
            let count = pcp.count;
            self.spill(&self.zones[zi], pcp, count, 0);
        }
    }

    /// [`decay_pcp_high`](Self::decay_pcp_high) for one locked pageset of
    /// zone `zi`.
    pub(crate) fn decay_locked(&self, zi: usize, pcp: &mut PcpState) {
        let excess = pcp.decay_high();
        if excess > 0 {
            self.spill(&self.zones[zi], pcp, excess, 0);
        }
    }

    /// Applies the current `percpu_pagelist_high_fraction` to a locked
    /// pageset of zone `zi`, spilling what no longer fits.
    pub(crate) fn resize_locked(&self, zi: usize, pcp: &mut PcpState) {
        let zone = &self.zones[zi];
        let fraction = self.pcp.high_fraction.load(Relaxed);
        let sizing = pcp::pcp_sizing(zone, self.mem.geometry.page_size(), self.pcp.nr_cpus, fraction);
        pcp.sizing = sizing;
        pcp.high = pcp.high.clamp(sizing.high_min, sizing.high_max);
        let excess = pcp.count.saturating_sub(pcp.high);
        if excess > 0 {
            self.spill(zone, pcp, excess, 0);
        }
    }

    /// Counters summed over every pageset of zone `zi`, and its cached pages.
    pub(crate) fn pcp_totals(&self, zi: usize) -> (PcpCounters, u64) {
        let mut sum = PcpCounters::default();
        let mut pages = 0u64;
        for cpu in 0..self.pcp.nr_cpus {
            let Some(pcp) = self.lock_pcp_unless_pinned(cpu, zi) else {
                continue;
            };
            let c = pcp.counters;
            sum.alloc_pages += c.alloc_pages;
            sum.free_pages += c.free_pages;
            sum.refills += c.refills;
            sum.refill_pages += c.refill_pages;
            sum.spills += c.spills;
            sum.spill_pages += c.spill_pages;
            pages += pcp.count as u64;
        }
        (sum, pages)
    }

    /// Walks every pageset of zone `zi` under its lock (invariant checks).
    pub(crate) fn for_each_pcp(&self, zi: usize, mut f: impl FnMut(&PcpState)) {
        for cpu in 0..self.pcp.nr_cpus {
            if let Some(pcp) = self.lock_pcp_unless_pinned(cpu, zi) {
                f(&pcp);
            }
        }
    }

    /// Reserves a highatomic pageblock after a pcp allocation that asked
    /// for it (the buddy path does this under the lock it already holds).
    pub(crate) fn reserve_highatomic_after_pcp(&self, zi: usize, idx: PageIdx, order: u32) {
        let zone = &self.zones[zi];
        let cx = zone.cx(&self.mem);
        let mut state = zone.state.lock();
        crate::zone::fallback::reserve_highatomic_pageblock(zone, &mut state, cx, idx, order);
        zone.publish(&state);
    }
}

impl Tuning<'_> {
    /// Periodic decay of every pageset's `high` towards `high_min`, spilling
    /// what no longer fits (Linux runs this from the vmstat worker; call it
    /// from a timer if you want the same).
    pub fn decay_pcp_high(&self) {
        for cpu in 0..self.mm.pcp.nr_cpus {
            for zi in 0..self.mm.zones.len() {
                let Some(mut pcp) = self.mm.lock_pcp_unless_pinned(cpu, zi) else {
                    continue;
                };
                self.mm.decay_locked(zi, &mut pcp);
            }
        }
    }

    /// Sets `percpu_pagelist_high_fraction`: 0 auto-tunes `high` between a
    /// share of the low watermark and of managed/8; N ≥ 8 pins it to
    /// managed/N split across CPUs. Excess pages are spilled at once.
    ///
    /// # Errors
    /// [`BadHighFraction`] for a value between 1 and 7 (Linux's
    /// `EINVAL`); nothing changes.
    pub fn set_percpu_pagelist_high_fraction(&self, fraction: u32) -> Result<(), BadHighFraction> {
        if (1..MIN_PERCPU_PAGELIST_HIGH_FRACTION).contains(&fraction) {
            return Err(BadHighFraction(fraction));
        }
        self.mm.pcp.high_fraction.store(fraction, Relaxed);
        for cpu in 0..self.mm.pcp.nr_cpus {
            for zi in 0..self.mm.zones.len() {
                let Some(mut pcp) = self.mm.lock_pcp_unless_pinned(cpu, zi) else {
                    // Its owner re-reads the fraction at its next call.
                    self.mm.pcp.slots[cpu].request(REQUEST_RESIZE);
                    break;
                };
                self.mm.resize_locked(zi, &mut pcp);
            }
        }
        Ok(())
    }
}
