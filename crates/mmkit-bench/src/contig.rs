//! The contiguous-range workload as benchmark steps: allocate one range of
//! [`RANGE_PAGES`] pages, free it, many times; time the free page by page
//! and batched, and time `alloc_contig_range` and `cma_alloc` of the same
//! size.
//!
//! The two frees are the two ways Linux gives a frozen range back
//! (`mm/page_alloc.c`): page by page through `free_frozen_pages()`, each
//! page passing the order-0 per-CPU list, against `free_contig_range()`,
//! which frees the range in the largest naturally aligned blocks. The
//! allocations are `alloc_contig_range()` (`mm/page_alloc.c`) and
//! `cma_alloc()` (`mm/cma.c`).
//!
//! Owns only a prepared allocator and the steps of each case, written
//! against mmkit's public API alone, so that the criterion bench
//! (`benches/contig.rs`) and `mmkit bench contig` time exactly the same
//! code. Must not read a clock: each case is a setup step (not timed) and a
//! measured step, and timing is the caller's.
//!
//! | case                         | setup (untimed)        | measured                 |
//! |------------------------------|------------------------|--------------------------|
//! | `free_contig_range/per_page` | [`ContigBench::alloc_range`] | [`ContigBench::free_per_page`] |
//! | `free_contig_range/batched`  | [`ContigBench::alloc_range`] | [`ContigBench::free_batched`]  |
//! | `free_contig_range/frozen`   | [`ContigBench::alloc_frozen_range`] | [`ContigBench::free_frozen`] |
//! | `free_contig_range/owned`    | [`ContigBench::alloc_owned_range`] | [`ContigBench::free_owned`] |
//! | `alloc_contig_range`         | —                      | [`ContigBench::alloc_range`], then untimed [`ContigBench::free_batched`] |
//! | `cma_alloc`                  | —                      | [`ContigBench::cma_alloc`], then untimed [`ContigBench::cma_release`] |

use mmkit::Blocks;
use mmkit::{
    BuildError, CmaError, CmaId, Contig, ContigError, ContigRange, ContigRangeError, FreeError, Gfp, MemoryMapBuilder,
    MigrateType, OwnerKey, PageAllocator, Pfn, ZoneType,
};
use std::fmt;

/// Pages per iteration: 64 MiB of 4 KiB pages, 16 of Linux's x86-64
/// `MAX_PAGE_ORDER` blocks (`include/linux/mmzone.h`).
pub const RANGE_PAGES: u64 = 16384;

/// Name of the CMA area [`ContigBench::new`] declares.
const CMA_AREA: &str = "bench";

/// Why [`ContigBench::new`] could not prepare its map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContigBenchError {
    /// mmkit refused the map (for instance a range that is not a multiple
    /// of the pageblock size).
    Build(BuildError),
    /// The map was built but has no CMA area of the name it was declared
    /// with.
    CmaAreaNotFound,
    /// The map had no owner tag for the bench's owned ranges.
    NoOwnerTag,
}

impl fmt::Display for ContigBenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContigBenchError::Build(e) => write!(f, "{e}"),
            ContigBenchError::CmaAreaNotFound => write!(f, "CMA area `{CMA_AREA}` not found in the built map"),
            ContigBenchError::NoOwnerTag => write!(f, "the map has no owner tag left"),
        }
    }
}

impl std::error::Error for ContigBenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ContigBenchError::Build(e) => Some(e),
            ContigBenchError::CmaAreaNotFound | ContigBenchError::NoOwnerTag => None,
        }
    }
}

impl From<BuildError> for ContigBenchError {
    fn from(e: BuildError) -> Self {
        ContigBenchError::Build(e)
    }
}

/// A metadata-only map prepared for the contiguous-range cases: one NORMAL
/// zone of four times the range, the range itself in ordinary (movable)
/// pageblocks, and a CMA area of the same size.
pub struct ContigBench {
    mm: PageAllocator,
    /// The owner of the bench's owned ranges.
    key: OwnerKey,
    cma: CmaId,
    start: Pfn,
    nr_pages: u64,
}

impl ContigBench {
    /// Builds the map for ranges of `nr_pages` (a multiple of 1024 keeps
    /// every range aligned to whole pageblocks and `MAX_PAGE_ORDER` blocks).
    ///
    /// # Errors
    /// [`ContigBenchError::Build`] if the map cannot be built (for instance
    /// a size that is not a multiple of the pageblock size);
    /// [`ContigBenchError::CmaAreaNotFound`] if the built map lacks the CMA
    /// area declared for it.
    pub fn new(nr_pages: u64) -> Result<Self, ContigBenchError> {
        let base = nr_pages.next_multiple_of(1024).max(1024);
        let mm = MemoryMapBuilder::new()
            .zone(0, ZoneType::Normal, 0..4 * base)
            .cma(CMA_AREA, 2 * base..2 * base + nr_pages)
            .build()?;
        let cma = Contig::new(&mm).cma_area(CMA_AREA).ok_or(ContigBenchError::CmaAreaNotFound)?;
        let key = Blocks::new(&mm).new_owner_key().map_err(|_| ContigBenchError::NoOwnerTag)?;
        Ok(Self { mm, key, cma, start: Pfn(base), nr_pages })
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
    /// As [`Contig::alloc_contig_range`] (none expected).
    pub fn alloc_range(&self) -> Result<Pfn, ContigError> {
        let end = Pfn(self.start.0 + self.nr_pages);
        Contig::new(&self.mm).alloc_contig_range(self.start, end, MigrateType::Movable, Gfp::KERNEL)?;
        Ok(self.start)
    }

    /// The free one page at a time: every page through the ordinary free
    /// path, `free_pages(pfn, 0)`, one by one.
    ///
    /// # Errors
    /// The first [`FreeError`] (none expected).
    pub fn free_per_page(&self, pfn: Pfn) -> Result<(), FreeError> {
        for p in pfn.0..pfn.0 + self.nr_pages {
            self.mm.free_pages(Pfn(p), 0)?;
        }
        Ok(())
    }

    /// The batched free: one `free_contig_range` call.
    ///
    /// # Errors
    /// As [`Contig::free_contig_range`] (none expected).
    pub fn free_batched(&self, pfn: Pfn) -> Result<(), FreeError> {
        Contig::new(&self.mm).free_contig_range(pfn, self.nr_pages).map(|_| ())
    }

    /// `alloc_contig_frozen_range` of the range (refcount 0 pages).
    ///
    /// # Errors
    /// As [`Contig::alloc_contig_frozen_range`] (none expected).
    pub fn alloc_frozen_range(&self) -> Result<Pfn, ContigError> {
        let end = Pfn(self.start.0 + self.nr_pages);
        Contig::new(&self.mm).alloc_contig_frozen_range(self.start, end, MigrateType::Movable, Gfp::KERNEL)?;
        Ok(self.start)
    }

    /// The batched free of a frozen range: one `free_contig_frozen_range`.
    ///
    /// # Errors
    /// As [`Contig::free_contig_frozen_range`] (none expected).
    pub fn free_frozen(&self, pfn: Pfn) -> Result<(), FreeError> {
        Contig::new(&self.mm).free_contig_frozen_range(pfn, self.nr_pages).map(|_| ())
    }

    /// `alloc_contig_block` of the range: one owned handle.
    ///
    /// # Errors
    /// As [`Contig::alloc_contig_block`] (none expected).
    pub fn alloc_owned_range(&self) -> Result<ContigRange, ContigError> {
        let end = Pfn(self.start.0 + self.nr_pages);
        Contig::new(&self.mm).alloc_contig_block(&self.key, self.start, end, MigrateType::Movable, Gfp::KERNEL)
    }

    /// The free of an owned range: one `free_contig_block`.
    ///
    /// # Errors
    /// As [`Contig::free_contig_block`] (none expected).
    pub fn free_owned(&self, range: ContigRange) -> Result<(), ContigRangeError> {
        Contig::new(&self.mm).free_contig_block(range).map(|_| ())
    }

    /// `cma_alloc` of the whole range from the CMA area.
    ///
    /// # Errors
    /// As [`Contig::cma_alloc`] (none expected).
    pub fn cma_alloc(&self) -> Result<Pfn, CmaError> {
        Contig::new(&self.mm).cma_alloc(self.cma, self.nr_pages, 0)
    }

    /// `cma_release` of what [`cma_alloc`](Self::cma_alloc) returned.
    ///
    /// # Errors
    /// As [`Contig::cma_release`] (none expected).
    pub fn cma_release(&self, pfn: Pfn) -> Result<(), CmaError> {
        Contig::new(&self.mm).cma_release(self.cma, pfn, self.nr_pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit::Report;

    #[test]
    fn every_case_round_trips() {
        let b = ContigBench::new(2048).unwrap();
        let free = Report::new(b.allocator()).nr_free_pages();
        let pfn = b.alloc_range().unwrap();
        b.free_per_page(pfn).unwrap();
        let pfn = b.alloc_range().unwrap();
        b.free_batched(pfn).unwrap();
        let pfn = b.alloc_frozen_range().unwrap();
        b.free_frozen(pfn).unwrap();
        let range = b.alloc_owned_range().unwrap();
        b.free_owned(range).unwrap();
        let pfn = b.cma_alloc().unwrap();
        b.cma_release(pfn).unwrap();
        assert_eq!(Report::new(b.allocator()).nr_free_pages(), free);
        Report::new(b.allocator()).check_invariants().unwrap();
    }

    #[test]
    fn a_bad_size_is_a_build_error() {
        // 1000 pages are not whole pageblocks: the CMA area is refused.
        assert!(matches!(ContigBench::new(1000), Err(ContigBenchError::Build(_))));
        assert!(!ContigBenchError::CmaAreaNotFound.to_string().is_empty());
    }
}
