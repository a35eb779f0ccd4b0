//! Freeing a PFN range of order-0 pages in batches (Linux's
//! `free_contig_range`, `free_contig_frozen_range` and their shared helper).
//!
//! Owns the batching: every page is prepared once (`free_pages_prepare`,
//! after dropping its reference unless frozen; for a plain order-0 page,
//! the claim and the free state are one compare-and-swap of its
//! descriptor's word, which cut the batched free of 16384 pages by about
//! two fifths (`mmkit bench contig`, `free_contig_range/batched`) — that
//! compare-and-swap, one atomic read-modify-write per page, is most of what
//! is left, and an owned `ContigRange` avoids it (case
//! `free_contig_range/owned`)); consecutive prepared pages form a run; a
//! page that fails preparation (bad page, hardware poison) or is still
//! referenced ends the run and is not freed, and so does a section or zone
//! boundary; each run is released as its largest naturally aligned
//! power-of-two chunks, each through `free_prepared_block` so that no page
//! is checked twice. The result equals freeing every page on its own with
//! `free_pages(pfn, 0)` (or `free_frozen_pages`), which the property tests
//! check, at a fraction of the cost: one zone-lock hold per chunk instead
//! of one per page, and no merging work for pages that arrive already
//! merged.
//!
//! It edits no list itself (that is `free_prepared_block` → zone → buddy).
//! The "frozen" choice is a flag of the internal helper only; the public API
//! has one function per variant, as the review of Linux's batched `free_contig_frozen_range` change asked.
#![deny(unsafe_code)]

use crate::contig::Contig;
use crate::mem::page::{DescWord, PageFlags, PageIdx};
use crate::page_alloc::cpu::Locked;
use crate::page_alloc::free::{BadPages, Claim};
use crate::types::error::FreeError;
use crate::zone::buddy::chunk_order;
use crate::zone::Zone;
use crate::Pfn;

/// What [`free_contig_range`](Contig::free_contig_range) did with the
/// pages of its range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContigFreeSummary {
    /// Pages returned to the free lists.
    pub freed: u64,
    /// Pages whose reference was dropped but that are still referenced by
    /// someone else; the last [`put_page`](crate::PageAllocator::put_page) frees
    /// them (non-frozen variant only).
    pub still_in_use: u64,
    /// Pages that failed `free_pages_prepare`: reported as bad pages and
    /// leaked.
    pub bad: u64,
    /// Hardware-poisoned pages, taken out of service instead of freed.
    pub hwpoisoned: u64,
}

impl Contig<'_> {
    /// Frees `nr_pages` order-0 pages starting at `pfn`, as handed out by
    /// [`alloc_contig_range`](Self::alloc_contig_range) (Linux's
    /// `free_contig_range`). Each page loses one reference; pages that
    /// reach zero are checked once and freed in the largest aligned chunks
    /// the range allows.
    ///
    /// A page that still has references after the drop is left to its last
    /// user, as Linux does (counted in
    /// [`still_in_use`](ContigFreeSummary::still_in_use)). A page that fails
    /// the free-time checks is reported as a bad page and leaked; a
    /// hardware-poisoned page is taken out of service (stats
    /// `hwpoison_offlined`). Neither is freed; the rest of the range is. A
    /// page a layer owns is left to it (counted in `still_in_use`); an
    /// owned range is freed with [`free_contig_block`](Self::free_contig_block).
    ///
    /// # Errors
    /// The whole range is validated before anything changes: a page outside
    /// the map ([`FreeError::OutOfRange`]), a page that does not start an
    /// allocated block ([`Hole`](FreeError::Hole), [`Reserved`](FreeError::Reserved),
    /// [`TailPage`](FreeError::TailPage), [`DoubleFree`](FreeError::DoubleFree),
    /// [`NotAllocated`](FreeError::NotAllocated), [`Poisoned`](FreeError::Poisoned)),
    /// a block of higher order ([`WrongOrder`](FreeError::WrongOrder): free
    /// a compound page with [`free_pages`](crate::PageAllocator::free_pages)) or a frozen
    /// page ([`RefcountMismatch`](FreeError::RefcountMismatch)) fails the
    /// call with nothing freed.
    pub fn free_contig_range(&self, pfn: Pfn, nr_pages: u64) -> Result<ContigFreeSummary, FreeError> {
        self.free_contig_range_common(pfn, nr_pages, false)
    }

    /// Frees `nr_pages` frozen (refcount 0) order-0 pages starting at `pfn`,
    /// as handed out by
    /// [`alloc_contig_frozen_range`](Self::alloc_contig_frozen_range)
    /// (Linux's `free_contig_frozen_range`). Otherwise as
    /// [`free_contig_range`](Self::free_contig_range).
    ///
    /// # Errors
    /// As [`free_contig_range`](Self::free_contig_range); a page with
    /// references gets [`FreeError::RefcountMismatch`].
    pub fn free_contig_frozen_range(&self, pfn: Pfn, nr_pages: u64) -> Result<ContigFreeSummary, FreeError> {
        self.free_contig_range_common(pfn, nr_pages, true)
    }

    /// The shared helper (Linux's `__free_contig_range_common`).
    fn free_contig_range_common(&self, pfn: Pfn, nr_pages: u64, frozen: bool) -> Result<ContigFreeSummary, FreeError> {
        if nr_pages == 0 {
            return Ok(ContigFreeSummary::default());
        }
        let start = self.mm.pfn_to_idx(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let last = Pfn(pfn.0.saturating_add(nr_pages - 1));
        let end = self.mm.pfn_to_idx(last).ok_or(FreeError::OutOfRange(last))? + 1;
        self.validate_contig_pages(start, end, frozen)?;
        Ok(self.free_contig_pages(start, end, |idx, summary, bad| self.prepare_contig_page(idx, frozen, summary, bad)))
    }

    /// Input checks for every page, before any is touched: a tight scan for
    /// the first page that is not an allocated order-0 page with the right
    /// refcount, then the precise error for it.
    fn validate_contig_pages(&self, start: PageIdx, end: PageIdx, frozen: bool) -> Result<(), FreeError> {
        let first_bad = self.mm.mem.pages.slice(start, end).iter().position(|page| {
            let (flags, order) = page.flags_and_order();
            flags.intersection(PageFlags::ALLOCATED.union(PageFlags::OWNED)) != PageFlags::ALLOCATED
                || order != 0
                || (page.refcount() == 0) != frozen
        });
        let Some(offset) = first_bad else {
            return Ok(());
        };
        let idx = start + offset as PageIdx;
        let page = self.mm.desc(idx);
        let pfn = self.mm.idx_to_pfn(idx);
        let (flags, order) = page.flags_and_order();
        // An owned page first: whatever else is wrong with it, it is not the
        // caller's (a contiguous range's pages are frozen order-0 pages, and
        // a frozen free of them must not pass for theirs).
        if !flags.contains(PageFlags::ALLOCATED) || flags.contains(PageFlags::OWNED) {
            return Err(self.mm.validate_allocated(pfn).err().unwrap_or(FreeError::NotAllocated(pfn)));
        }
        if order != 0 {
            return Err(FreeError::WrongOrder { pfn, allocated: order, given: 0 });
        }
        Err(FreeError::RefcountMismatch { pfn, refcount: page.refcount() })
    }

    /// Prepares each page of `[start, end)` with `prepare` (true: the page
    /// may join a run) and releases the runs.
    #[inline(always)]
    pub(crate) fn free_contig_pages(
        &self,
        start: PageIdx,
        end: PageIdx,
        mut prepare: impl FnMut(PageIdx, &mut ContigFreeSummary, &mut BadPages) -> bool,
    ) -> ContigFreeSummary {
        let mut summary = ContigFreeSummary::default();
        // Bad pages are published once every page is placed: a hook may
        // panic or call back, and the open run must reach the lists first.
        let mut bad = BadPages::default();
        let cpu = self.mm.current_cpu();
        let section_mask = (1u32 << self.mm.mem.geometry.section_order) - 1;
        // The open run is [run_start, idx) in `run_zone`; it must end before
        // `run_limit`, the next section or zone boundary.
        let mut run: Option<(&Zone, PageIdx, PageIdx)> = None;
        for idx in start..end {
            if let Some((zone, run_start, run_limit)) = run {
                if idx == run_limit {
                    summary.freed += self.free_prepared_run(cpu, zone, run_start, idx);
                    run = None;
                }
            }
            if !prepare(idx, &mut summary, &mut bad) {
                if let Some((zone, run_start, _)) = run.take() {
                    summary.freed += self.free_prepared_run(cpu, zone, run_start, idx);
                }
                continue;
            }
            if run.is_none() {
                let Some(zone) = self.mm.zone_of(idx) else {
                    continue; // unreachable: allocated pages lie in a zone
                };
                let limit = zone.end_idx.min((idx | section_mask).saturating_add(1));
                run = Some((zone, idx, limit));
            }
        }
        if let Some((zone, run_start, _)) = run {
            summary.freed += self.free_prepared_run(cpu, zone, run_start, end);
        }
        self.mm.publish_bad_pages(bad);
        summary
    }

    /// Drops the reference (unless frozen) and runs `free_pages_prepare` on
    /// one page; true if the page may join a run.
    #[inline(always)]
    fn prepare_contig_page(
        &self,
        idx: PageIdx,
        frozen: bool,
        summary: &mut ContigFreeSummary,
        bad: &mut BadPages,
    ) -> bool {
        let page = self.mm.desc(idx);
        // The common page (order 0, one reference, or none if frozen, and
        // no flag but ALLOCATED) needs none of free_pages_prepare's
        // diagnosis: it is claimed (its last reference dropped, or the
        // frozen page's ALLOCATED cleared) and its free state written by one
        // compare-and-swap from the word just loaded, as the bulk free does.
        // A reference or flag that lands meanwhile fails it, and the page
        // takes the general steps below.
        let word = page.load_word();
        if word.is_plain_order0(u32::from(!frozen))
            && !self.mm.hwpoison.any()
            && page.drop_last_reference(word, DescWord::PREPARED)
        {
            return true;
        }
        if page.has(PageFlags::OWNED) {
            // A layer above owns it; only that layer may give it back.
            summary.still_in_use += 1;
            return false;
        }
        let claim = if frozen {
            Claim::Frozen
        } else if page.try_put() == Some(0) {
            Claim::ByRefcount
        } else {
            summary.still_in_use += 1;
            return false;
        };
        let poisoned = page.has(PageFlags::HWPOISON);
        match self.mm.claim_and_prepare_into(idx, 0, claim, bad) {
            Ok(()) => {}
            // Reported (once the batch is done) and leaked, as by `free_pages`.
            Err(FreeError::BadPage { .. }) => {
                summary.bad += 1;
                return false;
            }
            // A racing frozen free won the page.
            Err(_) => return false,
        }
        if poisoned {
            // `memory_failure` counted an in-use page as pending; it is now
            // out of service for good.
            self.mm.drop_poisoned(idx);
            summary.hwpoisoned += 1;
            return false;
        }
        true
    }

    /// Releases the prepared run `[start, end)` (one zone, one section) as
    /// its largest naturally aligned chunks: order = min(alignment of the
    /// PFN, log2 of what is left, `MAX_PAGE_ORDER`). Returns the page count.
    fn free_prepared_run(&self, cpu: usize, zone: &Zone, start: PageIdx, end: PageIdx) -> u64 {
        debug_assert!(zone.start_idx <= start && end <= zone.end_idx);
        let max_order = self.mm.mem.geometry.merge_order();
        let mut idx = start;
        while idx < end {
            let order = chunk_order(idx, end - idx, max_order);
            self.mm.free_prepared_block(&mut Locked(cpu), idx, order);
            idx += 1 << order;
        }
        (end - start) as u64
    }
}
