//! Per-CPU control: the [`Cpus`] view (handles on a named CPU's lists,
//! drains, each CPU's lists and node; pinning is `pinned.rs`'s) and
//! [`CpuHandle`], for callers that name their CPU (deterministic trace
//! replay, tests against a model of the lists).
//!
//! Owns the handle and the view's methods; the list path they take is
//! `cpu.rs`'s, and a handle has no per-CPU cache: the named CPU's lists
//! are reachable from any thread only under their lock, so its calls enter
//! at the slow path's first step.
#![deny(unsafe_code)]

use crate::page_alloc::bulk::BulkFreeError;
use crate::page_alloc::cpu::Locked;
use crate::page_alloc::Cpus;
use crate::pcp::PcpCounters;
use crate::types::gfp::Gfp;
use crate::{AllocError, FreeError, PageAllocator, Pfn};

/// Why a CPU handle could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoSuchCpu {
    /// The CPU asked for.
    pub cpu: usize,
    /// CPUs the allocator was built for.
    pub nr_cpus: usize,
}

impl core::fmt::Display for NoSuchCpu {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "cpu {} out of range (allocator has {} CPUs)", self.cpu, self.nr_cpus)
    }
}

impl<'a> Cpus<'a> {
    /// The calling thread's CPU, folded into the allocator's CPU count
    /// (Linux's `raw_smp_processor_id`): the CPU whose lists the calls
    /// without an explicit CPU use.
    #[inline]
    pub fn current_cpu(&self) -> usize {
        self.mm.current_cpu()
    }

    /// CPUs the allocator keeps lists for.
    pub fn nr_cpus(&self) -> usize {
        self.mm.pcp.nr_cpus
    }

    /// A handle whose operations use CPU `cpu`'s lists, whatever CPU the
    /// caller runs on.
    ///
    /// # Errors
    /// [`NoSuchCpu`] if `cpu >= nr_cpus()`.
    pub fn cpu(&self, cpu: usize) -> Result<CpuHandle<'a>, NoSuchCpu> {
        if cpu < self.mm.pcp.nr_cpus {
            Ok(CpuHandle { alloc: self.mm, cpu })
        } else {
            Err(NoSuchCpu { cpu, nr_cpus: self.mm.pcp.nr_cpus })
        }
    }

    /// Empties CPU `cpu`'s lists for every zone into the buddy. Returns
    /// false if the CPU is pinned ([`Cpus::pin_cpu`]): its owner
    /// was asked to drain and does so at its next operation.
    ///
    /// # Errors
    /// [`IndexError::NoSuchCpu`](crate::IndexError::NoSuchCpu) for a CPU at
    /// or above [`nr_cpus`](Self::nr_cpus); nothing is drained.
    pub fn drain_cpu_pages(&self, cpu: usize) -> Result<bool, crate::IndexError> {
        self.mm.check_cpu(cpu)?;
        Ok(self.mm.drain_cpu_lists(cpu))
    }

    /// Empties the calling CPU's lists (Linux's `drain_local_pages`).
    pub fn drain_local_pages(&self) {
        let _ = self.mm.drain_cpu_lists(self.mm.current_cpu());
    }

    /// Empties every CPU's lists (Linux's `drain_all_pages`). Safe from any
    /// thread at any time: each pageset is locked while it is drained.
    /// Returns the number of pinned CPUs that were only asked to drain.
    ///
    /// It empties every CPU's order-0 cache too (`page_alloc::cache::cpu`),
    /// through the caches' stop protocol: no thread is asked or waited for.
    pub fn drain_all_pages(&self) -> usize {
        (0..self.mm.pcp.nr_cpus).filter(|&cpu| !self.mm.drain_cpu_lists(cpu)).count()
    }

    /// Sizing of CPU `cpu`'s pageset for zone index `zone` (count, high,
    /// batch, high_min, high_max); `None` while the CPU is pinned (its
    /// lists belong to the handle).
    ///
    /// # Errors
    /// [`IndexError`](crate::IndexError) for a CPU or zone the map lacks.
    pub fn pcp_info(&self, cpu: usize, zone: usize) -> Result<Option<PcpInfo>, crate::IndexError> {
        self.mm.check_cpu(cpu)?;
        self.mm.check_zone(zone)?;
        let Some(pcp) = self.mm.lock_pcp_unless_pinned(cpu, zone) else { return Ok(None) };
        Ok(Some(PcpInfo {
            count: pcp.count,
            high: pcp.high,
            batch: pcp.sizing.batch,
            high_min: pcp.sizing.high_min,
            high_max: pcp.sizing.high_max,
            counters: pcp.counters,
        }))
    }

    /// Whether the shared API's order-0 calls go through the per-CPU cache
    /// held by the CPUs
    /// ([`MemoryMapBuilder::cpu_caches`](crate::MemoryMapBuilder::cpu_caches)):
    /// false where restartable sequences are unavailable (`sys`), with a
    /// custom CPU-id source, or when built without it or without per-CPU
    /// lists.
    pub fn has_cpu_caches(&self) -> bool {
        self.mm.cpu_caches.is_some()
    }
}

/// A pageset's sizing and counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpInfo {
    /// Pages cached.
    pub count: u32,
    /// Current spill threshold.
    pub high: u32,
    /// Refill/spill batch.
    pub batch: u32,
    /// Lower bound of `high`.
    pub high_min: u32,
    /// Upper bound of `high`.
    pub high_max: u32,
    /// Event counters.
    pub counters: PcpCounters,
}

/// Allocator operations bound to one CPU's lists. Cheap to copy; made by
/// [`Cpus::cpu`]. Any thread may use any handle (the lists are
/// locked), but a handle per pinned worker keeps each list on one core.
#[derive(Clone, Copy)]
pub struct CpuHandle<'a> {
    alloc: &'a PageAllocator,
    cpu: usize,
}

impl<'a> CpuHandle<'a> {
    /// The CPU this handle uses.
    pub fn cpu_id(&self) -> usize {
        self.cpu
    }
    /// The allocator.
    pub fn allocator(&self) -> &'a PageAllocator {
        self.alloc
    }
    /// [`PageAllocator::alloc_pages`] on this CPU's lists. A handle has
    /// no per-CPU cache (the named CPU's lists are reachable from any
    /// thread only under their lock): it enters at the slow path's first
    /// step, the lists.
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`].
    #[inline]
    pub fn alloc_pages(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc.alloc_slow(&mut Locked(self.cpu), self.alloc.node_of_cpu(self.cpu), gfp, order, false)
    }
    /// [`PageAllocator::alloc_pages_node`] on this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`].
    pub fn alloc_pages_node(&self, nid: usize, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc.alloc_slow(&mut Locked(self.cpu), nid, gfp, order, false)
    }
    /// [`PageAllocator::alloc_frozen_pages`] on this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`].
    pub fn alloc_frozen_pages(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc.alloc_slow(&mut Locked(self.cpu), self.alloc.node_of_cpu(self.cpu), gfp, order, true)
    }
    /// [`PageAllocator::free_pages`] onto this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages`].
    #[inline]
    pub fn free_pages(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        self.alloc.free_pages_on(&mut Locked(self.cpu), pfn, order)
    }
    /// [`PageAllocator::free_frozen_pages`] onto this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::free_frozen_pages`].
    pub fn free_frozen_pages(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        self.alloc.free_frozen_pages_on(&mut Locked(self.cpu), pfn, order)
    }
    /// [`PageAllocator::put_page`] onto this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::put_page`].
    pub fn put_page(&self, pfn: Pfn) -> Result<(), FreeError> {
        self.alloc.put_page_on(&mut Locked(self.cpu), pfn)
    }
    /// [`PageAllocator::alloc_pages_bulk`] from this CPU's lists.
    pub fn alloc_pages_bulk(&self, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize {
        self.alloc.alloc_pages_bulk_with(&mut Locked(self.cpu), gfp, page_array)
    }
    /// [`PageAllocator::alloc_pages_bulk_vec`] from this CPU's lists.
    pub fn alloc_pages_bulk_vec(&self, gfp: Gfp, nr_pages: usize, out: &mut alloc::vec::Vec<Pfn>) -> usize {
        self.alloc.alloc_pages_bulk_vec_on(self.cpu, gfp, nr_pages, out)
    }
    /// [`PageAllocator::free_pages_bulk`] onto this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages_bulk`].
    pub fn free_pages_bulk(&self, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        self.alloc.free_pages_bulk_on(self.cpu, pfns)
    }
    /// [`PageAllocator::release_pages`] onto this CPU's lists.
    ///
    /// # Errors
    /// As [`PageAllocator::release_pages`].
    pub fn release_pages(&self, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        self.alloc.release_pages_on(self.cpu, pfns)
    }
    /// Empties this CPU's lists.
    pub fn drain_local_pages(&self) {
        let _ = self.alloc.drain_cpu_lists(self.cpu);
    }
}
