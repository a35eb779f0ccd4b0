//! A zone held locked by a pinned CPU: the buddy allocator's owner path.
//!
//! Owns [`LockedZone`]: a [`PinnedCpu`] takes its node's preferred zone
//! for a GFP mask ([`PinnedCpu::lock_zone`]) and keeps that zone's lock
//! across calls, so that blocks of any order come straight off the free
//! lists and go straight back, with no lock taken per call and no atomic
//! read-modify-write on the blocks it hands out. It must not touch the
//! per-CPU lists or the magazine (the pinned handle's) nor decide which
//! list serves a request (`zone::fallback`'s, called here as the locked
//! allocation path calls it).
//!
//! # Why
//! A buddy alloc+free pair through the shared API pays three atomic
//! read-modify-writes: the zone lock on allocation, again on free, and the
//! reference drop. Three locked instructions among many more, they were
//! most of the time of a fragmented pair (`mmkit bench buddy`, case
//! `buddy_order0_alloc_free_fragmented`); the list work itself is a small
//! part of it. `buddy_system_allocator`, behind `&mut`, pays none.
//! Holding the lock for a burst is what Linux does where it moves many
//! blocks at once (`rmqueue_bulk`, `free_pcppages_bulk`); this hands the
//! burst to the caller.
//!
//! # The owner's pair
//! - Allocation with the mask the zone was locked for (one compare): the
//!   watermark (one compare of the zone's published free count, exact
//!   because only the holder publishes; the full check when the zone is
//!   near its marks), `fallback::rmqueue`, the counters, one store of the
//!   head's word. The block is `LOCAL` to the CPU, as the magazine's pages
//!   are (`page_alloc::cache::pinned`), and nobody else can take, drop or
//!   exchange a reference on it.
//! - Free of such a block: one load and compare of the head's word
//!   (allocated, `LOCAL` to this CPU, this order, one reference), one plain
//!   store, `free_one`. An ordinary block with one reference pays one
//!   compare-and-swap instead of the store.
//!
//! Everything else — another mask, a zone near its watermark, a block of
//! another zone, a compound or flagged block, pending hardware poison,
//! any bad input — unlocks, takes the pinned handle's general path (which
//! reports the same typed errors as everywhere) and locks again.
//!
//! # Counts and watermarks
//! Publishing the zone's free counts for the lockless checks of other CPUs
//! (five stores and the sums behind them) on every call was a large share
//! of a pair in `mmkit bench buddy` (measured by removing it), so the
//! holder publishes when its net allocations or frees since the last
//! publication pass a pageblock's pages, when it falls back, and when it
//! unlocks; Linux's per-CPU vmstat deltas leave `NR_FREE_PAGES` behind by
//! a similar margin. Its own watermark check is a budget: the usable free
//! pages above the margin every cached-order request passes, less what it
//! allocated since (frees are not credited until the next count, which
//! errs towards checking); past the budget it counts again and, near the
//! marks, runs the full `zone_watermark_ok`. So the holder stops exactly
//! where the shared path does (a test checks it).
//!
//! # Cost
//! Measured by `mmkit bench buddy` (contender `mmkit_locked_zone`, against
//! `buddy_system_allocator` and the shared API `mmkit` in the same runs),
//! cases `buddy_order0_alloc_free_fragmented`,
//! `buddy_order9_alloc_free_fragmented`, `buddy_order9_alloc_free` and
//! `buddy_order0_batch` (per page); the figures are in BENCHMARKS.md, the
//! instructions per pair or page are `examples/buddy_probe.rs
//! frag0|frag9|batch locked` under callgrind. The pair touches no atomic
//! while the zone is held. Two changes to the buddy made the difference
//! beyond the lock: `rmqueue_smallest` and `free_one` inlined into their
//! callers (the calls' register spills, not their instructions, were the
//! cost), and the exact-fit case of `rmqueue_smallest` skipping the split.
//!
//! # What holding costs others
//! While a `LockedZone` lives, every other path that needs this zone's
//! lock waits: other CPUs' refills and spills, `drain_all_pages`,
//! `memory_failure`, compaction, the invariant checker. Hold it for a
//! burst, as a spin lock: [`PinnedCpu::burst`] scopes it to a closure.
//! The holding thread allocates and frees through the `LockedZone`; a call
//! of the [`PageAllocator`](crate::PageAllocator) itself that reaches this
//! zone's lock would wait for its own thread forever, so (with `std`) it
//! panics instead, naming the mistake, and the zone is unlocked as the
//! panic unwinds (`mem::sync` records the zones a thread holds this way;
//! only a lock's wait path looks).
#![deny(unsafe_code)]

use crate::mem::page::{DescWord, PageIdx};
use crate::mem::sync::{HeldForBurst, LockGuard};
use crate::page_alloc::alloc_path::HandedTo;
use crate::page_alloc::hwpoison::PendingPoison;
use crate::page_alloc::pinned::PinnedCpu;
use crate::types::gfp::{fast_path_alloc_flags, gfp_zone, AllocFlags, Gfp, MigrateType, ZoneType};
use crate::zone::buddy::{BuddyCtx, Placement};
use crate::zone::fallback::{self, RmqueueMode, RmqueueRequest};
use crate::zone::{Zone, ZoneState};
use crate::{AllocError, FreeError, PageAllocator, Pfn};

/// One zone's free lists, held by a pinned CPU; see the module doc.
///
/// ```
/// use mmkit::{Cpus, FreeError, Gfp, MemoryMapBuilder, Report};
/// let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
/// let mut cpu0 = Cpus::new(&mm).pin_cpu(0).unwrap();
/// let mut zone = cpu0.lock_zone(Gfp::KERNEL).unwrap();
/// let block = zone.alloc_pages(Gfp::KERNEL, 9).unwrap(); // 2 MiB, no atomic
/// zone.free_pages(block, 9).unwrap();
/// let kept = zone.alloc_pages(Gfp::KERNEL, 3).unwrap();
/// drop(zone); // unlocks; `kept` stays LOCAL to CPU 0
/// assert!(matches!(mm.free_pages(kept, 3), Err(FreeError::CpuLocal { cpu: 0, .. })));
/// cpu0.free_pages(kept, 3).unwrap(); // its CPU frees it, or hands it over
/// drop(cpu0);
/// Report::new(&mm).check_invariants().unwrap();
/// ```
pub struct LockedZone<'h, 'a> {
    cpu: &'h mut PinnedCpu<'a>,
    held: Held<'a>,
    zi: usize,
    cx: BuddyCtx<'a>,
    base_pfn: u64,
    /// Copied from the pinned handle and the allocator once, so that the
    /// pair does not chase pointers to them.
    cpu_id: usize,
    hwpoison: &'a PendingPoison,
    /// The mask the fast allocation serves, and what it resolved to.
    gfp: Gfp,
    mt: MigrateType,
    flags: AllocFlags,
    highest: ZoneType,
    /// Pages the holder may still allocate before it checks the watermark
    /// again: the zone's usable free pages above the margin every request
    /// passes, less what it allocated since (its frees are not added
    /// back until the next count, which errs towards checking).
    budget: u64,
    /// Pages allocated minus pages freed since the zone's free counts
    /// were last published.
    drift: i64,
    /// How far `drift` may go either way before the counts are
    /// published again (a pageblock's pages).
    drift_limit: i64,
}

impl<'a> PinnedCpu<'a> {
    /// Runs `f` in burst mode: with the preferred zone of `gfp` on this
    /// CPU's node locked for this handle, for exactly the closure's run;
    /// see [`LockedZone`]. The scoped form of
    /// [`lock_zone`](Self::lock_zone).
    ///
    /// While `f` runs, allocate and free through the `LockedZone` it is
    /// given. A call on the map itself that needs this zone's lock would
    /// wait for this thread forever; it panics instead, naming the mistake
    /// (the zone is unlocked as the panic unwinds, and a block that call
    /// was freeing is put on the zone's free lists first, so the panic
    /// loses no page: `tests/unwind.rs`).
    ///
    /// ```
    /// use mmkit::{Cpus, Gfp, MemoryMapBuilder, Report};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
    /// let mut cpu0 = Cpus::new(&mm).pin_cpu(0).unwrap();
    /// let freed = cpu0
    ///     .burst(Gfp::KERNEL, |zone| {
    ///         let blocks: Vec<_> = (0..8).map(|_| zone.alloc_pages(Gfp::KERNEL, 4).unwrap()).collect();
    ///         blocks.into_iter().filter(|&b| zone.free_pages(b, 4).is_ok()).count()
    ///     })
    ///     .unwrap();
    /// assert_eq!(freed, 8);
    /// drop(cpu0);
    /// Report::new(&mm).check_invariants().unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`lock_zone`](Self::lock_zone); `f` does not run then.
    pub fn burst<R>(&mut self, gfp: Gfp, f: impl FnOnce(&mut LockedZone<'_, 'a>) -> R) -> Result<R, AllocError> {
        let mut zone = self.lock_zone(gfp)?;
        Ok(f(&mut zone))
    }

    /// Locks the preferred zone of `gfp` on this CPU's node for this
    /// handle until the returned guard is dropped; see [`LockedZone`] and
    /// the scoped form, [`burst`](Self::burst).
    ///
    /// # Errors
    /// [`AllocError::InvalidGfp`] for contradictory zone bits,
    /// [`AllocError::NoSuchNode`] when this CPU's node has no zone `gfp`
    /// may use.
    pub fn lock_zone(&mut self, gfp: Gfp) -> Result<LockedZone<'_, 'a>, AllocError> {
        let alloc = self.alloc;
        let highest = gfp_zone(gfp).map_err(|_| AllocError::InvalidGfp(gfp))?;
        let (zi, nofragment) = alloc.preferred_zone(self.nid, highest).ok_or(AllocError::NoSuchNode(self.nid))?;
        let zone = &alloc.zones[zi];
        if zone.nid != self.nid {
            return Err(AllocError::NoSuchNode(self.nid));
        }
        let mut locked = LockedZone {
            held: Held::lock(alloc, zone),
            zi,
            cx: zone.cx(&alloc.mem),
            base_pfn: alloc.mem.base_pfn,
            cpu_id: self.cpu,
            hwpoison: &alloc.hwpoison,
            gfp,
            mt: alloc.request_migratetype(gfp),
            flags: fast_path_alloc_flags(gfp, nofragment),
            highest,
            budget: 0,
            drift: 0,
            drift_limit: 1 << alloc.mem.geometry.pageblock_order,
            cpu: self,
        };
        locked.recount();
        Ok(locked)
    }
}

impl<'h, 'a> LockedZone<'h, 'a> {
    /// The zone's index in [`PageAllocator::zones`](crate::PageAllocator::zones).
    pub fn zone_index(&self) -> usize {
        self.zi
    }

    /// The zone held. Its published counts ([`Zone::free_pages`]) may
    /// trail the holder's work by up to a pageblock's pages; see
    /// [`nr_free_pages`](Self::nr_free_pages).
    pub fn zone(&self) -> &Zone {
        self.held.zone
    }

    /// The held zone's free pages, exact (from its free lists).
    pub fn nr_free_pages(&self) -> u64 {
        self.held.state.as_ref().map_or(0, |state| state.area.free_pages())
    }

    /// Allocates like [`PageAllocator::alloc_pages`](crate::PageAllocator::alloc_pages).
    /// With the mask the zone was locked for, from the held zone's free
    /// lists (the block is `LOCAL` to the CPU: free it here, through the
    /// pinned handle, or hand it over first); anything else takes the
    /// pinned handle's path unlocked (see the module doc).
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`](crate::PageAllocator::alloc_pages_node).
    #[inline(always)]
    pub fn alloc_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if gfp == self.gfp && order <= self.cx.max_order {
            if let Some(pfn) = self.alloc_locked(order) {
                return Ok(pfn);
            }
        }
        self.alloc_unlocked(gfp, order)
    }

    /// The owner's allocation: `None` when the zone is too low or has no
    /// block for the request (the general path then decides).
    #[inline(always)]
    fn alloc_locked(&mut self, order: u32) -> Option<Pfn> {
        let alloc = self.cpu.alloc;
        let (zone, cx) = (self.held.zone, self.cx);
        let pages = 1u64 << order;
        if pages > self.budget {
            self.recount();
        }
        let state = self.held.state.as_mut()?;
        if pages <= self.budget {
            self.budget -= pages;
        } else {
            let mark = zone.watermark(self.flags.watermark());
            if !zone.watermark_ok(state, order, mark, self.highest, self.flags) {
                return None;
            }
        }
        // The request's own lists first, as `rmqueue` would begin for a
        // mask that neither balances CMA nor reserves highatomic blocks;
        // the fallback chain only when they have nothing.
        let own = if self.flags.intersects(AllocFlags::CMA.union(AllocFlags::HIGHATOMIC)) {
            None
        } else {
            state.area.rmqueue_smallest(cx, order, self.mt)
        };
        let idx = match own {
            Some(idx) => idx,
            None => self.rmqueue_fallback(order)?,
        };
        let state = self.held.state.as_mut()?;
        state.counters.pgalloc_blocks += 1;
        state.counters.pgalloc_pages += pages;
        self.drift += pages as i64;
        if self.drift > self.drift_limit {
            self.recount();
        }
        // No hook under the zone lock: a boost wakes kswapd at the next
        // allocation outside the locked zone, before it takes a page.
        alloc.prep_new_page_for(idx, order, self.gfp, self.mt, HandedTo::Cpu(self.cpu_id));
        self.cpu.cache.0.outstanding += 1;
        Some(Pfn(self.base_pfn + u64::from(idx)))
    }

    /// `rmqueue`'s whole chain (fallback types, reserves) under the held
    /// lock.
    #[cold]
    fn rmqueue_fallback(&mut self, order: u32) -> Option<PageIdx> {
        let (zone, cx) = (self.held.zone, self.cx);
        let state = self.held.state.as_mut()?;
        let req = RmqueueRequest { order, mt: self.mt, alloc_flags: self.flags };
        let idx = fallback::rmqueue(zone, state, cx, req, &mut RmqueueMode::Normal)?;
        if self.flags.contains(AllocFlags::HIGHATOMIC) {
            fallback::reserve_highatomic_pageblock(zone, state, cx, idx, order);
        }
        Some(idx)
    }

    /// Frees like [`PageAllocator::free_pages`](crate::PageAllocator::free_pages).
    /// A block of the held zone with one reference and no flag goes
    /// straight back to its free lists (a plain store for a block `LOCAL`
    /// to this CPU); anything else takes the pinned handle's path unlocked.
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages`](crate::PageAllocator::free_pages);
    /// a block `LOCAL` to another CPU gets [`FreeError::CpuLocal`].
    #[inline(always)]
    pub fn free_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if self.free_locked(pfn, order) {
            return Ok(());
        }
        self.free_unlocked(pfn, order)
    }

    /// The owner's free: true when done, false (nothing changed) for
    /// anything but the common case.
    #[inline(always)]
    fn free_locked(&mut self, pfn: Pfn, order: u32) -> bool {
        let cx = self.cx;
        let offset = pfn.0.wrapping_sub(self.base_pfn);
        if order > cx.max_order || offset < u64::from(cx.start) || offset >= u64::from(cx.end) {
            return false;
        }
        let idx = offset as PageIdx;
        let page = cx.pages.get(idx);
        if self.hwpoison.any() {
            return false;
        }
        let word = page.load_word();
        let Some(state) = self.held.state.as_mut() else {
            return false;
        };
        if word.is_local_block(order, self.cpu_id) {
            // LOCAL to this CPU: no read-modify-write of this word can
            // succeed elsewhere (mem::page), so a plain store is the
            // page's free_pages_prepare and reference drop at once.
            #[cfg(all(test, feature = "std"))]
            crate::page_alloc::hwpoison::race_hook::run(idx);
            page.free_from_local(DescWord::PREPARED);
            self.cpu.cache.0.outstanding -= 1;
        } else if !(word.is_plain_block(order) && page.drop_last_reference(word, DescWord::PREPARED)) {
            // Anything else, or a speculative reference taken since the
            // load: the general path sorts it out.
            return false;
        }
        state.area.free_one(cx, idx, order, Placement::Auto);
        state.counters.pgfree_pages += 1 << order;
        self.drift -= 1 << order;
        if self.drift < -self.drift_limit {
            self.recount();
        }
        true
    }

    /// Publishes the zone's free counts (so other CPUs' lockless watermark
    /// checks see the holder's work) and sets the budget from them.
    #[cold]
    fn recount(&mut self) {
        let Some(state) = self.held.state.as_ref() else {
            return;
        };
        self.held.zone.publish(state);
        self.drift = 0;
        self.budget = self.held.zone.usable_above_margin();
    }

    /// Runs `f` on the pinned handle with the zone unlocked, then locks it
    /// again.
    #[cold]
    fn unlocked<T>(&mut self, f: impl FnOnce(&mut PinnedCpu<'_>) -> T) -> T {
        self.recount();
        self.held.release();
        let out = f(self.cpu);
        self.held = Held::lock(self.held.mm, self.held.zone);
        self.recount();
        out
    }

    #[cold]
    fn alloc_unlocked(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.unlocked(|cpu| cpu.alloc_pages(gfp, order))
    }

    #[cold]
    fn free_unlocked(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        self.unlocked(|cpu| cpu.free_pages(pfn, order))
    }

    /// Unlocks the zone and gives the pinned handle back (as dropping the
    /// guard does).
    pub fn unlock(self) -> &'h mut PinnedCpu<'a> {
        self.cpu
    }

    /// Makes a block this CPU handed out an ordinary one that any thread
    /// may free (see [`PinnedCpu::hand_over`]); no zone lock needed.
    ///
    /// # Errors
    /// As [`PinnedCpu::hand_over`].
    pub fn hand_over(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        self.cpu.hand_over(pfn)
    }
}

/// The zone's lock, `None` only while a fallback runs unlocked; dropping
/// it publishes the zone's free counts and unlocks. While held, the
/// thread is recorded as holding it for a burst (`mem::sync`), so that a
/// call of the allocator that needs this zone's lock panics with what went
/// wrong instead of waiting for this thread forever.
struct Held<'a> {
    state: Option<LockGuard<'a, ZoneState>>,
    burst: Option<HeldForBurst>,
    zone: &'a Zone,
    mm: &'a PageAllocator,
}

impl<'a> Held<'a> {
    fn lock(mm: &'a PageAllocator, zone: &'a Zone) -> Self {
        let state = zone.state.lock();
        Self { state: Some(state), burst: Some(HeldForBurst::new(&zone.state)), zone, mm }
    }

    /// Unlocks the zone (the caller published its counts).
    fn release(&mut self) {
        self.release_parked();
        self.state = None;
        self.burst = None;
    }

    /// Frees the pages a call on the map refused to wait for this zone
    /// with (it panicked, naming the mistake, after parking them: see
    /// `mem::sync`): the burst ends here, so they go to the free lists
    /// under the lock it still holds, and no page is lost to the panic.
    #[cold]
    fn release_parked_slow(&mut self, parked: alloc::vec::Vec<(u32, u32)>) {
        if let Some(state) = self.state.as_mut() {
            let cx = self.zone.cx(&self.mm.mem);
            for (idx, count) in parked {
                let freed = self.mm.release_locked(state, cx, idx, count, Placement::Auto);
                state.counters.pgfree_pages += u64::from(freed);
            }
            self.zone.publish(state);
        }
    }

    #[inline]
    fn release_parked(&mut self) {
        if self.state.is_some() {
            let parked = self.zone.state.take_parked();
            if !parked.is_empty() {
                self.release_parked_slow(parked);
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.release_parked();
        if let Some(state) = &self.state {
            self.zone.publish(state);
        }
    }
}
