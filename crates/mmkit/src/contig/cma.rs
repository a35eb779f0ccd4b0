//! The contiguous memory allocator (Linux's `mm/cma.c`): areas of memory
//! reserved when the map is built, lent to movable allocations meanwhile,
//! and handed out as contiguous ranges on demand.
//!
//! Owns each area's bitmap of pages handed out by `cma_alloc`, the record of
//! those allocations (start → page count, so a release with the wrong count
//! is refused) and per-area statistics. An area's pageblocks have type CMA
//! for the allocator's whole life: the buddy allocator gives their free
//! pages only to movable requests (and prefers them when more than half of a
//! zone's free memory is CMA, see `fallback`), so `cma_alloc` can always
//! migrate such pages away with `alloc_contig_range(.., Cma, ..)`.
//!
//! Lock order: an area's bitmap lock comes before any zone lock and is never
//! taken while a zone lock is held. In practice it is held only to search
//! and flip bits: `cma_alloc` drops it before calling `alloc_contig_range`
//! (which takes zone locks and calls the embedder's migrator, which may
//! allocate), so no allocator lock is ever held around embedder code.
//!
//! It does not touch free lists or descriptors; everything goes through
//! `contig` and `free_contig`.
#![deny(unsafe_code)]

use crate::contig::Contig;
use crate::types::error::{CmaError, ContigError};
use crate::types::gfp::{Gfp, MigrateType};
pub use crate::types::CmaId;
pub use crate::zone::cma_area::{CmaAreaInfo, CmaStats};
use crate::Pfn;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;

/// Largest alignment order `cma_alloc` accepts.
pub const CMA_MAX_ALIGN_ORDER: u32 = 30;

impl Contig<'_> {
    /// The CMA areas declared with
    /// [`MemoryMapBuilder::cma`](crate::MemoryMapBuilder::cma).
    pub fn cma_areas(&self) -> Vec<CmaAreaInfo> {
        self.mm
            .cma
            .iter()
            .enumerate()
            .map(|(i, a)| CmaAreaInfo { id: CmaId(i), name: a.name.clone(), pfns: a.pfns() })
            .collect()
    }

    /// The id of the CMA area called `name`.
    pub fn cma_area(&self, name: &str) -> Option<CmaId> {
        self.mm.cma.iter().position(|a| a.name == name).map(CmaId)
    }

    /// Counters of one area.
    ///
    /// # Errors
    /// [`CmaError::NoSuchArea`].
    pub fn cma_stats(&self, id: CmaId) -> Result<CmaStats, CmaError> {
        let area = self.mm.cma.get(id.0).ok_or(CmaError::NoSuchArea(id))?;
        let c = &area.counters;
        let pages_in_use = area.bitmap.lock().allocations.values().sum();
        Ok(CmaStats {
            nr_pages: area.nr_pages,
            pages_in_use,
            allocations: c.allocations.load(Relaxed),
            alloc_pages_success: c.alloc_pages_success.load(Relaxed),
            failures: c.failures.load(Relaxed),
            alloc_pages_fail: c.alloc_pages_fail.load(Relaxed),
            busy_retries: c.busy_retries.load(Relaxed),
            releases: c.releases.load(Relaxed),
            release_pages_success: c.release_pages_success.load(Relaxed),
        })
    }

    /// Allocates `count` contiguous pages from CMA area `id`, the first PFN
    /// a multiple of 2^`align_order` (Linux's `cma_alloc`).
    ///
    /// Candidates come from the area's bitmap, lowest first; each is
    /// reserved in the bitmap and collected with
    /// [`alloc_contig_range`](Self::alloc_contig_range)`(.., MigrateType::Cma, GFP_KERNEL)`.
    /// A busy candidate (an unmovable or pinned page, a failed migration) is
    /// given back and the next aligned candidate tried. The pages come back
    /// as order-0 pages with refcount 1; give them back with
    /// [`cma_release`](Self::cma_release).
    ///
    /// # Errors
    /// [`CmaError::NoSuchArea`], [`InvalidCount`](CmaError::InvalidCount)
    /// (zero or more than the area), [`InvalidAlign`](CmaError::InvalidAlign)
    /// (above [`CMA_MAX_ALIGN_ORDER`]), [`NoMemory`](CmaError::NoMemory)
    /// when every candidate was in use or busy.
    pub fn cma_alloc(&self, id: CmaId, count: u64, align_order: u32) -> Result<Pfn, CmaError> {
        let area = self.mm.cma.get(id.0).ok_or(CmaError::NoSuchArea(id))?;
        if count == 0 || count > area.nr_pages {
            return Err(CmaError::InvalidCount { count, area_pages: area.nr_pages });
        }
        if align_order > CMA_MAX_ALIGN_ORDER {
            return Err(CmaError::InvalidAlign(align_order));
        }
        let align = 1u64 << align_order;
        let mut from = 0;
        let mut busy_retries = 0;
        loop {
            let found = {
                let mut bm = area.bitmap.lock();
                let found = bm.find_zero_area(area.base_pfn, area.nr_pages, from, count, align);
                if let Some(off) = found {
                    bm.assign(off, off + count, true);
                }
                found
            };
            let Some(off) = found else {
                area.counters.failures.fetch_add(1, Relaxed);
                area.counters.alloc_pages_fail.fetch_add(count, Relaxed);
                return Err(CmaError::NoMemory { count, busy_retries });
            };
            let start = Pfn(area.base_pfn + off);
            let end = Pfn(start.0 + count);
            match self.alloc_contig_range(start, end, MigrateType::Cma, Gfp::KERNEL) {
                Ok(()) => {
                    let mut bm = area.bitmap.lock();
                    bm.allocations.insert(off, count);
                    drop(bm);
                    area.counters.allocations.fetch_add(1, Relaxed);
                    area.counters.alloc_pages_success.fetch_add(count, Relaxed);
                    return Ok(start);
                }
                Err(e) => {
                    area.bitmap.lock().assign(off, off + count, false);
                    if !matches!(e, ContigError::Busy { .. }) {
                        area.counters.failures.fetch_add(1, Relaxed);
                        area.counters.alloc_pages_fail.fetch_add(count, Relaxed);
                        return Err(CmaError::Contig(e));
                    }
                    busy_retries += 1;
                    area.counters.busy_retries.fetch_add(1, Relaxed);
                    // Next aligned candidate after this one.
                    from = off + 1;
                }
            }
        }
    }

    /// Gives back `count` pages at `pfn` allocated by
    /// [`cma_alloc`](Self::cma_alloc) from area `id` (Linux's
    /// `cma_release`): frees them with
    /// [`free_contig_range`](Self::free_contig_range) and clears their bits.
    ///
    /// # Errors
    /// [`CmaError::NoSuchArea`], [`NotInArea`](CmaError::NotInArea),
    /// [`NotAllocated`](CmaError::NotAllocated) (no allocation starts at
    /// `pfn`), [`CountMismatch`](CmaError::CountMismatch), or
    /// [`Free`](CmaError::Free) when the pages are no longer as `cma_alloc`
    /// left them (freed one by one, say). Nothing changes on error.
    pub fn cma_release(&self, id: CmaId, pfn: Pfn, count: u64) -> Result<(), CmaError> {
        let area = self.mm.cma.get(id.0).ok_or(CmaError::NoSuchArea(id))?;
        let span = area.pfns();
        if count == 0 || pfn.0 < span.start || pfn.0.saturating_add(count) > span.end {
            return Err(CmaError::NotInArea { pfn, count });
        }
        let off = pfn.0 - span.start;
        // Claim the record first, so that of two racing releases one wins.
        {
            let mut bm = area.bitmap.lock();
            match bm.allocations.get(&off) {
                None => return Err(CmaError::NotAllocated(pfn)),
                Some(&allocated) if allocated != count => {
                    return Err(CmaError::CountMismatch { pfn, allocated, given: count })
                }
                Some(_) => {}
            }
            bm.allocations.remove(&off);
        }
        if let Err(e) = self.free_contig_range(pfn, count) {
            area.bitmap.lock().allocations.insert(off, count);
            return Err(CmaError::Free(e));
        }
        let mut bm = area.bitmap.lock();
        bm.assign(off, off + count, false);
        drop(bm);
        area.counters.releases.fetch_add(1, Relaxed);
        area.counters.release_pages_success.fetch_add(count, Relaxed);
        Ok(())
    }
}
