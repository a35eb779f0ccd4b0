//! CMA areas as zone-level reservations: the runs of `MIGRATE_CMA`
//! pageblocks declared at build time, each with its bitmap of pages handed
//! out, the record of those allocations and its counters.
//!
//! Owns the data only; the allocation and release logic (`cma_alloc`,
//! `cma_release`) is the contiguous layer's (`contig::cma`), which is the
//! only writer of these bitmaps. Must not touch free lists or descriptors.
#![deny(unsafe_code)]

use crate::mem::sync::Lock;
use crate::types::CmaId;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::AtomicU64;

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
pub(crate) struct CmaCounters {
    pub(crate) allocations: AtomicU64,
    pub(crate) alloc_pages_success: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) alloc_pages_fail: AtomicU64,
    pub(crate) busy_retries: AtomicU64,
    pub(crate) releases: AtomicU64,
    pub(crate) release_pages_success: AtomicU64,
}

/// The part of an area behind its lock.
pub(crate) struct CmaBitmap {
    /// One bit per page, set while the page is handed out or being tried.
    pub(crate) words: Vec<u64>,
    /// Completed allocations: offset in the area → pages.
    pub(crate) allocations: BTreeMap<u64, u64>,
}

impl CmaBitmap {
    /// First set bit in `[from, to)`.
    pub(crate) fn first_set(&self, from: u64, to: u64) -> Option<u64> {
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
    pub(crate) fn assign(&mut self, from: u64, to: u64, set: bool) {
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
    pub(crate) fn find_zero_area(&self, base: u64, nbits: u64, from: u64, count: u64, align: u64) -> Option<u64> {
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

    pub(crate) fn popcount(&self) -> u64 {
        self.words.iter().map(|w| w.count_ones() as u64).sum()
    }
}

/// One CMA area.
pub(crate) struct CmaArea {
    pub(crate) name: String,
    pub(crate) base_pfn: u64,
    pub(crate) nr_pages: u64,
    pub(crate) bitmap: Lock<CmaBitmap>,
    pub(crate) counters: CmaCounters,
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
