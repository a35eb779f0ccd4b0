//! The bulk allocator (Linux's `alloc_pages_bulk`, from the series `mm, page_alloc: Add a bulk page allocator`): many order-0 pages per pageset-lock hold,
//! and the matching bulk frees.
//!
//! Owns `alloc_pages_bulk` (fill the empty slots of an array), its `Vec`
//! variant, `free_pages_bulk` and `release_pages`. Besides the lock traffic
//! (one pageset lock per batch, refills and spills through one zone-lock
//! hold each, as Linux's `rmqueue_bulk` and `free_pcppages_bulk`), the
//! per-page work is cut to what the page itself needs.
//!
//! # Allocation
//! The zone (first with its LOW watermark above the whole request) and the
//! pageset are chosen once. The list is walked once (`pop_head_run`): each
//! page gets the pop's poison check (its flag, or the pending set while it
//! is non-empty), then `prep_new_page`'s two stores (private word; state
//! and refcount in one), and goes to the caller's slot; the list is cut
//! once at the end instead of each pop writing its successor's back link.
//! An empty list is refilled under one zone-lock hold (`rmqueue_bulk`).
//! Statistics and the refill scale are booked once per call. The walk is a
//! chain of dependent loads, so it runs out of line with its few values in
//! registers, and prefetches the descriptor a few blocks ahead along the
//! list's direction (lists are mostly runs of neighbouring pages).
//!
//! # Free
//! Entries are taken in stretches of up to 64 order-0 pages of one
//! pageblock (whose zone and pcp list are looked up once). Per page: one
//! load of the descriptor word checks everything `free_pages_prepare` would
//! (allocated, order 0, exactly one reference, no other flag), and one
//! compare-and-swap from exactly that word drops the last reference and
//! marks the page as cached. That stays an atomic read-modify-write per
//! page, as Linux's `put_page_testzero` does: another thread may hold or be
//! taking a speculative reference (`get_page` on a page it found), and a
//! plain store would lose it. A word that moved meanwhile fails the
//! exchange and the entry takes the per-entry path. The stretch goes on the
//! list in one push (`push_head_all`: each descriptor's links written once,
//! one write outside the stretch; the index buffer behind it is sized to
//! the entries left, so a batch of four does not clear room for 64), and
//! counting, `high` tuning and the spill decision run once per stretch
//! (`pages_to_spill_batch`; Linux's
//! `free_unref_folios` commits folio by folio). Everything else — shared
//! references, compound and higher-order blocks, tails for
//! `release_pages`, pending poison, a busy pageset, isolated pageblocks, a
//! placement policy that merges before caching, and every invalid entry —
//! goes through the single-page path one entry at a time, so double frees,
//! foreign, wrong-order and poisoned pages stay typed errors that change
//! nothing ([`BulkFreeError`]).
//!
//! # Cost
//! Timed by `mmkit bench bulk`, cases `bulk/N` and `bulk_free/N`;
//! instructions per page by `examples/bulk_probe.rs` and `pcp_probe bulk64`
//! under callgrind (`docs/perf-log/`). What is left of the allocation is
//! the walk: per page, one descriptor load whose address
//! comes from the load before, so the chain's load latency bounds it, not
//! its instructions. Of the free, the one `lock cmpxchg` per page is the
//! floor while the reference drop stays atomic.
#![deny(unsafe_code)]

use crate::mem::page::{DescWord, PageFlags, PageIdx};
use crate::mem::sync::LockGuard;
use crate::page_alloc::cpu::{Lists, Locked};
use crate::page_alloc::free::{BadPages, Claim};
use crate::pcp::{order_to_pindex, PcpState};
use crate::types::error::FreeError;
use crate::types::gfp::{fast_path_alloc_flags, gfp_zone, Gfp, MigrateType, Watermark};
use crate::zone::buddy::Placement;
use crate::{PageAllocator, Pfn};
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;

/// Most pages one stretch of the fast free takes (its index buffer lives
/// on the stack).
const STRETCH_MAX: usize = 64;

/// The smallest index buffer a stretch uses. The buffer is cleared once
/// per stretch, and clearing all `STRETCH_MAX` entries was a fixed cost
/// that batches of a few pages paid in full; a stretch with at most this
/// many entries left (or twice this) takes a buffer of that size instead.
const STRETCH_SHORT: usize = 8;

/// A stretch of the fast free: order-0 pages of one pageblock, bound for
/// the run's list.
#[derive(Clone, Copy)]
struct Stretch {
    /// The held pageset's zone and the list the pages go on.
    zi: usize,
    pindex: usize,
    /// The list's migratetype.
    mt: MigrateType,
    /// The first entry's pageblock (descriptor index >> `pageblock_order`).
    block: PageIdx,
    pageblock_order: u32,
    /// The word a page takes on the list: `PCP`, order 0, the list's type,
    /// no references.
    cached: DescWord,
}

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
        self.alloc_pages_bulk_with(&mut Locked(self.current_cpu()), gfp, page_array)
    }

    /// Appends up to `nr_pages` order-0 pages to `out` (the list flavour of
    /// [`alloc_pages_bulk`](Self::alloc_pages_bulk)); returns how many.
    ///
    /// `nr_pages` is a wish, not a size to reserve: the request is cut to
    /// the map's pages, and when `out` cannot grow by that much the call
    /// fills only the room `out` already has (a short count, never an
    /// abort).
    ///
    /// ```
    /// use mmkit::{Gfp, MemoryMapBuilder};
    /// let mm = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
    /// let mut pages = Vec::new();
    /// let got = mm.alloc_pages_bulk_vec(Gfp::KERNEL, usize::MAX, &mut pages);
    /// assert!(got > 0 && got <= 4096);
    /// # mm.free_pages_bulk(&pages).unwrap();
    /// ```
    pub fn alloc_pages_bulk_vec(&self, gfp: Gfp, nr_pages: usize, out: &mut Vec<Pfn>) -> usize {
        self.alloc_pages_bulk_vec_on(self.current_cpu(), gfp, nr_pages, out)
    }

    /// [`alloc_pages_bulk`](Self::alloc_pages_bulk) from `lists`.
    pub(crate) fn alloc_pages_bulk_with(
        &self,
        lists: &mut impl Lists,
        gfp: Gfp,
        page_array: &mut [Option<Pfn>],
    ) -> usize {
        let first_empty = page_array.iter().position(Option::is_none).unwrap_or(page_array.len());
        let wanted = page_array[first_empty..].iter().filter(|slot| slot.is_none()).count();
        let rest = &mut page_array[first_empty..];
        if wanted == rest.len() {
            // Every slot from the first empty one on is empty (the usual
            // call): fill them in order without looking.
            let mut slots = rest.iter_mut();
            let filled = self.bulk_take(lists, gfp, wanted, move |pfn| {
                if let Some(slot) = slots.next() {
                    *slot = Some(pfn);
                }
            });
            return first_empty + filled;
        }
        let mut slots = rest.iter_mut().filter(|slot| slot.is_none());
        self.bulk_take(lists, gfp, wanted, move |pfn| {
            if let Some(slot) = slots.next() {
                *slot = Some(pfn);
            }
        });
        page_array.iter().position(Option::is_none).unwrap_or(page_array.len())
    }

    pub(crate) fn alloc_pages_bulk_vec_on(&self, cpu: usize, gfp: Gfp, nr_pages: usize, out: &mut Vec<Pfn>) -> usize {
        // No request can get more pages than the map has; and the vector
        // grows only by what the heap grants, never by an aborting reserve.
        let mut wanted = nr_pages.min(self.mem.pages.len());
        if out.try_reserve(wanted).is_err() {
            wanted = out.capacity() - out.len();
        }
        // `bulk_take` hands out at most `wanted` pages: every push fits the
        // capacity reserved above.
        self.bulk_take(&mut Locked(cpu), gfp, wanted, move |pfn| out.push(pfn))
    }

    /// Allocates up to `wanted` order-0 pages, handing each to `put`.
    /// (`put` travels by value, and back, so that the walk keeps its state,
    /// such as a slot iterator, in registers.)
    fn bulk_take<P: FnMut(Pfn)>(&self, lists: &mut impl Lists, gfp: Gfp, wanted: usize, mut put: P) -> usize {
        if wanted == 0 {
            return 0;
        }
        if wanted > 1 && self.pcp_serves(gfp) {
            let taken;
            (taken, put) = self.bulk_take_pcp(lists, gfp, wanted, put);
            if taken > 0 {
                return taken;
            }
        }
        let nid = self.node_of_cpu(lists.cpu());
        match self.alloc_slow(lists, nid, gfp, 0, false) {
            Ok(pfn) => {
                put(pfn);
                1
            }
            Err(_) => 0,
        }
    }

    /// The batched part: pick the first zone whose LOW watermark covers the
    /// whole request, then pop pages under one pageset-lock hold.
    fn bulk_take_pcp<P: FnMut(Pfn)>(&self, lists: &mut impl Lists, gfp: Gfp, wanted: usize, mut put: P) -> (usize, P) {
        let Ok(highest) = gfp_zone(gfp) else {
            return (0, put);
        };
        let mt = self.request_migratetype(gfp);
        let flags = fast_path_alloc_flags(gfp, false).with_watermark(Watermark::Low);
        let this_node = gfp.contains(Gfp::THISNODE);
        let nid = self.node_of_cpu(lists.cpu());
        let Some(zi) = self.zonelist(nid).iter().copied().find(|&zi| {
            let z = &self.zones[zi];
            z.zone_type <= highest
                && (!this_node || z.nid == nid)
                && z.watermark_fast(0, z.watermark(Watermark::Low) + wanted as u64, highest, flags)
        }) else {
            return (0, put);
        };
        let Some(mut pcp) = lists.get(self, zi) else {
            return (0, put);
        };
        pcp.note_alloc();
        let mut taken = 0;
        loop {
            let n;
            (n, put) = self.take_run(&mut pcp, gfp, mt, wanted - taken, put);
            taken += n;
            // Linux's rmqueue_bulk: refill under one zone-lock hold.
            if taken == wanted || self.pcp_refill(&mut pcp, zi, 0, mt, flags).is_none() {
                break;
            }
        }
        pcp.counters.alloc_pages += taken as u64;
        (taken, put)
    }

    /// Pops up to `want` order-0 pages of `mt` off a locked pageset's list
    /// and prepares them (`prep_new_page`), handing each to `put`; returns
    /// how many. Out of line so that the walk keeps its few values in
    /// registers: the list link it follows is the loop's critical path.
    #[inline(never)]
    fn take_run<P: FnMut(Pfn)>(
        &self,
        pcp: &mut PcpState,
        gfp: Gfp,
        mt: MigrateType,
        want: usize,
        mut put: P,
    ) -> (usize, P) {
        // `prep_new_page` for an order-0 page is two stores: the private
        // word, then state and refcount in one.
        let allocated = DescWord::allocated(PageFlags::ALLOCATED, 0, mt as u8, 1);
        let base = self.mem.base_pfn;
        let taken = pcp.pop_run(self.mem.pages.descs(), order_to_pindex(mt, 0), want, |idx, page| {
            // Poisoned while cached: drop it for good, as every pop does.
            if self.hwpoisoned_with_flag(page.has(PageFlags::HWPOISON), idx) {
                self.drop_poisoned(idx);
                return false;
            }
            self.prep_order0(page, idx, gfp, mt, allocated, false);
            put(Pfn(base + u64::from(idx)));
            true
        });
        (taken, put)
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
        let mut held: Option<(usize, LockGuard<'_, PcpState>)> = None;
        // Bad pages are published once every page is placed and the
        // pageset is unlocked (the hooks are the embedder's code).
        let mut bad = BadPages::default();
        let mut i = 0;
        while i < pfns.len() {
            if let Some(stretch) = self.start_stretch(cpu, pfns[i], &mut held) {
                if let Some((_, pcp)) = held.as_mut() {
                    let rest = &pfns[i..];
                    let n = if rest.len() <= STRETCH_SHORT {
                        self.free_stretch::<STRETCH_SHORT>(pcp, rest, stretch)
                    } else if rest.len() <= 2 * STRETCH_SHORT {
                        self.free_stretch::<{ 2 * STRETCH_SHORT }>(pcp, rest, stretch)
                    } else {
                        self.free_stretch::<STRETCH_MAX>(pcp, rest, stretch)
                    };
                    done += n;
                    i += n;
                    if n > 0 {
                        continue;
                    }
                }
            }
            // Everything else, one entry at a time.
            match self.put_for_batch(pfns[i], resolve_tails, &mut bad) {
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
            i += 1;
        }
        drop(held);
        self.publish_bad_pages(bad);
        match first {
            None => Ok(done),
            Some(first) => Err(BulkFreeError { done, failed, first }),
        }
    }

    /// Sets up a stretch of the fast free starting at `pfn`, if it looks
    /// like the common entry (an order-0 page with its only reference and
    /// nothing `free_pages_prepare` would flag) and its pageblock's pages
    /// go to a pcp list: leaves that zone's pageset in `held`. `None` sends
    /// the entry down the general path.
    fn start_stretch<'a>(
        &'a self,
        cpu: usize,
        pfn: Pfn,
        held: &mut Option<(usize, LockGuard<'a, PcpState>)>,
    ) -> Option<Stretch> {
        let (idx, page) = self.pfn_to_desc(pfn)?;
        if !page.load_word().is_plain_order0(1) {
            return None;
        }
        let (zi, mt) = self.block_list(idx)?;
        if held.as_ref().is_none_or(|(z, _)| *z != zi) {
            // One pageset lock at a time.
            drop(held.take());
            *held = Some((zi, self.try_lock_pcp(cpu, zi)?));
        }
        // Pending poison sends every free to the buddy (checked under the
        // pageset lock, as `pcp_free_locked` does: memory_failure drains
        // after it raises the count).
        if self.hwpoison.any() {
            return None;
        }
        let pageblock_order = self.mem.geometry.pageblock_order;
        Some(Stretch {
            zi,
            pindex: order_to_pindex(mt, 0),
            mt,
            block: idx >> pageblock_order,
            pageblock_order,
            cached: DescWord::cached(mt as u8),
        })
    }

    /// The fast free: frees the leading entries of `pfns` (at most
    /// `STRETCH_MAX`) that are common entries of pageblocks whose pages go
    /// to the stretch's list onto that list of the held pageset `pcp`;
    /// returns how many.
    ///
    /// Per page: one load validates the whole descriptor word, and one
    /// compare-and-swap from exactly that word drops the last reference
    /// and marks the page as cached. A racing get_page or flag change makes
    /// it fail and the entry takes the general path: Linux's
    /// `put_page_testzero` stays an atomic read-modify-write, as it must
    /// while other threads may hold speculative references. The pages go
    /// on the list in one push that writes each descriptor's links once,
    /// and statistics, `high` tuning and the spill decision run once for
    /// the stretch (Linux's `free_unref_folios` runs
    /// `free_unref_page_commit` per folio).
    #[inline]
    fn free_stretch<const MAX: usize>(&self, pcp: &mut PcpState, pfns: &[Pfn], stretch: Stretch) -> usize {
        let mut idxs = [0; MAX];
        let mut n = 0;
        // Pages of another pageblock stay in the stretch when their block
        // goes to the same list: pages recycled through the per-CPU caches
        // come back interleaved from several blocks, and a stretch per
        // block cost a lock and a spill check per handful of pages.
        let mut block = stretch.block;
        loop {
            let (added, crossed) = self.stretch_run(&pfns[n..], block, &stretch, &mut idxs[n..]);
            n += added;
            if !crossed {
                break;
            }
            // `pfns[n]` is in the table and starts another pageblock.
            let idx = (pfns[n].0 - self.mem.base_pfn) as PageIdx;
            if !self.goes_to_list(idx, stretch.zi, stretch.mt) {
                break;
            }
            block = idx >> stretch.pageblock_order;
        }
        if n > 0 {
            let zone = &self.zones[stretch.zi];
            pcp.push_run(self.mem.pages.descs(), stretch.pindex, &idxs[..n]);
            pcp.counters.free_pages += n as u64;
            let spill = pcp.pages_to_spill_batch(n as u32, zone.below_high.load(Relaxed));
            if spill > 0 {
                self.spill(zone, pcp, spill, stretch.pindex);
            }
        }
        n
    }

    /// The common entries at the start of `pfns` in pageblock `block`,
    /// each validated, its reference dropped and marked cached (one
    /// compare-and-swap), into `idxs`: how many, and whether the run ended
    /// at a common-looking entry of another pageblock.
    #[inline(always)]
    fn stretch_run(&self, pfns: &[Pfn], block: PageIdx, stretch: &Stretch, idxs: &mut [PageIdx]) -> (usize, bool) {
        // Locals, so the stores below do not make the compiler reload them.
        let descs = self.mem.pages.all();
        let base = self.mem.base_pfn;
        let pending = &self.hwpoison;
        let mut n = 0;
        for (slot, &pfn) in idxs.iter_mut().zip(pfns) {
            let Some(page) = pfn.0.checked_sub(base).and_then(|off| descs.get(usize::try_from(off).ok()?)) else {
                break;
            };
            // In range of the table, so the offset fits an index.
            let idx = (pfn.0 - base) as PageIdx;
            let word = page.load_word();
            if !word.is_plain_order0(1) {
                break;
            }
            if idx >> stretch.pageblock_order != block {
                return (n, true);
            }
            if pending.any() || !page.drop_last_reference(word, stretch.cached) {
                break;
            }
            *slot = idx;
            n += 1;
        }
        (n, false)
    }

    /// Whether order-0 pages of the pageblock holding `idx` go to list `mt`
    /// of zone `zi` (a stretch crossing into another pageblock).
    #[cold]
    #[inline(never)]
    fn goes_to_list(&self, idx: PageIdx, zi: usize, mt: MigrateType) -> bool {
        self.block_list(idx) == Some((zi, mt))
    }

    /// The zone and pcp list that order-0 pages of the pageblock holding
    /// `idx` go to when freed (the list `pcp_free_locked` would pick);
    /// `None` sends them down the general path (isolated block, order not
    /// cached, a policy that merges before caching, a hole between zones).
    #[inline(always)]
    fn block_list(&self, idx: PageIdx) -> Option<(usize, MigrateType)> {
        let zi = self.zone_index_of(idx)?;
        if self.zones[zi].placement.merges_before_caching() {
            return None;
        }
        Some((zi, self.pcp_list_type(idx, 0)?))
    }

    /// Validates, drops the reference and prepares one entry; returns the
    /// block to free if this was the last reference.
    fn put_for_batch(
        &self,
        pfn: Pfn,
        resolve_tails: bool,
        bad: &mut BadPages,
    ) -> Result<Option<(PageIdx, u32)>, FreeError> {
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
                self.claim_and_prepare_into(idx, order, Claim::ByRefcount, bad)?;
                Ok(Some((idx, order)))
            }
            Some(_) => Ok(None),
        }
    }

    /// Frees a prepared block through the held pageset when it belongs to
    /// the same zone, switching pagesets when the zone changes.
    pub(crate) fn free_prepared_batched<'a>(
        &'a self,
        cpu: usize,
        idx: PageIdx,
        order: u32,
        held: &mut Option<(usize, LockGuard<'a, PcpState>)>,
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
        self.release_prepared(&self.zones[zi], idx, 1 << order, Placement::Auto);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryMapBuilder, PageError, Report};
    use alloc::vec;

    fn map() -> PageAllocator {
        MemoryMapBuilder::with_memory(64 << 20).build().unwrap()
    }

    fn take(mm: &PageAllocator, n: usize) -> Vec<Pfn> {
        let mut slots = vec![None; n];
        assert_eq!(mm.alloc_pages_bulk_with(&mut Locked(0), Gfp::KERNEL, &mut slots), n);
        slots.into_iter().flatten().collect()
    }

    fn cached(mm: &PageAllocator) -> u64 {
        Report::new(mm).zone_snapshots().iter().map(|z| z.pcp_pages).sum()
    }

    #[test]
    fn a_shared_reference_keeps_its_page() {
        let mm = map();
        let pages = take(&mm, 8);
        // A speculative reference (Linux's get_page_unless_zero) taken
        // before the free: the batch drops one reference and frees nothing.
        assert_eq!(mm.get_page(pages[3]), Ok(2));
        let before = cached(&mm);
        assert_eq!(mm.free_pages_bulk_on(0, &pages), Ok(8));
        assert_eq!(cached(&mm), before + 7);
        assert_eq!(mm.page_count(pages[3]), Ok(1));
        assert!(mm.page_flags(pages[3]).unwrap().contains(PageFlags::ALLOCATED));
        Report::new(&mm).check_invariants().unwrap();
        assert_eq!(mm.free_pages(pages[3], 0), Ok(()));
        Report::new(&mm).check_invariants().unwrap();
    }

    #[test]
    fn bad_entries_are_typed_errors_that_change_nothing() {
        let mm = map();
        let pages = take(&mm, 4);
        let pair = mm.alloc_pages(Gfp::KERNEL | Gfp::COMP, 1).unwrap();
        let tail = Pfn(pair.0 + 1);
        let foreign = Pfn(u64::MAX / 2);
        let batch = [pages[0], pages[1], pages[0], tail, foreign, pages[2]];
        let before = cached(&mm);
        let err = mm.free_pages_bulk_on(0, &batch).unwrap_err();
        assert_eq!((err.done, err.failed), (3, 3));
        assert_eq!(err.first, (2, FreeError::DoubleFree(pages[0])));
        assert_eq!(cached(&mm), before + 3, "each valid page cached once");
        assert_eq!(mm.page_count(pair), Ok(1), "the compound page is untouched");
        Report::new(&mm).check_invariants().unwrap();
        // The rest of the batch is still live and frees normally, in any
        // order (the pair with its own order).
        assert_eq!(mm.free_pages_bulk_on(0, &[pair, pages[3]]), Ok(2));
        assert_eq!(mm.get_page(pages[3]), Err(PageError::NotInUse(pages[3])));
        Report::new(&mm).check_invariants().unwrap();
    }

    #[test]
    fn a_page_poisoned_on_the_list_is_dropped_by_the_run_pop() {
        let mm = map();
        let pages = take(&mm, 16);
        assert_eq!(mm.free_pages_bulk_on(0, &pages), Ok(16));
        // Poisoned while cached, without memory_failure's drain: only the
        // pop's check stands between the page and a caller.
        let victim = pages[5];
        let idx = mm.pfn_to_idx(victim).unwrap();
        mm.desc(idx).update_flags_atomic(PageFlags::HWPOISON, PageFlags::EMPTY);
        let again = take(&mm, 16);
        assert!(!again.contains(&victim));
        assert_eq!(crate::Report::new(&mm).stats().hwpoison_offlined, 1);
        assert!(mm.page_flags(victim).unwrap().contains(PageFlags::RESERVED));
        Report::new(&mm).check_invariants().unwrap();
    }

    #[test]
    fn every_batch_size_frees_every_page_once() {
        // Batch sizes on both sides of each index-buffer size the free
        // picks from the entries left.
        let mm = map();
        for batch in 1..=2 * STRETCH_MAX + 3 {
            let pages = take(&mm, batch);
            let before = cached(&mm);
            assert_eq!(mm.free_pages_bulk_on(0, &pages), Ok(batch), "batch {batch}");
            assert!(cached(&mm) <= before + batch as u64);
            for &pfn in &pages {
                assert_eq!(mm.get_page(pfn), Err(PageError::NotInUse(pfn)), "batch {batch}");
            }
            Report::new(&mm).check_invariants().unwrap();
        }
    }

    #[test]
    fn a_batch_past_high_spills_and_a_vec_fill_keeps_order() {
        let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
        let mut out = Vec::new();
        assert_eq!(mm.alloc_pages_bulk_vec_on(0, Gfp::KERNEL, 3000, &mut out), 3000);
        let spills = (0..mm.zones.len()).map(|zi| mm.pcp_totals(zi).0.spills).sum::<u64>();
        for chunk in out.chunks(64) {
            assert_eq!(mm.free_pages_bulk_on(0, chunk), Ok(chunk.len()));
        }
        let after = (0..mm.zones.len()).map(|zi| mm.pcp_totals(zi).0.spills).sum::<u64>();
        assert!(after > spills, "3000 pages do not fit under high");
        Report::new(&mm).check_invariants().unwrap();
        // Slots filled on entry stay; the empty ones are filled around them.
        let (a, b) = (Pfn(u64::MAX - 1), Pfn(u64::MAX));
        let mut slots = [None; 8];
        slots[2] = Some(a);
        slots[5] = Some(b);
        assert_eq!(mm.alloc_pages_bulk_with(&mut Locked(0), Gfp::KERNEL, &mut slots), 8);
        assert_eq!((slots[2], slots[5]), (Some(a), Some(b)));
    }
}
