//! Freeing: validation of caller input, references, `free_pages_prepare`,
//! bad-page reports, hardware poison, and the release of prepared pages to a
//! zone.
//!
//! "Prepare" (checks, done once per page without any lock) and "release"
//! (free-list insertion under the zone lock) are separate steps so batched
//! paths can check each page exactly once and then release whole runs.
//!
//! A page passed to a free path is first *validated*: an input mistake
//! (outside the map, a hole, a tail, double free, wrong order, a page not
//! handed out) returns a typed error and changes nothing. A page that is
//! valid input but in a bad state (flags still set, corrupt compound tails)
//! fails *preparation*: it is reported as a bad page and deliberately leaked,
//! as Linux does, because returning it could hand corrupt memory out again.
//!
//! Why these calls take a bare PFN and stay safe functions: they keep
//! Linux's contract (whoever names a plain page may drop its reference)
//! but reach only plain pages. A block that a handle owns (a layer's
//! `PageBlock`, a `PageGuard`, a frame adapter's frame, a contiguous
//! range) carries an owner tag and is refused with [`FreeError::Owned`];
//! no safe call lends a plain page's bytes. So a wrong PFN can drop
//! another PFN caller's reference, as in Linux, but reaches no owner's
//! page and no memory (`docs/architecture.md`, "Ownership of pages").
#![deny(unsafe_code)]

use crate::mem::page::{DescWord, PageFlags, PageIdx};
use crate::page_alloc::cpu::{Lists, Locked};
use crate::page_alloc::hooks::BadPageReport;
use crate::types::error::{BadPageReason, FreeError, PageError};
use crate::zone::buddy::{BuddyCtx, Placement};
use crate::zone::{Zone, ZoneState};
use crate::{PageAllocator, Pfn};
use core::sync::atomic::Ordering::Relaxed;

/// How a free path became the one caller entitled to free a block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Claim {
    /// It dropped the last reference: the refcount's 1 → 0 step already
    /// happened exactly once.
    ByRefcount,
    /// A frozen block (no references): clear `ALLOCATED` atomically to win.
    Frozen,
}

/// Bad pages a batch free found (a bulk free, a contiguous range): counted
/// and leaked at once, published to the hooks once the batch has placed
/// every other page and dropped its locks, since a hook may panic or call
/// back into the allocator.
#[derive(Default)]
pub(crate) struct BadPages(alloc::vec::Vec<BadPageReport>);

impl BadPages {
    /// Keeps a counted report for the end of the batch.
    pub(crate) fn push(&mut self, report: BadPageReport) {
        self.0.push(report);
    }
}

impl PageAllocator {
    /// Frees a block allocated with [`alloc_pages`](Self::alloc_pages)
    /// (Linux's `__free_pages`): drops one reference and, if it was the
    /// last, returns the block to the free lists. If others still hold the
    /// first page of a non-compound block, the rest of the block is freed
    /// and the first page stays allocated as an order-0 page, as in Linux.
    ///
    /// A poisoned page inside the block is dropped, never freed (counted in
    /// `hwpoison_offlined`); the rest of the block is freed.
    ///
    /// # Errors
    /// Input errors ([`FreeError::OutOfRange`], [`Hole`](FreeError::Hole),
    /// [`Reserved`](FreeError::Reserved), [`TailPage`](FreeError::TailPage),
    /// [`DoubleFree`](FreeError::DoubleFree), [`NotAllocated`](FreeError::NotAllocated),
    /// [`WrongOrder`](FreeError::WrongOrder), [`Poisoned`](FreeError::Poisoned),
    /// [`RefcountMismatch`](FreeError::RefcountMismatch) for a frozen page,
    /// [`Owned`](FreeError::Owned)) change nothing. [`FreeError::BadPage`] means the block failed
    /// `free_pages_prepare` and was reported and leaked.
    #[inline(always)]
    pub fn free_pages(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if order == 0 && self.cpu_cache().is_some_and(|mut cache| cache.give::<false>(self, pfn, false)) {
            return Ok(());
        }
        self.free_pages_uncached(pfn, order)
    }

    /// [`free_pages`](Self::free_pages) past the per-CPU cache's order-0
    /// stacks: its pageblock-order stacks, then the lists or the buddy.
    /// Out of line and small for the reasons `alloc_pages_uncached` is.
    #[inline(never)]
    fn free_pages_uncached(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if !self.pcp.enabled {
            return self.free_pages_to_buddy(pfn, order);
        }
        if order == self.mem.geometry.pageblock_order {
            return self.free_pages_block(pfn, order);
        }
        self.free_pages_to_lists(pfn, order)
    }

    /// A pageblock-order free: the per-CPU cache's block stacks, else the
    /// lists.
    #[inline(never)]
    fn free_pages_block(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if self.cpu_cache().is_some_and(|mut cache| cache.give::<true>(self, pfn, false)) {
            return Ok(());
        }
        self.free_pages_to_lists(pfn, order)
    }

    /// [`free_pages`](Self::free_pages) through the current CPU's lists.
    #[inline(never)]
    fn free_pages_to_lists(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        self.free_pages_on(&mut Locked(self.current_cpu()), pfn, order)
    }

    /// [`free_pages`](Self::free_pages) in a map without per-CPU lists:
    /// no CPU to read and the zone's release inlined. A function of its
    /// own so that the release's registers are not saved on the per-CPU
    /// list path (inlined there, they cost its pair instructions; callgrind
    /// of `pcp_probe shared` and `buddy_probe frag0`).
    #[inline(never)]
    fn free_pages_to_buddy(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if self.free_plain_block(pfn, order) {
            return Ok(());
        }
        let idx = self.validate_block(pfn, order)?;
        // Without lists the CPU picks nothing (`free_prepared_block`).
        if self.drop_block_ref(&mut Locked(0), pfn, idx, order)? {
            self.claim_and_prepare(idx, order, Claim::ByRefcount)?;
            if let Some(zi) = self.zone_index_of(idx) {
                self.release_prepared_inline(&self.zones[zi], idx, 1 << order, Placement::Auto);
            }
        }
        Ok(())
    }

    /// The common free of a map without per-CPU lists: a block of `order`
    /// with one reference and no flag but `ALLOCATED` (not compound, not
    /// poisoned, not owned) is validated, dropped and prepared by one
    /// compare-and-swap to the prepared word, as `LockedZone`'s owner frees
    /// it, instead of a reference drop and then `free_pages_prepare`'s
    /// checks and store. False, with nothing changed, for anything else
    /// (the general path then decides and reports); a poison that lands
    /// after the swap is caught by the release under the zone lock.
    #[inline(always)]
    fn free_plain_block(&self, pfn: Pfn, order: u32) -> bool {
        let Some(idx) = self.pfn_to_idx(pfn) else { return false };
        let page = self.desc(idx);
        let word = page.load_word();
        if !word.is_plain_block(order) {
            return false;
        }
        let Some(zi) = self.zone_index_of(idx) else { return false };
        #[cfg(all(test, feature = "std"))]
        crate::page_alloc::hwpoison::race_hook::run(idx);
        if !page.drop_last_reference(word, DescWord::PREPARED) {
            return false;
        }
        self.release_prepared_inline(&self.zones[zi], idx, 1 << order, Placement::Auto);
        true
    }

    /// [`free_pages`](Self::free_pages) onto `lists`.
    #[inline(always)]
    pub(crate) fn free_pages_on(&self, lists: &mut impl Lists, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        let idx = self.validate_block(pfn, order)?;
        if self.drop_block_ref(lists, pfn, idx, order)? {
            self.claim_and_free(lists, idx, order, Claim::ByRefcount)
        } else {
            Ok(())
        }
    }

    /// The reference drop of `__free_pages`: true when it was the last one
    /// (the caller frees the block). If others still hold the first page of
    /// a non-compound block (only its refcount counts), everything after it
    /// is freed here and it lives on as an order-0 page, as in Linux.
    #[inline(always)]
    pub(crate) fn drop_block_ref(
        &self,
        lists: &mut impl Lists,
        pfn: Pfn,
        idx: PageIdx,
        order: u32,
    ) -> Result<bool, FreeError> {
        let page = self.desc(idx);
        let split = order > 0 && !page.has(PageFlags::HEAD);
        let dropped = if split { page.try_put_splitting() } else { page.try_put() };
        match dropped {
            None => Err(FreeError::RefcountMismatch { pfn, refcount: 0 }),
            Some(0) => Ok(true),
            Some(_) => {
                if split {
                    // The first page is order 0 now (in the same atomic as
                    // the drop); the rest of the block is free.
                    for o in (0..order).rev() {
                        self.free_prepared_block(lists, idx + (1 << o), o);
                    }
                }
                Ok(false)
            }
        }
    }

    /// Frees a frozen block (refcount 0) of `order` (Linux's
    /// `free_frozen_pages`).
    ///
    /// # Errors
    /// As [`free_pages`](Self::free_pages); a block that still has
    /// references gets [`FreeError::RefcountMismatch`] and is left alone.
    #[inline]
    pub fn free_frozen_pages(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if order == 0 && self.cpu_cache().is_some_and(|mut cache| cache.give::<false>(self, pfn, true)) {
            return Ok(());
        }
        self.free_frozen_pages_on(&mut Locked(self.current_cpu()), pfn, order)
    }

    /// [`free_frozen_pages`](Self::free_frozen_pages) onto `lists`.
    #[inline]
    pub(crate) fn free_frozen_pages_on(&self, lists: &mut impl Lists, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        let idx = self.validate_frozen_block(pfn, order)?;
        self.claim_and_free(lists, idx, order, Claim::Frozen)
    }

    /// Checks that `pfn` starts an allocated block of `order`.
    #[inline(always)]
    pub(crate) fn validate_block(&self, pfn: Pfn, order: u32) -> Result<PageIdx, FreeError> {
        let idx = self.validate_allocated(pfn)?;
        let allocated = self.desc(idx).order();
        if allocated != order {
            return Err(FreeError::WrongOrder { pfn, allocated, given: order });
        }
        Ok(idx)
    }

    /// Checks that `pfn` starts an allocated block of `order` with no
    /// references (a frozen block).
    #[inline]
    pub(crate) fn validate_frozen_block(&self, pfn: Pfn, order: u32) -> Result<PageIdx, FreeError> {
        let idx = self.validate_block(pfn, order)?;
        let refcount = self.desc(idx).refcount();
        if refcount != 0 {
            return Err(FreeError::RefcountMismatch { pfn, refcount });
        }
        Ok(idx)
    }

    /// Drops a reference to the page or compound page containing `pfn`
    /// (a tail resolves to its head), freeing it on the last one.
    ///
    /// # Errors
    /// As [`free_pages`](Self::free_pages), except that tails are accepted.
    #[inline]
    pub fn put_page(&self, pfn: Pfn) -> Result<(), FreeError> {
        // The last reference to a plain order-0 page: the cache's free.
        if self.cpu_cache().is_some_and(|mut cache| cache.give::<false>(self, pfn, false)) {
            return Ok(());
        }
        self.put_page_on(&mut Locked(self.current_cpu()), pfn)
    }

    /// [`put_page`](Self::put_page) onto `lists`.
    #[inline]
    pub(crate) fn put_page_on(&self, lists: &mut impl Lists, pfn: Pfn) -> Result<(), FreeError> {
        let head = self.compound_head(pfn).map_err(|e| match e {
            PageError::Hole(p) => FreeError::Hole(p),
            _ => FreeError::OutOfRange(pfn),
        })?;
        let idx = self.validate_allocated(head)?;
        self.put_and_maybe_free(lists, head, idx)
    }

    /// Takes a reference to the in-use page or compound page containing
    /// `pfn`; returns the new count.
    ///
    /// # Errors
    /// [`PageError::NotInUse`] if the page is free, frozen or reserved;
    /// [`PageError::Owned`] for a block a handle owns (its references are
    /// the handle's, and a reference taken behind it could never be
    /// dropped); [`PageError::RefcountSaturated`] when one more reference
    /// would wrap the count.
    pub fn get_page(&self, pfn: Pfn) -> Result<u32, PageError> {
        let head = self.compound_head(pfn)?;
        let idx = self.pfn_to_idx(head).ok_or(PageError::OutOfRange(head))?;
        let page = self.desc(idx);
        if !page.has(PageFlags::ALLOCATED) {
            return Err(PageError::NotInUse(head));
        }
        // try_get refuses a LOCAL or OWNED page in the same compare-and-swap
        // that takes the reference; the loads here only name the error.
        page.try_get().ok_or_else(|| self.page_error_of(head, idx))
    }

    /// Why `try_get` or a flag change refused allocated page `idx`.
    #[cold]
    fn page_error_of(&self, pfn: Pfn, idx: PageIdx) -> PageError {
        let page = self.desc(idx);
        if page.has(PageFlags::LOCAL) {
            return PageError::CpuLocal(pfn);
        }
        if let Some(owner) = crate::Blocks::new(self).page_owner(pfn) {
            return PageError::Owned { pfn, owner };
        }
        if page.refcount() == u32::MAX {
            return PageError::RefcountSaturated(pfn);
        }
        PageError::NotInUse(pfn)
    }

    #[inline]
    fn put_and_maybe_free(&self, lists: &mut impl Lists, pfn: Pfn, idx: PageIdx) -> Result<(), FreeError> {
        let page = self.desc(idx);
        match page.try_put() {
            None => Err(FreeError::RefcountMismatch { pfn, refcount: 0 }),
            Some(0) => self.claim_and_free(lists, idx, page.order(), Claim::ByRefcount),
            Some(_) => Ok(()),
        }
    }

    /// Checks that `pfn` starts an allocated block; the error says what it
    /// is instead. Always inlined into the free paths, with the diagnosis
    /// of a bad PFN out of line: as a call it cost the per-CPU pair
    /// instructions (`pcp_probe lists` under callgrind).
    #[inline(always)]
    pub(crate) fn validate_allocated(&self, pfn: Pfn) -> Result<PageIdx, FreeError> {
        let idx = self.pfn_to_idx(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let flags = self.desc(idx).flags();
        if flags.intersection(PageFlags::ALLOCATED.union(PageFlags::OWNED).union(PageFlags::LOCAL))
            == PageFlags::ALLOCATED
        {
            return Ok(idx);
        }
        Err(self.not_allocated_error(pfn, idx))
    }

    /// Why `pfn` (index `idx`) does not start an allocated block.
    #[cold]
    fn not_allocated_error(&self, pfn: Pfn, idx: PageIdx) -> FreeError {
        let page = self.desc(idx);
        let flags = page.flags();
        if let Some(cpu) = page.local_cpu() {
            return FreeError::CpuLocal { pfn, cpu };
        }
        if flags.contains(PageFlags::OWNED) {
            return self.owned_error(pfn, idx);
        }
        if flags.contains(PageFlags::HOLE) {
            return FreeError::Hole(pfn);
        }
        if flags.contains(PageFlags::TAIL) {
            return FreeError::TailPage { pfn, head: self.idx_to_pfn(page.next()) };
        }
        if flags.contains(PageFlags::HWPOISON) {
            return FreeError::Poisoned(pfn);
        }
        if flags.contains(PageFlags::RESERVED) {
            return FreeError::Reserved(pfn);
        }
        if flags.intersects(PageFlags::BUDDY.union(PageFlags::PCP))
            || self.is_free(idx)
            || self.inside_block_with(idx, PageFlags::PCP)
        {
            return FreeError::DoubleFree(pfn);
        }
        FreeError::NotAllocated(pfn)
    }

    /// Whether page `idx` lies inside a free block (takes the zone lock).
    pub(crate) fn is_free(&self, idx: PageIdx) -> bool {
        let Some(zone) = self.zone_of(idx) else {
            return false;
        };
        let cx = zone.cx(&self.mem);
        let state = zone.state.lock();
        state.area.enclosing_free_block(cx, idx).is_some()
    }

    /// Claims the block for freeing (exactly one caller wins), prepares it
    /// and releases it to `lists` or its zone.
    #[inline(always)]
    pub(crate) fn claim_and_free(
        &self,
        lists: &mut impl Lists,
        idx: PageIdx,
        order: u32,
        claim: Claim,
    ) -> Result<(), FreeError> {
        self.claim_and_prepare(idx, order, claim)?;
        self.free_prepared_block(lists, idx, order);
        Ok(())
    }

    /// Makes this caller the block's only freer and runs
    /// `free_pages_prepare`; a failing block is reported and leaked.
    #[inline(always)]
    pub(crate) fn claim_and_prepare(&self, idx: PageIdx, order: u32, claim: Claim) -> Result<(), FreeError> {
        self.claim_and_prepare_then(idx, order, claim, |report| self.publish_bad_page(&report))
    }

    /// [`claim_and_prepare`](Self::claim_and_prepare) for a batch with
    /// other pages in flight: a failing block is counted and leaked, and
    /// its report waits in `bad` for the hooks until the batch is done.
    #[inline(always)]
    pub(crate) fn claim_and_prepare_into(
        &self,
        idx: PageIdx,
        order: u32,
        claim: Claim,
        bad: &mut BadPages,
    ) -> Result<(), FreeError> {
        self.claim_and_prepare_then(idx, order, claim, |report| bad.push(report))
    }

    #[inline(always)]
    fn claim_and_prepare_then(
        &self,
        idx: PageIdx,
        order: u32,
        claim: Claim,
        on_bad: impl FnOnce(BadPageReport),
    ) -> Result<(), FreeError> {
        let page = self.desc(idx);
        if claim == Claim::Frozen && !page.clear_allocated() {
            return Err(FreeError::DoubleFree(self.idx_to_pfn(idx)));
        }
        if let Err((bad, reason)) = self.free_pages_prepare(idx, order) {
            page.update_flags_atomic(PageFlags::EMPTY, PageFlags::ALLOCATED);
            on_bad(self.count_bad_page(bad, reason, 1 << order));
            return Err(FreeError::BadPage { pfn: self.idx_to_pfn(bad), reason });
        }
        Ok(())
    }

    /// Frees a prepared block: onto `lists` when its order is cached
    /// there, else (or when that list is busy) to the buddy.
    #[inline(always)]
    pub(crate) fn free_prepared_block(&self, lists: &mut impl Lists, idx: PageIdx, order: u32) {
        let Some(zi) = self.zone_index_of(idx) else {
            return;
        };
        if !self.free_to_pcp(lists, zi, idx, order) {
            self.release_prepared(&self.zones[zi], idx, 1 << order, Placement::Auto);
        }
    }

    /// Linux's `free_pages_prepare`: the head must have no references and no
    /// check-at-free flags; compound tails must point at the head. On
    /// success every descriptor of the block is clean (poison kept). On
    /// failure returns the offending page and why. The head checks are
    /// inlined (batched order-0 callers run them per page); tails are
    /// checked out of line.
    #[inline(always)]
    pub(crate) fn free_pages_prepare(&self, idx: PageIdx, order: u32) -> Result<(), (PageIdx, BadPageReason)> {
        let head = self.desc(idx);
        let flags = head.flags();
        let refcount = head.refcount();
        if refcount != 0 {
            return Err((idx, BadPageReason::NonzeroRefcount(refcount)));
        }
        // OWNED here means a free raced an owner taking the page back:
        // validation already refuses such pages, this catches the race.
        let stale = flags.intersection(PageFlags::CHECK_AT_FREE.union(PageFlags::OWNED));
        if stale != PageFlags::EMPTY {
            return Err((idx, BadPageReason::FlagsSetAtFree(stale)));
        }
        if flags.contains(PageFlags::HEAD) {
            self.free_tail_pages_prepare(idx, order)?;
        }
        #[cfg(all(test, feature = "std"))]
        crate::page_alloc::hwpoison::race_hook::run(idx);
        head.set_free_state(flags.intersection(PageFlags::HWPOISON), 0, 0);
        Ok(())
    }

    /// The compound-tail half of `free_pages_prepare`: every tail must point
    /// at the head and carry no check-at-free flag; then tails are cleared.
    fn free_tail_pages_prepare(&self, idx: PageIdx, order: u32) -> Result<(), (PageIdx, BadPageReason)> {
        for tail in idx + 1..idx + (1 << order) {
            let t = self.desc(tail);
            if !t.has(PageFlags::TAIL) || t.next() != idx {
                return Err((tail, BadPageReason::CorruptCompoundTail { tail: self.idx_to_pfn(tail) }));
            }
            let stale = t.flags().intersection(PageFlags::CHECK_AT_FREE);
            if stale != PageFlags::EMPTY {
                return Err((tail, BadPageReason::FlagsSetAtFree(stale)));
            }
        }
        for tail in idx + 1..idx + (1 << order) {
            let t = self.desc(tail);
            let keep = t.flags().intersection(PageFlags::HWPOISON);
            t.set_state(keep, 0, 0);
        }
        Ok(())
    }

    /// Counts, rate-limits, logs and publishes a bad page.
    pub(crate) fn report_bad_page(&self, idx: PageIdx, reason: BadPageReason, leaked_pages: u64) {
        let report = self.count_bad_page(idx, reason, leaked_pages);
        self.publish_bad_page(&report);
    }

    /// Counts a bad page (its pages leaked); the hooks hear of it from
    /// [`publish_bad_page`](Self::publish_bad_page).
    pub(crate) fn count_bad_page(&self, idx: PageIdx, reason: BadPageReason, leaked_pages: u64) -> BadPageReport {
        let total = self.stats.bad_pages.fetch_add(1, Relaxed) + 1;
        self.stats.bad_pages_leaked.fetch_add(leaked_pages, Relaxed);
        BadPageReport { pfn: self.idx_to_pfn(idx), reason, total }
    }

    /// Rate-limits, logs and hands a counted bad page to the hooks. The
    /// hooks are the embedder's code: callers hold no allocator lock and no
    /// page in flight (a batch publishes its reports once it is done).
    pub(crate) fn publish_bad_page(&self, report: &BadPageReport) {
        // The clock is read before the rate limit's lock: a clock that
        // re-enters a free reporting a bad page would wait on it for ever.
        let now = self.hooks.now_ns();
        let allowed = self.bad_page_log.lock().allow(now);
        if allowed {
            self.hooks.log(format_args!("BUG: Bad page state: pfn {}: {}", report.pfn, report.reason));
        } else {
            self.stats.bad_pages_suppressed.fetch_add(1, Relaxed);
        }
        self.hooks.bad_page(report);
    }

    /// Publishes the reports a batch kept (see [`BadPages`]).
    pub(crate) fn publish_bad_pages(&self, bad: BadPages) {
        for report in &bad.0 {
            self.publish_bad_page(report);
        }
    }

    /// Returns prepared pages `[idx, idx + count)` of `zone` to its free
    /// lists under one lock hold; see [`release_locked`](Self::release_locked).
    pub(crate) fn release_prepared(&self, zone: &Zone, idx: PageIdx, count: u32, placement: Placement) {
        self.release_prepared_inline(zone, idx, count, placement);
    }

    /// [`release_prepared`](Self::release_prepared), inlined.
    #[inline(always)]
    fn release_prepared_inline(&self, zone: &Zone, idx: PageIdx, count: u32, placement: Placement) {
        let cx = zone.cx(&self.mem);
        // A burst of this thread holding the zone gets the prepared pages
        // if this panics (mem::sync), so they are freed, not lost.
        let mut state = zone.state.lock_or_park(idx, count);
        // Poisoned pages never reach the lists and are not counted as freed
        // (Linux counts PGFREE only for pages free_pages_prepare accepted).
        let freed = self.release_locked(&mut state, cx, idx, count, placement);
        state.counters.pgfree_pages += freed as u64;
        zone.publish(&state);
    }

    /// Frees prepared pages `[idx, idx + count)` into the locked zone in the
    /// largest aligned chunks, skipping poisoned pages. The range must not
    /// cross a section. Always inlined: its callers are the single-block
    /// release and the batched spills, each a loop or a fast path.
    #[inline(always)]
    pub(crate) fn release_locked(
        &self,
        state: &mut ZoneState,
        cx: BuddyCtx<'_>,
        idx: PageIdx,
        count: u32,
        placement: Placement,
    ) -> u32 {
        // memory_failure makes a page pending before taking the zone lock,
        // so a page poisoned while we prepared it is seen here, even if a
        // plain store of its state word lost the flag (page_alloc::hwpoison).
        if !self.hwpoison.any() {
            if count.is_power_of_two() && idx & (count - 1) == 0 {
                state.area.free_one(cx, idx, count.trailing_zeros(), placement);
            } else {
                state.area.free_range(cx, idx, count, placement);
            }
            return count;
        }
        let mut freed = count;
        let mut run_start = idx;
        for i in idx..idx + count {
            if self.is_hwpoisoned(i) {
                if i > run_start {
                    state.area.free_range(cx, run_start, i - run_start, placement);
                }
                run_start = i + 1;
                freed -= 1;
                self.drop_poisoned(i);
            }
        }
        if idx + count > run_start {
            state.area.free_range(cx, run_start, idx + count - run_start, placement);
        }
        freed
    }

    /// Head of the compound page containing `pfn` (the page itself if it is
    /// not a tail).
    ///
    /// # Errors
    /// [`PageError::OutOfRange`] or [`PageError::Hole`].
    pub fn compound_head(&self, pfn: Pfn) -> Result<Pfn, PageError> {
        let idx = self.pfn_to_idx(pfn).ok_or(PageError::OutOfRange(pfn))?;
        let page = self.desc(idx);
        let flags = page.flags();
        if flags.contains(PageFlags::HOLE) {
            return Err(PageError::Hole(pfn));
        }
        Ok(if flags.contains(PageFlags::TAIL) { self.idx_to_pfn(page.next()) } else { pfn })
    }

    /// Reference count of the page (0 for free and frozen pages).
    ///
    /// # Errors
    /// [`PageError::OutOfRange`] or [`PageError::Hole`].
    pub fn page_count(&self, pfn: Pfn) -> Result<u32, PageError> {
        let head = self.compound_head(pfn)?;
        let idx = self.pfn_to_idx(head).ok_or(PageError::OutOfRange(head))?;
        Ok(self.desc(idx).refcount())
    }

    /// The page's flags.
    ///
    /// # Errors
    /// [`PageError::OutOfRange`].
    #[inline]
    pub fn page_flags(&self, pfn: Pfn) -> Result<PageFlags, PageError> {
        let idx = self.pfn_to_idx(pfn).ok_or(PageError::OutOfRange(pfn))?;
        Ok(self.desc(idx).flags())
    }

    /// Sets embedder-owned flags (see [`PageFlags::EMBEDDER_SETTABLE`]) on an
    /// allocated page, e.g. to say it is on an LRU list. A page freed with
    /// such a flag set is a bad page.
    ///
    /// # Errors
    /// [`PageError::FlagNotSettable`] for allocator-owned flags,
    /// [`PageError::NotInUse`] for a page that is not allocated.
    pub fn set_page_flags(&self, pfn: Pfn, flags: PageFlags) -> Result<(), PageError> {
        self.change_page_flags(pfn, flags, PageFlags::EMPTY)
    }

    /// Clears embedder-owned flags.
    ///
    /// # Errors
    /// As [`set_page_flags`](Self::set_page_flags).
    pub fn clear_page_flags(&self, pfn: Pfn, flags: PageFlags) -> Result<(), PageError> {
        self.change_page_flags(pfn, PageFlags::EMPTY, flags)
    }

    fn change_page_flags(&self, pfn: Pfn, set: PageFlags, clear: PageFlags) -> Result<(), PageError> {
        let foreign = set.union(clear).difference(PageFlags::EMBEDDER_SETTABLE);
        if foreign != PageFlags::EMPTY {
            return Err(PageError::FlagNotSettable(foreign));
        }
        let head = self.compound_head(pfn)?;
        let head_idx = self.pfn_to_idx(head).ok_or(PageError::OutOfRange(head))?;
        if !self.desc(head_idx).has(PageFlags::ALLOCATED) {
            return Err(PageError::NotInUse(pfn));
        }
        // An owned block's flags are its owner's: set behind its back, they
        // made the owner's free report a bad page and leak the block.
        if let Some(owner) = crate::Blocks::new(self).page_owner(head) {
            return Err(PageError::Owned { pfn: head, owner });
        }
        let idx = self.pfn_to_idx(pfn).ok_or(PageError::OutOfRange(pfn))?;
        // The head refuses in the same atomic update that changes it, so a
        // block adopted meanwhile (`take_back_block`) keeps clean flags.
        if !self.desc(idx).update_flags_unless_owned(set, clear) {
            return Err(self.page_error_of(pfn, idx));
        }
        Ok(())
    }

    /// Stores the embedder's private word on an allocated block's first page.
    ///
    /// # Errors
    /// [`PageError::NotInUse`] unless `pfn` starts an allocated block;
    /// [`PageError::Owned`] for a block a handle owns (its private word is
    /// its owner's).
    pub fn set_page_private(&self, pfn: Pfn, value: u64) -> Result<(), PageError> {
        let idx = self.pfn_to_idx(pfn).ok_or(PageError::OutOfRange(pfn))?;
        let page = self.desc(idx);
        if !page.has(PageFlags::ALLOCATED) {
            return Err(PageError::NotInUse(pfn));
        }
        if let Some(owner) = crate::Blocks::new(self).page_owner(pfn) {
            return Err(PageError::Owned { pfn, owner });
        }
        page.set_private(value);
        Ok(())
    }

    /// The private word of an allocated block's first page.
    ///
    /// # Errors
    /// [`PageError::NotInUse`] unless `pfn` starts an allocated block.
    pub fn page_private(&self, pfn: Pfn) -> Result<u64, PageError> {
        let idx = self.pfn_to_idx(pfn).ok_or(PageError::OutOfRange(pfn))?;
        let page = self.desc(idx);
        if !page.has(PageFlags::ALLOCATED) {
            return Err(PageError::NotInUse(pfn));
        }
        Ok(page.private())
    }
}
