//! Exclusive per-CPU handles for pinned workers: the lock-free fast path.
//!
//! Owns [`PinnedCpu`]: a thread that is the only user of a CPU (a DPDK-style
//! worker, a hypervisor vCPU loop, a trace replayer) takes that CPU's
//! pagesets once and then allocates and frees without touching the pageset
//! lock. Everything else stays as on the shared path: watermarks, refills
//! and spills through the zone lock, the same descriptor checks.
//!
//! An order-0 allocation or free goes through the per-CPU cache, here held
//! by the handle (its magazine, `page_alloc::cache::pinned`): with the mask
//! of the previous allocation, a pop and one descriptor store; a free of a
//! page the magazine handed out, one load and compare of the descriptor
//! and one store, with no atomic operation, because the page is `LOCAL` to
//! this CPU until it is freed or handed over ([`PinnedCpu::hand_over`]).
//! Everything else (other orders, another mask's first request, a page
//! with flags or extra references) takes the one slow path with the lists
//! this handle holds (`page_alloc::cpu::Held`): the same list code as the
//! shared path's, without the lock.
//!
//! Blocks of any order: [`PinnedCpu::lock_zone`] holds a zone's lock
//! across calls and serves the buddy's free lists directly, with the same
//! `LOCAL` marking (`page_alloc::locked_zone`).
//!
//! Drains: while a CPU is pinned, `drain_all_pages` cannot take its lists;
//! it raises a flag instead, and the owner drains itself at its next call
//! (or when the handle is dropped). Callers that need the pages back now
//! (contiguous allocation) see the count of such CPUs returned by
//! `drain_all_pages`.
#![deny(unsafe_code)]

use crate::mem::owned::OwnerKey;
use crate::mem::owned::PageBlock;
use crate::page_alloc::block::BlockError;
use crate::page_alloc::bulk::BulkFreeError;
use crate::page_alloc::cache::pinned::Magazine;
use crate::page_alloc::cache::PageCache;
use crate::page_alloc::cpu::Held;
use crate::page_alloc::free::Claim;
use crate::page_alloc::Cpus;
use crate::pcp::cpus::{REQUEST_DRAIN, REQUEST_RESIZE};
use crate::types::gfp::Gfp;
use crate::{AllocError, FreeError, PageAllocator, Pfn};
use core::sync::atomic::Ordering::{AcqRel, Release};

/// Why a CPU could not be pinned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinError {
    /// `cpu >= nr_cpus()`.
    NoSuchCpu(usize),
    /// Another [`PinnedCpu`] holds it.
    AlreadyPinned(usize),
}

impl core::fmt::Display for PinError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoSuchCpu(cpu) => write!(f, "no cpu {cpu}"),
            Self::AlreadyPinned(cpu) => write!(f, "cpu {cpu} is already pinned"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for PinError {}

/// Sole use of one CPU's per-CPU lists; see the module doc.
///
/// ```
/// use mmkit::{Cpus, Gfp, MemoryMapBuilder, Report};
/// let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
/// let mut cpu1 = Cpus::new(&mm).pin_cpu(1).unwrap();
/// let pfn = cpu1.alloc_pages(Gfp::KERNEL, 0).unwrap();
/// cpu1.free_pages(pfn, 0).unwrap();
/// assert!(Cpus::new(&mm).pin_cpu(1).is_err(), "one owner at a time");
/// drop(cpu1);
/// Cpus::new(&mm).drain_all_pages();
/// Report::new(&mm).check_invariants().unwrap();
/// ```
pub struct PinnedCpu<'a> {
    pub(super) alloc: &'a PageAllocator,
    pub(super) cpu: usize,
    /// The CPU's node, looked up once.
    pub(super) nid: usize,
    /// The per-CPU cache this handle holds: its magazine, in front of the
    /// CPU's lists, which it holds too (`page_alloc::cache::pinned`).
    pub(super) cache: PageCache<Magazine<'a>>,
}

impl<'a> Cpus<'a> {
    /// Takes CPU `cpu`'s lists for the calling thread until the handle is
    /// dropped. Other threads that land on this CPU use the buddy directly
    /// meanwhile.
    ///
    /// # Errors
    /// [`PinError::NoSuchCpu`], [`PinError::AlreadyPinned`].
    pub fn pin_cpu(&self, cpu: usize) -> Result<PinnedCpu<'a>, PinError> {
        let mm = self.mm;
        let slot = mm.pcp.slots.get(cpu).ok_or(PinError::NoSuchCpu(cpu))?;
        if slot.pinned.swap(true, AcqRel) {
            return Err(PinError::AlreadyPinned(cpu));
        }
        // Other holders keep a pageset only for one operation.
        let lists = (0..mm.zones.len()).map(|zi| mm.pageset(cpu, zi).lock.lock()).collect();
        // The CPU's order-0 caches too: other threads running there go to
        // the buddy while it is pinned, as they do for its lists.
        mm.pin_cpu_caches(cpu, true);
        Ok(PinnedCpu { alloc: mm, cpu, nid: mm.node_of_cpu(cpu), cache: PageCache(Magazine::new(mm, cpu, lists)) })
    }
}

impl<'a> PinnedCpu<'a> {
    /// The pinned CPU.
    pub fn cpu_id(&self) -> usize {
        self.cpu
    }

    /// The lists this handle holds, as the slow path takes them.
    #[inline(always)]
    fn held(&mut self) -> Held<'_, 'a> {
        Held { cpu: self.cpu, lists: &mut self.cache.0.lists }
    }

    /// Serves what other threads asked of this CPU meanwhile (a drain, a
    /// new `percpu_pagelist_high_fraction`).
    #[inline]
    fn serve_drain_request(&mut self) {
        let requests = self.alloc.pcp.slots[self.cpu].take_requests();
        if requests != 0 {
            self.serve(requests);
        }
    }

    #[cold]
    fn serve(&mut self, requests: u8) {
        if requests & REQUEST_RESIZE != 0 {
            for (zi, pcp) in self.cache.0.lists.iter_mut().enumerate() {
                self.alloc.resize_locked(zi, pcp);
            }
        }
        if requests & REQUEST_DRAIN != 0 {
            self.drain_local_pages();
        }
    }

    /// Empties this CPU's lists (and its magazine) into the buddy.
    pub fn drain_local_pages(&mut self) {
        self.cache.0.flush_all(self.alloc);
        for (zi, pcp) in self.cache.0.lists.iter_mut().enumerate() {
            self.alloc.drain_locked(zi, pcp);
        }
    }

    /// Shrinks this CPU's `high` by an eighth towards its minimum and spills
    /// what no longer fits, at most a batch (Linux's `decay_pcp_high`, which
    /// the vmstat worker runs every second from `refresh_cpu_vm_stats`):
    /// [`Tuning::decay_pcp_high`](crate::Tuning::decay_pcp_high) cannot reach a pinned CPU's lists,
    /// so their owner calls this on its own timer.
    pub fn decay_pcp_high(&mut self) {
        for (zi, pcp) in self.cache.0.lists.iter_mut().enumerate() {
            self.alloc.decay_locked(zi, pcp);
        }
    }

    /// Allocates like [`PageAllocator::alloc_pages`], from this CPU's
    /// magazine and lists without locking them.
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`].
    #[inline(always)]
    pub fn alloc_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if order == 0 {
            if let Some(pfn) = self.cache.take::<false>(self.alloc, None, gfp, false) {
                return Ok(pfn);
            }
            return self.alloc_order0_missed(gfp, false);
        }
        self.alloc_slow(gfp, order, false)
    }

    /// Frozen allocation (refcount 0) from this CPU's magazine and lists.
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`].
    pub fn alloc_frozen_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if order == 0 {
            if let Some(pfn) = self.cache.take::<false>(self.alloc, None, gfp, true) {
                return Ok(pfn);
            }
            return self.alloc_order0_missed(gfp, true);
        }
        self.alloc_slow(gfp, order, true)
    }

    /// An order-0 allocation the magazine did not serve: serve what other
    /// threads asked, aim the magazine at this mask and try again, else the
    /// slow path.
    #[cold]
    fn alloc_order0_missed(&mut self, gfp: Gfp, frozen: bool) -> Result<Pfn, AllocError> {
        self.serve_drain_request();
        if self.cache.0.retarget(self.alloc, self.nid, gfp) {
            if let Some(pfn) = self.cache.take::<false>(self.alloc, None, gfp, frozen) {
                return Ok(pfn);
            }
        }
        self.alloc_slow(gfp, 0, frozen)
    }

    /// The one slow path, with the lists this handle holds.
    fn alloc_slow(&mut self, gfp: Gfp, order: u32, frozen: bool) -> Result<Pfn, AllocError> {
        self.serve_drain_request();
        let (alloc, nid) = (self.alloc, self.nid);
        match alloc.alloc_slow(&mut self.held(), nid, gfp, order, frozen) {
            Err(AllocError::NoMemory { .. }) if self.holds_pages() => {
                // The slow path's drain cannot reach this CPU's own lists
                // (they are held here): give them back and try once more,
                // as Linux's drain before failing would have.
                self.drain_local_pages();
                alloc.alloc_slow(&mut self.held(), nid, gfp, order, frozen)
            }
            other => other,
        }
    }

    /// Whether this CPU caches any page (lists or magazine).
    fn holds_pages(&self) -> bool {
        self.cache.0.len() > 0 || self.cache.0.lists.iter().any(|pcp| pcp.count > 0)
    }

    /// Frees like [`PageAllocator::free_pages`], onto this CPU's magazine
    /// or lists without locking them.
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages`].
    #[inline(always)]
    pub fn free_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if order == 0 && self.cache.give::<false>(self.alloc, pfn, false) {
            return Ok(());
        }
        self.free_pages_slow(pfn, order)
    }

    /// Every free the magazine does not take.
    fn free_pages_slow(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        self.serve_drain_request();
        self.unlocal_for_free(pfn, order)?;
        let alloc = self.alloc;
        let idx = alloc.validate_block(pfn, order)?;
        if alloc.drop_block_ref(&mut self.held(), pfn, idx, order)? {
            alloc.claim_and_free(&mut self.held(), idx, order, Claim::ByRefcount)
        } else {
            Ok(())
        }
    }

    /// Frees a frozen block onto this CPU's magazine or lists.
    ///
    /// # Errors
    /// As [`PageAllocator::free_frozen_pages`].
    pub fn free_frozen_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if order == 0 && self.cache.give::<false>(self.alloc, pfn, true) {
            return Ok(());
        }
        self.serve_drain_request();
        let alloc = self.alloc;
        alloc.free_frozen_pages_on(&mut self.held(), pfn, order)
    }

    /// The allocator this handle pins a CPU of.
    pub fn allocator(&self) -> &'a PageAllocator {
        self.alloc
    }

    /// Drops a reference to the page or compound page holding `pfn` (see
    /// [`PageAllocator::put_page`]); a page of this CPU leaves it first
    /// ([`hand_over`](Self::hand_over)), so the reference drop is the
    /// general path's.
    ///
    /// # Errors
    /// As [`PageAllocator::put_page`].
    pub fn put_page(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        self.serve_drain_request();
        if let Ok(head) = self.alloc.compound_head(pfn) {
            self.hand_over(head)?;
        }
        let alloc = self.alloc;
        alloc.put_page_on(&mut self.held(), pfn)
    }

    /// Frees blocks allocated with refcount 1 (see
    /// [`PageAllocator::free_pages_bulk`]); pages of this CPU leave it
    /// first, as in [`put_page`](Self::put_page).
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages_bulk`].
    pub fn free_pages_bulk(&mut self, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        self.serve_drain_request();
        for &pfn in pfns {
            // A page local to another CPU stays so, for the batch to refuse.
            let _ = self.hand_over(pfn);
        }
        self.alloc.free_pages_bulk_on(self.cpu, pfns)
    }

    /// Allocates a block owned by layer `owner` on this CPU (see
    /// [`Blocks::alloc_block`](crate::Blocks::alloc_block)).
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages`].
    pub fn alloc_block(&mut self, owner: &OwnerKey, gfp: Gfp, order: u32) -> Result<PageBlock, AllocError> {
        self.serve_drain_request();
        self.alloc.alloc_block_on(self.cpu, self.nid, owner, gfp, order)
    }

    /// Frees an owned block (see [`Blocks::free_block`](crate::Blocks::free_block)).
    ///
    /// # Errors
    /// As [`Blocks::free_block`](crate::Blocks::free_block).
    pub fn free_block(&mut self, block: PageBlock) -> Result<(), BlockError> {
        self.serve_drain_request();
        self.alloc.free_block_on(self.cpu, block)
    }

    /// Fills the empty slots of `page_array` with order-0 pages from this
    /// CPU's lists (see [`PageAllocator::alloc_pages_bulk`]), held, so the
    /// bulk walk takes no lock.
    pub fn alloc_pages_bulk(&mut self, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize {
        self.serve_drain_request();
        let alloc = self.alloc;
        alloc.alloc_pages_bulk_with(&mut self.held(), gfp, page_array)
    }

    /// Turns the magazine on (the default) or off. Off, order-0 requests
    /// take the per-CPU lists page by page exactly as Linux's
    /// `rmqueue_pcplist` and `free_frozen_page_commit` do, which a trace
    /// replay that models Linux's lists needs: the magazine hands out the
    /// same pages but not in the same order, and moves pages to and from
    /// the lists in batches, so `high` and spills see them later.
    pub fn set_magazine(&mut self, enabled: bool) {
        self.cache.0.set_enabled(self.alloc, enabled);
    }

    /// Makes page `pfn`, handed out by this handle, an ordinary allocated
    /// page that any thread or path may free or reference (the one atomic a
    /// page pays to leave its CPU). A page that is not this CPU's is left
    /// as it is.
    ///
    /// ```
    /// use mmkit::{Cpus, FreeError, Gfp, MemoryMapBuilder};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
    /// let mut cpu0 = Cpus::new(&mm).pin_cpu(0).unwrap();
    /// let pfn = cpu0.alloc_pages(Gfp::KERNEL, 0).unwrap();
    /// assert!(matches!(mm.free_pages(pfn, 0), Err(FreeError::CpuLocal { cpu: 0, .. })));
    /// cpu0.hand_over(pfn).unwrap(); // from here on, any thread may free it
    /// mm.free_pages(pfn, 0).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`FreeError::OutOfRange`], or [`FreeError::CpuLocal`] for a page
    /// local to another CPU.
    pub fn hand_over(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        let idx = self.alloc.pfn_to_idx(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let page = self.alloc.desc(idx);
        if page.clear_local(self.cpu) {
            self.cache.0.outstanding -= 1;
            return Ok(());
        }
        match page.local_cpu() {
            Some(cpu) if cpu != self.cpu => Err(FreeError::CpuLocal { pfn, cpu }),
            _ => Ok(()),
        }
    }

    /// Before the slow free path: a page local to this CPU becomes an
    /// ordinary one (that path's atomics then apply); one local to another
    /// CPU is left for the validation to refuse. `Err` (and the page stays
    /// `LOCAL`) for a block freed with another order than it was
    /// allocated with.
    fn unlocal_for_free(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        let Some(idx) = self.alloc.pfn_to_idx(pfn) else {
            return Ok(());
        };
        let page = self.alloc.desc(idx);
        if page.local_cpu() != Some(self.cpu) {
            return Ok(());
        }
        let allocated = page.order();
        if order != allocated {
            return Err(FreeError::WrongOrder { pfn, allocated, given: order });
        }
        if page.clear_local(self.cpu) {
            self.cache.0.outstanding -= 1;
        }
        Ok(())
    }

    /// Hands over every page this handle still has out (dropping the
    /// handle): a scan of the descriptor table, paid only when pages are
    /// still out.
    #[cold]
    fn hand_over_all(&mut self) {
        if self.cache.0.outstanding == 0 {
            return;
        }
        for page in self.alloc.mem.pages.all() {
            if page.clear_local(self.cpu) {
                self.cache.0.outstanding -= 1;
                if self.cache.0.outstanding == 0 {
                    break;
                }
            }
        }
    }
}

impl Drop for PinnedCpu<'_> {
    fn drop(&mut self) {
        self.hand_over_all();
        self.cache.0.flush_all(self.alloc);
        let requests = self.alloc.pcp.slots[self.cpu].take_requests();
        if requests != 0 {
            self.serve(requests);
        }
        self.cache.0.lists.clear();
        self.alloc.pin_cpu_caches(self.cpu, false);
        self.alloc.pcp.slots[self.cpu].pinned.store(false, Release);
    }
}
