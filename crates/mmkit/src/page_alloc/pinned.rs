//! Exclusive per-CPU handles for pinned workers: the lock-free fast path.
//!
//! Owns [`PinnedCpu`]: a thread that is the only user of a CPU (a DPDK-style
//! worker, a hypervisor vCPU loop, a trace replayer) takes that CPU's
//! pagesets once and then allocates and frees without touching the pageset
//! lock. Everything else stays as on the shared path: watermarks, refills
//! and spills through the zone lock, the same descriptor checks.
//!
//! Cost: an order-0 allocation with the mask of the previous one is served
//! by the handle's magazine (`page_alloc::magazine`): a watermark check on
//! published counters, a pop from an array and one descriptor store; its
//! free is one load and compare of the descriptor and one store, with no
//! atomic operation, because the page is `LOCAL` to this CPU until it is
//! freed or handed over ([`PinnedCpu::hand_over`]). About 120 instructions
//! a pair (`mmkit bench pcp`, case `pcp_order0_alloc_free`, contender
//! `mmkit_pinned`, times it). Everything else (other orders, frozen pages,
//! another mask's first request, a page with flags or extra references)
//! takes the general path: a list pop and the descriptor stores; the
//! validation loads, the single atomic that makes this caller the page's
//! only freer, and a list push.
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
use crate::mem::sync::LockGuard;
use crate::page_alloc::block::BlockError;
use crate::page_alloc::bulk::BulkFreeError;
use crate::page_alloc::free::Claim;
use crate::page_alloc::magazine::Magazine;
use crate::pcp::cpus::{REQUEST_DRAIN, REQUEST_RESIZE};
use crate::pcp::{pcp_allowed_order, PcpState};
use crate::types::gfp::Gfp;
use crate::{AllocError, FreeError, PageAllocator, Pfn};
use alloc::vec::Vec;
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
/// use mmkit::{Gfp, MemoryMapBuilder, Report};
/// let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
/// let mut cpu1 = mm.pin_cpu(1).unwrap();
/// let pfn = cpu1.alloc_pages(Gfp::KERNEL, 0).unwrap();
/// cpu1.free_pages(pfn, 0).unwrap();
/// assert!(mm.pin_cpu(1).is_err(), "one owner at a time");
/// drop(cpu1);
/// mm.drain_all_pages();
/// Report::new(&mm).check_invariants().unwrap();
/// ```
pub struct PinnedCpu<'a> {
    pub(super) alloc: &'a PageAllocator,
    pub(super) cpu: usize,
    /// The CPU's node, looked up once.
    pub(super) nid: usize,
    /// One held pageset per zone, indexed like `PageAllocator::zones`.
    pub(super) lists: Vec<LockGuard<'a, PcpState>>,
    /// Order-0 pages ahead of the lists (`page_alloc::magazine`).
    pub(super) mag: Magazine<'a>,
}

impl PageAllocator {
    /// Takes CPU `cpu`'s lists for the calling thread until the handle is
    /// dropped. Other threads that land on this CPU use the buddy directly
    /// meanwhile.
    ///
    /// # Errors
    /// [`PinError::NoSuchCpu`], [`PinError::AlreadyPinned`].
    pub fn pin_cpu(&self, cpu: usize) -> Result<PinnedCpu<'_>, PinError> {
        let slot = self.pcp.slots.get(cpu).ok_or(PinError::NoSuchCpu(cpu))?;
        if slot.pinned.swap(true, AcqRel) {
            return Err(PinError::AlreadyPinned(cpu));
        }
        // Other holders keep a pageset only for one operation.
        let lists = (0..self.zones.len()).map(|zi| self.pageset(cpu, zi).lock.lock()).collect();
        // The CPU's order-0 caches too: other threads running there go to
        // the buddy while it is pinned, as they do for its lists.
        self.pin_cpu_caches(cpu, true);
        Ok(PinnedCpu { alloc: self, cpu, nid: self.node_of_cpu(cpu), lists, mag: Magazine::new(self, cpu) })
    }
}

impl<'a> PinnedCpu<'a> {
    /// The pinned CPU.
    pub fn cpu_id(&self) -> usize {
        self.cpu
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
            for (zi, pcp) in self.lists.iter_mut().enumerate() {
                self.alloc.resize_locked(zi, pcp);
            }
        }
        if requests & REQUEST_DRAIN != 0 {
            self.drain_local_pages();
        }
    }

    /// Empties this CPU's lists into the buddy.
    pub fn drain_local_pages(&mut self) {
        self.mag_flush_all();
        for (zi, pcp) in self.lists.iter_mut().enumerate() {
            self.alloc.drain_locked(zi, pcp);
        }
    }

    /// Shrinks this CPU's `high` by an eighth towards its minimum and spills
    /// what no longer fits, at most a batch (Linux's `decay_pcp_high`, which
    /// the vmstat worker runs every second from `refresh_cpu_vm_stats`):
    /// [`PageAllocator::decay_pcp_high`] cannot reach a pinned CPU's lists,
    /// so their owner calls this on its own timer.
    pub fn decay_pcp_high(&mut self) {
        for (zi, pcp) in self.lists.iter_mut().enumerate() {
            self.alloc.decay_locked(zi, pcp);
        }
    }

    /// Allocates like [`PageAllocator::alloc_pages`], from this CPU's lists
    /// without locking them.
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`].
    #[inline]
    pub fn alloc_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if order == 0 {
            if let Some(pfn) = self.mag_alloc(gfp) {
                return Ok(pfn);
            }
            return self.alloc_order0_slow(gfp);
        }
        self.alloc_inner(gfp, order, false)
    }

    /// An order-0 allocation the magazine did not serve: aim it at this
    /// mask and try again, else the general path.
    #[cold]
    fn alloc_order0_slow(&mut self, gfp: Gfp) -> Result<Pfn, AllocError> {
        self.serve_drain_request();
        if self.mag_retarget(gfp) {
            if let Some(pfn) = self.mag_alloc(gfp) {
                return Ok(pfn);
            }
        }
        self.alloc_inner(gfp, 0, false)
    }

    /// Frozen allocation (refcount 0) from this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`].
    pub fn alloc_frozen_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc_inner(gfp, order, true)
    }

    #[inline]
    fn alloc_inner(&mut self, gfp: Gfp, order: u32, frozen: bool) -> Result<Pfn, AllocError> {
        self.serve_drain_request();
        let alloc = self.alloc;
        if alloc.pcp_serves(gfp) && pcp_allowed_order(order, alloc.mem.geometry.pageblock_order) {
            if let Some(pfn) = self.try_fast_alloc(gfp, order, frozen) {
                return Ok(pfn);
            }
        }
        // Everything else (other zones, the slow path) as usual; our own
        // lists are held, so that path goes to the buddy.
        match alloc.alloc_on(self.cpu, self.nid, gfp, order, frozen) {
            Err(AllocError::NoMemory { .. }) if self.holds_pages() => {
                // The slow path's drain cannot reach this CPU's own lists
                // (they are held here): give them back and try once more,
                // as Linux's drain before failing would have.
                self.drain_local_pages();
                alloc.alloc_on(self.cpu, self.nid, gfp, order, frozen)
            }
            other => other,
        }
    }

    /// Whether this CPU caches any page (lists or magazine).
    fn holds_pages(&self) -> bool {
        self.mag_len() > 0 || self.lists.iter().any(|pcp| pcp.count > 0)
    }

    /// The preferred zone only, above its watermark, from the held list.
    #[inline]
    fn try_fast_alloc(&mut self, gfp: Gfp, order: u32, frozen: bool) -> Option<Pfn> {
        let alloc = self.alloc;
        let target = alloc.fast_target(self.nid, gfp, order)?;
        let idx = alloc.pcp_take_locked(&mut self.lists[target.zi], target.zi, order, target.mt, target.flags)?;
        Some(alloc.finish_fast_alloc(&target, idx, order, gfp, frozen))
    }

    /// Frees like [`PageAllocator::free_pages`], onto this CPU's lists
    /// without locking them.
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages`].
    #[inline]
    pub fn free_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if order == 0 && self.mag_free(pfn) {
            return Ok(());
        }
        self.free_pages_general(pfn, order)
    }

    /// Every free the magazine does not take.
    fn free_pages_general(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        self.serve_drain_request();
        self.unlocal_for_free(pfn, order)?;
        let idx = self.alloc.validate_block(pfn, order)?;
        if self.alloc.drop_block_ref(self.cpu, pfn, idx, order)? {
            self.free_claimed(idx, order, Claim::ByRefcount)
        } else {
            Ok(())
        }
    }

    /// Frees a frozen block onto this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::free_frozen_pages`].
    pub fn free_frozen_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        self.serve_drain_request();
        let idx = self.alloc.validate_frozen_block(pfn, order)?;
        self.free_claimed(idx, order, Claim::Frozen)
    }

    #[inline]
    fn free_claimed(&mut self, idx: u32, order: u32, claim: Claim) -> Result<(), FreeError> {
        let alloc = self.alloc;
        alloc.claim_and_prepare(idx, order, claim)?;
        let Some(zi) = alloc.zone_index_of(idx) else {
            return Ok(());
        };
        if let Some(mt) = alloc.pcp_list_type(idx, order) {
            if alloc.pcp_free_locked(&mut self.lists[zi], zi, idx, order, mt) {
                return Ok(());
            }
        }
        alloc.release_prepared(&alloc.zones[zi], idx, 1 << order, crate::zone::buddy::Placement::Auto);
        Ok(())
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
        self.alloc.put_page_on(self.cpu, pfn)
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
    /// [`PageAllocator::alloc_block`]).
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages`].
    pub fn alloc_block(&mut self, owner: &OwnerKey, gfp: Gfp, order: u32) -> Result<PageBlock, AllocError> {
        self.serve_drain_request();
        self.alloc.alloc_block_on(self.cpu, self.nid, owner, gfp, order)
    }

    /// Frees an owned block (see [`PageAllocator::free_block`]).
    ///
    /// # Errors
    /// As [`PageAllocator::free_block`].
    pub fn free_block(&mut self, block: PageBlock) -> Result<(), BlockError> {
        self.serve_drain_request();
        self.alloc.free_block_on(self.cpu, block)
    }

    /// Fills the empty slots of `page_array` with order-0 pages from this
    /// CPU's lists (see [`PageAllocator::alloc_pages_bulk`]).
    pub fn alloc_pages_bulk(&mut self, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize {
        self.serve_drain_request();
        let mut cursor = 0;
        for slot in page_array.iter_mut() {
            if slot.is_none() {
                match self.try_fast_alloc(gfp, 0, false) {
                    Some(pfn) => *slot = Some(pfn),
                    None => break,
                }
            }
            cursor += 1;
        }
        if cursor == 0 && !page_array.is_empty() {
            if let Ok(pfn) = self.alloc.alloc_on(self.cpu, self.nid, gfp, 0, false) {
                page_array[0] = Some(pfn);
                cursor = 1;
            }
        }
        cursor
    }
}

impl Drop for PinnedCpu<'_> {
    fn drop(&mut self) {
        self.hand_over_all();
        self.mag_flush_all();
        let requests = self.alloc.pcp.slots[self.cpu].take_requests();
        if requests != 0 {
            self.serve(requests);
        }
        self.lists.clear();
        self.alloc.pin_cpu_caches(self.cpu, false);
        self.alloc.pcp.slots[self.cpu].pinned.store(false, Release);
    }
}
