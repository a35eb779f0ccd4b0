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

use crate::types::error::{CmaError, ContigError};
use crate::types::gfp::{Gfp, MigrateType};
use crate::zone::Lock;
use crate::{PageAllocator, Pfn};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Largest alignment order `cma_alloc` accepts.
pub const CMA_MAX_ALIGN_ORDER: u32 = 30;

/// Names one CMA area of a [`PageAllocator`]; areas are numbered in the
/// order they were declared on the builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmaId(usize);

impl CmaId {
    /// Position of the area in declaration order.
    pub const fn index(self) -> usize {
        self.0
    }
}

/// A CMA area's identity and span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmaAreaInfo {
    /// Its id.
    pub id: CmaId,
    /// The name given at build time.
    pub name: String,
    /// Its PFN span.
    pub pfns: Range<u64>,
}

/// Per-area counters (Linux's `/sys/kernel/mm/cma/<area>/` plus mmkit's
/// own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmaStats {
    /// Pages in the area.
    pub nr_pages: u64,
    /// Pages currently handed out by `cma_alloc`.
    pub pages_in_use: u64,
    /// Successful `cma_alloc` calls.
    pub allocations: u64,
    /// Pages handed out by successful calls (`alloc_pages_success`).
    pub alloc_pages_success: u64,
    /// Failed `cma_alloc` calls.
    pub failures: u64,
    /// Pages asked for by failed calls (`alloc_pages_fail`).
    pub alloc_pages_fail: u64,
    /// Candidate ranges that were busy and skipped.
    pub busy_retries: u64,
    /// Successful `cma_release` calls.
    pub releases: u64,
    /// Pages given back (`release_pages_success`).
    pub release_pages_success: u64,
}

#[derive(Default)]
struct CmaCounters {
    allocations: AtomicU64,
    alloc_pages_success: AtomicU64,
    failures: AtomicU64,
    alloc_pages_fail: AtomicU64,
    busy_retries: AtomicU64,
    releases: AtomicU64,
    release_pages_success: AtomicU64,
}

/// The part of an area behind its lock.
struct CmaBitmap {
    /// One bit per page, set while the page is handed out or being tried.
    words: Vec<u64>,
    /// Completed allocations: offset in the area → pages.
    allocations: BTreeMap<u64, u64>,
}

impl CmaBitmap {
    /// First set bit in `[from, to)`.
    fn first_set(&self, from: u64, to: u64) -> Option<u64> {
        let mut i = from;
        while i < to {
            let word = self.words[(i / 64) as usize] >> (i % 64);
            if word != 0 {
                let bit = i + word.trailing_zeros() as u64;
                return (bit < to).then_some(bit);
            }
            i = (i / 64 + 1) * 64;
        }
        None
    }

    /// Sets or clears bits `[from, to)`.
    fn assign(&mut self, from: u64, to: u64, set: bool) {
        let mut i = from;
        while i < to {
            let lo = i % 64;
            let n = (64 - lo).min(to - i);
            let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << lo };
            let word = &mut self.words[(i / 64) as usize];
            if set {
                *word |= mask;
            } else {
                *word &= !mask;
            }
            i += n;
        }
    }

    /// First offset at or after `from` whose PFN (`base` + offset) is a
    /// multiple of `align` and whose `count` bits are clear (Linux's
    /// `bitmap_find_next_zero_area_off`).
    fn find_zero_area(&self, base: u64, nbits: u64, from: u64, count: u64, align: u64) -> Option<u64> {
        let mut cand = (base + from).next_multiple_of(align) - base;
        loop {
            if cand + count > nbits {
                return None;
            }
            match self.first_set(cand, cand + count) {
                None => return Some(cand),
                Some(bit) => cand = (base + bit + 1).next_multiple_of(align) - base,
            }
        }
    }

    fn popcount(&self) -> u64 {
        self.words.iter().map(|w| w.count_ones() as u64).sum()
    }
}

/// One CMA area.
pub(crate) struct CmaArea {
    name: String,
    base_pfn: u64,
    nr_pages: u64,
    bitmap: Lock<CmaBitmap>,
    counters: CmaCounters,
}

impl CmaArea {
    pub(crate) fn new(name: String, pfns: Range<u64>) -> Self {
        let nr_pages = pfns.end - pfns.start;
        Self {
            name,
            base_pfn: pfns.start,
            nr_pages,
            bitmap: Lock::new(CmaBitmap {
                words: vec![0; nr_pages.div_ceil(64) as usize],
                allocations: BTreeMap::new(),
            }),
            counters: CmaCounters::default(),
        }
    }

    pub(crate) fn pfns(&self) -> Range<u64> {
        self.base_pfn..self.base_pfn + self.nr_pages
    }

    /// Bitmap, records and counters agree (call with no CMA call running).
    pub(crate) fn check(&self) -> Result<(), String> {
        let bm = self.bitmap.lock();
        let recorded: u64 = bm.allocations.values().sum();
        let bits = bm.popcount();
        if bits != recorded {
            return Err(format!("CMA area {}: {bits} bits set, {recorded} pages recorded", self.name));
        }
        for (&off, &count) in &bm.allocations {
            if bm.first_set(off, off + count).is_none() {
                return Err(format!("CMA area {}: allocation at +{off} has no bits", self.name));
            }
        }
        Ok(())
    }
}

impl PageAllocator {
    /// The CMA areas declared with
    /// [`MemoryMapBuilder::cma`](crate::MemoryMapBuilder::cma).
    pub fn cma_areas(&self) -> Vec<CmaAreaInfo> {
        self.cma
            .iter()
            .enumerate()
            .map(|(i, a)| CmaAreaInfo { id: CmaId(i), name: a.name.clone(), pfns: a.pfns() })
            .collect()
    }

    /// The id of the CMA area called `name`.
    pub fn cma_area(&self, name: &str) -> Option<CmaId> {
        self.cma.iter().position(|a| a.name == name).map(CmaId)
    }

    /// Counters of one area.
    ///
    /// # Errors
    /// [`CmaError::NoSuchArea`].
    pub fn cma_stats(&self, id: CmaId) -> Result<CmaStats, CmaError> {
        let area = self.cma.get(id.0).ok_or(CmaError::NoSuchArea(id))?;
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
        let area = self.cma.get(id.0).ok_or(CmaError::NoSuchArea(id))?;
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
        let area = self.cma.get(id.0).ok_or(CmaError::NoSuchArea(id))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bitmap(nbits: u64) -> CmaBitmap {
        CmaBitmap { words: vec![0; nbits.div_ceil(64) as usize], allocations: BTreeMap::new() }
    }

    #[test]
    fn bit_ranges_cross_words() {
        let mut bm = bitmap(256);
        bm.assign(60, 130, true);
        assert_eq!(bm.popcount(), 70);
        assert_eq!(bm.first_set(0, 256), Some(60));
        assert_eq!(bm.first_set(130, 256), None);
        assert_eq!(bm.first_set(0, 60), None);
        bm.assign(64, 128, false);
        assert_eq!(bm.popcount(), 6);
        assert_eq!(bm.first_set(61, 200), Some(61));
        assert_eq!(bm.first_set(64, 200), Some(128));
    }

    #[test]
    fn zero_areas_respect_alignment_of_the_pfn() {
        let mut bm = bitmap(128);
        // Base PFN 4: offset 4 is the first PFN aligned to 8.
        assert_eq!(bm.find_zero_area(4, 128, 0, 8, 8), Some(4));
        bm.assign(4, 12, true);
        assert_eq!(bm.find_zero_area(4, 128, 0, 8, 8), Some(12));
        assert_eq!(bm.find_zero_area(4, 128, 0, 3, 1), Some(0));
        assert_eq!(bm.find_zero_area(4, 128, 0, 5, 1), Some(12));
        assert_eq!(bm.find_zero_area(4, 128, 0, 128, 1), None);
        assert_eq!(bm.find_zero_area(4, 128, 120, 8, 8), None);
    }
}
