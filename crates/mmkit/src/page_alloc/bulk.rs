//! The bulk allocator (Linux's `alloc_pages_bulk`, from the series `mm, page_alloc: Add a bulk page allocator`): many order-0 pages per pageset-lock hold,
//! and the matching bulk frees.
//!
//! Owns `alloc_pages_bulk` (fill the empty slots of an array), its `Vec`
//! variant, `free_pages_bulk` and `release_pages`. Per-page work is the same
//! as the single-page paths (validation, `prep_new_page`,
//! `free_pages_prepare`); what bulk saves is the lock traffic: one pageset
//! lock per batch, refills and spills through one zone-lock hold each.
#![deny(unsafe_code)]

use crate::mem::page::PageIdx;
use crate::mem::sync::LockGuard;
use crate::page_alloc::free::Claim;
use crate::pcp::order_to_pindex;
use crate::types::error::FreeError;
use crate::types::gfp::{fast_path_alloc_flags, gfp_zone, Gfp, Watermark};
use crate::{PageAllocator, Pfn};
use alloc::vec::Vec;

/// Some pages of a bulk free could not be freed; the rest were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkFreeError {
    /// Entries that were valid and handled.
    pub done: usize,
    /// Entries rejected.
    pub failed: usize,
    /// Index and error of the first rejected entry.
    pub first: (usize, FreeError),
}

impl core::fmt::Display for BulkFreeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} of {} entries rejected; first at index {}: {}",
            self.failed,
            self.done + self.failed,
            self.first.0,
            self.first.1
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BulkFreeError {}

impl PageAllocator {
    /// Fills the empty (`None`) slots of `page_array` with order-0 pages
    /// (Linux's `alloc_pages_bulk`). Returns the number of leading filled
    /// slots, counting those filled on entry; it may be fewer than the array
    /// (callers retry). Never enters the slow path; a request for a single
    /// page, a busy pageset or no zone above its LOW watermark plus the
    /// request falls back to one ordinary allocation.
    ///
    /// Pages have refcount 1; free them with [`free_pages_bulk`](Self::free_pages_bulk)
    /// or one by one with [`free_pages`](Self::free_pages).
    ///
    /// # Examples
    /// ```
    /// use mmkit::{Gfp, MemoryMapBuilder};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    /// let mut pages = [None; 32];
    /// let filled = mm.alloc_pages_bulk(Gfp::KERNEL, &mut pages);
    /// assert_eq!(filled, 32);
    /// let pfns: Vec<_> = pages.iter().flatten().copied().collect();
    /// assert_eq!(mm.free_pages_bulk(&pfns), Ok(32));
    /// ```
    pub fn alloc_pages_bulk(&self, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize {
        self.alloc_pages_bulk_on(self.current_cpu(), gfp, page_array)
    }

    /// Appends up to `nr_pages` order-0 pages to `out` (the list flavour of
    /// [`alloc_pages_bulk`](Self::alloc_pages_bulk)); returns how many.
    pub fn alloc_pages_bulk_vec(&self, gfp: Gfp, nr_pages: usize, out: &mut Vec<Pfn>) -> usize {
        self.alloc_pages_bulk_vec_on(self.current_cpu(), gfp, nr_pages, out)
    }

    pub(crate) fn alloc_pages_bulk_on(&self, cpu: usize, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize {
        let first_empty = page_array.iter().position(Option::is_none).unwrap_or(page_array.len());
        let wanted = page_array[first_empty..].iter().filter(|slot| slot.is_none()).count();
        let mut cursor = first_empty;
        self.bulk_take(cpu, gfp, wanted, |pfn| {
            while page_array[cursor].is_some() {
                cursor += 1;
            }
            page_array[cursor] = Some(pfn);
        });
        page_array.iter().position(Option::is_none).unwrap_or(page_array.len())
    }

    pub(crate) fn alloc_pages_bulk_vec_on(&self, cpu: usize, gfp: Gfp, nr_pages: usize, out: &mut Vec<Pfn>) -> usize {
        out.reserve(nr_pages);
        self.bulk_take(cpu, gfp, nr_pages, |pfn| out.push(pfn))
    }

    /// Allocates up to `wanted` order-0 pages, handing each to `put`.
    fn bulk_take(&self, cpu: usize, gfp: Gfp, wanted: usize, mut put: impl FnMut(Pfn)) -> usize {
        if wanted == 0 {
            return 0;
        }
        let taken = if wanted > 1 && self.pcp_serves(gfp) { self.bulk_take_pcp(cpu, gfp, wanted, &mut put) } else { 0 };
        if taken > 0 {
            return taken;
        }
        match self.alloc_on(cpu, self.cpu_to_node(cpu), gfp, 0, false) {
            Ok(pfn) => {
                put(pfn);
                1
            }
            Err(_) => 0,
        }
    }

    /// The batched part: pick the first zone whose LOW watermark covers the
    /// whole request, then pop pages under one pageset-lock hold.
    fn bulk_take_pcp(&self, cpu: usize, gfp: Gfp, wanted: usize, put: &mut impl FnMut(Pfn)) -> usize {
        let Ok(highest) = gfp_zone(gfp) else {
            return 0;
        };
        let mt = self.request_migratetype(gfp);
        let flags = fast_path_alloc_flags(gfp, false).with_watermark(Watermark::Low);
        let this_node = gfp.contains(Gfp::THISNODE);
        let nid = self.cpu_to_node(cpu);
        let Some(zi) = self.zonelist(nid).iter().copied().find(|&zi| {
            let z = &self.zones[zi];
            z.zone_type <= highest
                && (!this_node || z.nid == nid)
                && z.watermark_fast(0, z.watermark(Watermark::Low) + wanted as u64, highest, flags)
        }) else {
            return 0;
        };
        let Some(mut pcp) = self.try_lock_pcp(cpu, zi) else {
            return 0;
        };
        pcp.note_alloc();
        let pindex = order_to_pindex(mt, 0);
        let mut taken = 0;
        while taken < wanted {
            let idx = match pcp.pop(&self.mem.pages, pindex, 0) {
                Some(idx) if self.is_hwpoisoned(idx) => {
                    self.drop_poisoned(idx);
                    continue;
                }
                Some(idx) => idx,
                None => {
                    if self.pcp_refill(&mut pcp, zi, 0, mt, flags).is_none() {
                        break;
                    }
                    continue;
                }
            };
            self.prep_new_page(idx, 0, gfp, mt, false);
            put(self.idx_to_pfn(idx));
            taken += 1;
        }
        pcp.counters.alloc_pages += taken as u64;
        taken
    }

    /// Frees blocks allocated with refcount 1 (any order, each freed with
    /// its allocation order), dropping the reference first; pages whose
    /// count stays above zero are left to their other holders. Pages of one
    /// zone share one pageset-lock hold.
    ///
    /// # Errors
    /// [`BulkFreeError`] if any entry was rejected (the same errors as
    /// [`free_pages`](Self::free_pages)); every valid entry is still freed,
    /// and rejected ones change nothing (bad pages excepted: reported and
    /// leaked).
    pub fn free_pages_bulk(&self, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        self.free_pages_bulk_on(self.current_cpu(), pfns)
    }

    /// Drops one reference to each page or compound page (tails resolve to
    /// their head), freeing those that reach zero (Linux's `release_pages`).
    ///
    /// # Errors
    /// As [`free_pages_bulk`](Self::free_pages_bulk).
    pub fn release_pages(&self, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        self.release_pages_on(self.current_cpu(), pfns)
    }

    pub(crate) fn free_pages_bulk_on(&self, cpu: usize, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        self.free_batch(cpu, pfns, false)
    }

    pub(crate) fn release_pages_on(&self, cpu: usize, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        self.free_batch(cpu, pfns, true)
    }

    fn free_batch(&self, cpu: usize, pfns: &[Pfn], resolve_tails: bool) -> Result<usize, BulkFreeError> {
        let mut done = 0;
        let mut failed = 0;
        let mut first = None;
        // The pageset currently held, by zone index.
        let mut held: Option<(usize, LockGuard<'_, crate::pcp::PcpState>)> = None;
        for (i, &pfn) in pfns.iter().enumerate() {
            match self.put_for_batch(pfn, resolve_tails) {
                Err(e) => {
                    failed += 1;
                    first.get_or_insert((i, e));
                }
                Ok(None) => done += 1,
                Ok(Some((idx, order))) => {
                    done += 1;
                    self.free_prepared_batched(cpu, idx, order, &mut held);
                }
            }
        }
        match first {
            None => Ok(done),
            Some(first) => Err(BulkFreeError { done, failed, first }),
        }
    }

    /// Validates, drops the reference and prepares one entry; returns the
    /// block to free if this was the last reference.
    fn put_for_batch(&self, pfn: Pfn, resolve_tails: bool) -> Result<Option<(PageIdx, u32)>, FreeError> {
        let pfn = if resolve_tails {
            self.compound_head(pfn).map_err(|e| match e {
                crate::PageError::Hole(p) => FreeError::Hole(p),
                _ => FreeError::OutOfRange(pfn),
            })?
        } else {
            pfn
        };
        let idx = self.validate_allocated(pfn)?;
        let page = self.desc(idx);
        let order = page.order();
        match page.try_put() {
            None => Err(FreeError::RefcountMismatch { pfn, refcount: 0 }),
            Some(0) => {
                self.claim_and_prepare(idx, order, Claim::ByRefcount)?;
                Ok(Some((idx, order)))
            }
            Some(_) => Ok(None),
        }
    }

    /// Frees a prepared block through the held pageset when it belongs to
    /// the same zone, switching pagesets when the zone changes.
    fn free_prepared_batched<'a>(
        &'a self,
        cpu: usize,
        idx: PageIdx,
        order: u32,
        held: &mut Option<(usize, LockGuard<'a, crate::pcp::PcpState>)>,
    ) {
        let Some(zi) = self.zone_index_of(idx) else {
            return;
        };
        if let Some(mt) = self.pcp_list_type(idx, order) {
            if held.as_ref().is_none_or(|(z, _)| *z != zi) {
                *held = None;
                *held = self.try_lock_pcp(cpu, zi).map(|g| (zi, g));
            }
            if let Some((_, pcp)) = held.as_mut() {
                if self.pcp_free_locked(pcp, zi, idx, order, mt) {
                    return;
                }
            }
        }
        self.release_prepared(&self.zones[zi], idx, 1 << order, crate::zone::buddy::Placement::Auto);
    }
}
