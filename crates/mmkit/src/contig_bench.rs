//! Seed 000's workload as reusable benchmark cases: allocate one range of
//! 16384 pages, free it, many times; time the free page by page (the
//! "before") and batched (the "after"), and time `alloc_contig_range` and
//! `cma_alloc` of the same size.
//!
//! Owns only a prepared allocator and the steps of each case, written
//! against the public API alone, so that the criterion bench
//! (`benches/contig.rs`) and the `mmkit bench contig` command time exactly
//! the same code. Timing is the caller's: each case is a setup step (not
//! timed) and a measured step.
//!
//! | case                         | setup (untimed)        | measured                 |
//! |------------------------------|------------------------|--------------------------|
//! | `free_contig_range/per_page` | [`ContigBench::alloc_range`] | [`ContigBench::free_per_page`] |
//! | `free_contig_range/batched`  | [`ContigBench::alloc_range`] | [`ContigBench::free_batched`]  |
//! | `alloc_contig_range`         | —                      | [`ContigBench::alloc_range`], then untimed [`ContigBench::free_batched`] |
//! | `cma_alloc`                  | —                      | [`ContigBench::cma_alloc`], then untimed [`ContigBench::cma_release`] |
#![deny(unsafe_code)]

use crate::{
    BuildError, CmaError, CmaId, ContigError, FreeError, Gfp, MemoryMapBuilder, MigrateType, PageAllocator, Pfn,
    ZoneType,
};

/// Pages per iteration in the measurement of Linux's batched `free_contig_frozen_range` change.
pub const SEED_PAGES: u64 = 16384;

/// A metadata-only map prepared for the contiguous-range cases: one NORMAL
/// zone of four times the range, the range itself in ordinary (movable)
/// pageblocks, and a CMA area of the same size.
pub struct ContigBench {
    mm: PageAllocator,
    cma: CmaId,
    start: Pfn,
    nr_pages: u64,
}

impl ContigBench {
    /// Builds the map for ranges of `nr_pages` (a multiple of 1024 keeps
    /// every range aligned to whole pageblocks and `MAX_PAGE_ORDER` blocks).
    ///
    /// # Errors
    /// [`BuildError`] if the map cannot be built (for instance a size that
    /// is not a multiple of the pageblock size).
    pub fn new(nr_pages: u64) -> Result<Self, BuildError> {
        let base = nr_pages.next_multiple_of(1024).max(1024);
        let mm = MemoryMapBuilder::new()
            .zone(0, ZoneType::Normal, 0..4 * base)
            .cma("bench", 2 * base..2 * base + nr_pages)
            .build()?;
        // Declared just above, so the lookup cannot miss; no panic path.
        let cma = mm.cma_area("bench").ok_or(BuildError::NoZones)?;
        Ok(Self { mm, cma, start: Pfn(base), nr_pages })
    }

    /// The allocator, for inspection.
    pub fn allocator(&self) -> &PageAllocator {
        &self.mm
    }

    /// Pages per iteration.
    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    /// `alloc_contig_range` of the range as order-0 pages.
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_contig_range`] (none expected).
    pub fn alloc_range(&self) -> Result<Pfn, ContigError> {
        let end = Pfn(self.start.0 + self.nr_pages);
        self.mm.alloc_contig_range(self.start, end, MigrateType::Movable, Gfp::KERNEL)?;
        Ok(self.start)
    }

    /// The "before" of that change: every page through the ordinary free path,
    /// `free_pages(pfn, 0)`, one by one.
    ///
    /// # Errors
    /// The first [`FreeError`] (none expected).
    pub fn free_per_page(&self, pfn: Pfn) -> Result<(), FreeError> {
        for p in pfn.0..pfn.0 + self.nr_pages {
            self.mm.free_pages(Pfn(p), 0)?;
        }
        Ok(())
    }

    /// The "after": one `free_contig_range` call.
    ///
    /// # Errors
    /// As [`PageAllocator::free_contig_range`] (none expected).
    pub fn free_batched(&self, pfn: Pfn) -> Result<(), FreeError> {
        self.mm.free_contig_range(pfn, self.nr_pages).map(|_| ())
    }

    /// `cma_alloc` of the whole range from the CMA area.
    ///
    /// # Errors
    /// As [`PageAllocator::cma_alloc`] (none expected).
    pub fn cma_alloc(&self) -> Result<Pfn, CmaError> {
        self.mm.cma_alloc(self.cma, self.nr_pages, 0)
    }

    /// `cma_release` of what [`cma_alloc`](Self::cma_alloc) returned.
    ///
    /// # Errors
    /// As [`PageAllocator::cma_release`] (none expected).
    pub fn cma_release(&self, pfn: Pfn) -> Result<(), CmaError> {
        self.mm.cma_release(self.cma, pfn, self.nr_pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_round_trips() {
        let b = ContigBench::new(2048).unwrap();
        let free = b.allocator().nr_free_pages();
        let pfn = b.alloc_range().unwrap();
        b.free_per_page(pfn).unwrap();
        let pfn = b.alloc_range().unwrap();
        b.free_batched(pfn).unwrap();
        let pfn = b.cma_alloc().unwrap();
        b.cma_release(pfn).unwrap();
        assert_eq!(b.allocator().nr_free_pages(), free);
        b.allocator().check_invariants().unwrap();
    }
}
