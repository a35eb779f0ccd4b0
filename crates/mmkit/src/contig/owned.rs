//! Owned contiguous ranges: a collected PFN range held through one handle,
//! [`ContigRange`], and freed with no atomic operation per page.
//!
//! Owns the handle and its two transitions (collect → owned, owned →
//! free). Collection is `contig`'s; the batching of the free is
//! `free_contig`'s, with this file's per-page check.
//!
//! # Why a handle
//! [`free_contig_range`](Contig::free_contig_range) must drop one
//! reference per page with a compare-and-swap, because any thread may
//! take a reference to an in-use page at any time
//! ([`get_page`](crate::PageAllocator::get_page)); a second free of the same
//! pages must lose that race cleanly. The compare-and-swap is about half
//! of the batched free (`free_contig_range/batched` against `/owned` in
//! BENCHMARKS.md). The pages
//! of a [`ContigRange`] are frozen (no references, so `get_page` refuses
//! them) and owned (every other free path refuses them with
//! [`FreeError::Owned`](crate::FreeError::Owned)); the handle is unique
//! (not `Clone`), and freeing consumes it. So the claim that makes the
//! caller the range's only freer is made once, by the type system, and
//! each page costs a load, a compare and a plain store. Hardware poison
//! that arrives meanwhile is caught through the pending set
//! (`page_alloc::hwpoison`), as on every free path.
//!
//! This is Linux's frozen-page direction (`alloc_contig_frozen_range`)
//! carried one step further, in the way mmkit's owned blocks
//! ([`PageBlock`](crate::PageBlock)) already mark pages for the layers
//! above.
#![deny(unsafe_code)]

use crate::contig::free_contig::ContigFreeSummary;
use crate::contig::Contig;
use crate::contig::Prep;
use crate::mem::owned::OwnerKey;
use crate::mem::page::{DescWord, PageFlags, PageIdx};
use crate::page_alloc::free::BadPages;
use crate::types::error::{BadPageReason, ContigError};
use crate::types::gfp::{Gfp, MigrateType};
use crate::{PageOwner, Pfn};

/// A contiguous run of order-0 pages collected by
/// [`Contig::alloc_contig_block`]: frozen, owned by one layer, and
/// held only through this handle.
///
/// It carries its map's identity (never reused by another map), so
/// another map refuses it, and its owner key's tag; freeing consumes it.
/// Give it back with [`Contig::free_contig_block`]; a dropped
/// `ContigRange` leaks its pages (they stay allocated and owned).
#[must_use = "a dropped ContigRange leaks its pages; free it with Contig::free_contig_block"]
#[derive(Debug, PartialEq, Eq)]
pub struct ContigRange {
    start: Pfn,
    nr_pages: u64,
    owner: PageOwner,
    /// The map's id: unique in the process, never reused.
    map_id: u64,
}

impl ContigRange {
    /// First page.
    pub fn start(&self) -> Pfn {
        self.start
    }
    /// One past the last page.
    pub fn end(&self) -> Pfn {
        Pfn(self.start.0 + self.nr_pages)
    }
    /// Pages in the range.
    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }
    /// The layer that owns it.
    pub fn owner(&self) -> PageOwner {
        self.owner
    }
}

/// Why [`Contig::free_contig_block`] refused a range.
#[derive(Debug, PartialEq, Eq)]
pub enum ContigRangeError {
    /// The range belongs to another allocator; it is handed back unchanged.
    Foreign(ContigRange),
}

impl core::fmt::Display for ContigRangeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Foreign(range) => {
                write!(f, "range {}..{} belongs to another allocator", range.start(), range.end())
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ContigRangeError {}

impl Contig<'_> {
    /// Collects `[start, end)` like
    /// [`alloc_contig_frozen_range`](Self::alloc_contig_frozen_range) and
    /// hands it out as one owned range: its pages are frozen and marked as
    /// `owner`'s, so only [`free_contig_block`](Self::free_contig_block)
    /// gives them back.
    ///
    /// ```
    /// use mmkit::{Blocks, Contig, Gfp, MemoryMapBuilder, MigrateType, Pfn};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    /// let pool = Blocks::new(&mm).new_owner_key().unwrap();
    /// let contig = Contig::new(&mm);
    /// let range = contig.alloc_contig_block(&pool, Pfn(4096), Pfn(8192), MigrateType::Movable, Gfp::KERNEL).unwrap();
    /// assert!(contig.free_contig_range(Pfn(4096), 1).is_err()); // owned: the plain free refuses it
    /// let summary = contig.free_contig_block(range).unwrap();
    /// assert_eq!(summary.freed, 4096);
    /// ```
    ///
    /// # Errors
    /// As [`alloc_contig_range`](Self::alloc_contig_range),
    /// [`ContigError::InvalidGfp`] for `Gfp::COMP` (an owned range is
    /// order-0 pages), and [`ContigError::ForeignOwnerKey`] for a key of
    /// another map.
    pub fn alloc_contig_block(
        &self,
        key: &OwnerKey,
        start: Pfn,
        end: Pfn,
        migratetype: MigrateType,
        gfp: Gfp,
    ) -> Result<ContigRange, ContigError> {
        if key.map_id() != self.mm.map_id() {
            return Err(ContigError::ForeignOwnerKey);
        }
        let owner = key.owner();
        self.collect_contig_range(start, end, migratetype, gfp, Prep::Owned(owner))?;
        Ok(ContigRange { start, nr_pages: end.0 - start.0, owner, map_id: self.mm.map_id() })
    }

    /// Frees an owned range in the largest aligned chunks, like
    /// [`free_contig_frozen_range`](Self::free_contig_frozen_range) but
    /// with no atomic operation per page: the handle is the claim (see the
    /// module doc of `contig::owned`). A page whose descriptor is not what
    /// the range left there (embedder flags set meanwhile, corruption) is
    /// reported as a bad page and leaked; a poisoned page is taken out of
    /// service; the rest is freed. The summary says which.
    ///
    /// # Errors
    /// [`ContigRangeError::Foreign`] for another allocator's range (given
    /// back, nothing changed).
    pub fn free_contig_block(&self, range: ContigRange) -> Result<ContigFreeSummary, ContigRangeError> {
        if range.map_id != self.mm.map_id() {
            return Err(ContigRangeError::Foreign(range));
        }
        // This allocator made the handle from PFNs of its map.
        let start = range.start.0.wrapping_sub(self.mm.mem.base_pfn) as PageIdx;
        let end = start + range.nr_pages as PageIdx;
        let expected = DescWord::owned(PageFlags::ALLOCATED, 0, MigrateType::Unmovable as u8, range.owner.id(), 0);
        Ok(self.free_contig_pages(start, end, |idx, summary, bad| self.prepare_owned_page(idx, expected, summary, bad)))
    }

    /// `free_pages_prepare` for one page of an owned range: one load of the
    /// descriptor's word (state and refcount, which nobody can raise on a
    /// frozen page) against what `alloc_contig_block` stored, and one store
    /// of the free state. True if the page may join a run.
    #[inline(always)]
    fn prepare_owned_page(
        &self,
        idx: PageIdx,
        expected: DescWord,
        summary: &mut ContigFreeSummary,
        bad: &mut BadPages,
    ) -> bool {
        let page = self.mm.desc(idx);
        let word = page.load_word();
        if word.without_poison() != expected {
            self.owned_page_went_bad(idx, summary, bad);
            return false;
        }
        page.set_free_state(PageFlags::EMPTY, 0, 0);
        if self.mm.hwpoisoned_with_flag(word.poisoned(), idx) {
            self.mm.drop_poisoned(idx);
            summary.hwpoisoned += 1;
            return false;
        }
        true
    }

    /// Reports and leaks a page of an owned range that is not as the range
    /// left it.
    #[cold]
    fn owned_page_went_bad(&self, idx: PageIdx, summary: &mut ContigFreeSummary, bad: &mut BadPages) {
        let page = self.mm.desc(idx);
        let reason = match page.refcount() {
            0 => BadPageReason::FlagsSetAtFree(page.flags().intersection(PageFlags::CHECK_AT_FREE)),
            refcount => BadPageReason::NonzeroRefcount(refcount),
        };
        page.clear_owner();
        page.update_flags_atomic(PageFlags::EMPTY, PageFlags::ALLOCATED);
        bad.push(self.mm.count_bad_page(idx, reason, 1));
        summary.bad += 1;
    }
}
