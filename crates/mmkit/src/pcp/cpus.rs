//! Which CPU a call runs on, and the per-CPU state beside the pagesets:
//! the pagesets themselves (one per CPU and zone), each CPU's node, the
//! pinned flag and the requests other threads leave for a pinned owner.
//!
//! Owns `PerCpu` and the default CPU-id source; the list mechanics are in
//! `pcp`'s `mod.rs`, and what the allocator does with a CPU's lists is
//! `page_alloc::cpu`'s. Must not take a zone lock.
#![deny(unsafe_code)]

use crate::pcp::Pageset;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU8};

/// The per-CPU layer's state in the allocator.
pub(crate) struct PerCpu {
    /// Pagesets, indexed `cpu * nr_zones + zone`.
    pub(crate) pagesets: Vec<Pageset>,
    /// Per-CPU flags and requests.
    pub(crate) slots: Vec<CpuSlot>,
    /// CPUs the allocator keeps lists for.
    pub(crate) nr_cpus: usize,
    /// `percpu_pagelist_high_fraction` in force (0: auto-tuned).
    pub(crate) high_fraction: AtomicU32,
    /// The embedder's CPU-id source.
    pub(crate) cpu_id: fn() -> usize,
    /// Node of each CPU.
    pub(crate) cpu_nodes: Vec<usize>,
    /// False when built with `per_cpu_lists(false)`.
    pub(crate) enabled: bool,
    /// Only movable pages use the lists (the placement policy's
    /// `pcp_movable_only`, with grouping by mobility on).
    pub(crate) movable_only: bool,
}

impl PerCpu {
    /// State for `nr_cpus` CPUs (at least one) with `pagesets` already
    /// sized; CPUs missing from `cpu_nodes` are on node 0.
    pub(crate) fn new(
        nr_cpus: usize,
        pagesets: Vec<Pageset>,
        cpu_id: fn() -> usize,
        cpu_nodes: &[usize],
        high_fraction: u32,
        enabled: bool,
    ) -> Self {
        let nr_cpus = nr_cpus.max(1);
        Self {
            pagesets,
            slots: (0..nr_cpus).map(|_| CpuSlot::default()).collect(),
            nr_cpus,
            high_fraction: AtomicU32::new(high_fraction),
            cpu_id,
            cpu_nodes: (0..nr_cpus).map(|cpu| cpu_nodes.get(cpu).copied().unwrap_or(0)).collect(),
            enabled,
            movable_only: false,
        }
    }
}

/// Makes the next [`default_cpu_id`] call ask the kernel again.
#[inline]
pub(crate) fn forget_cached_cpu() {
    crate::sys::forget_cpu_id();
}

/// The CPU id source when the embedder gives none: the OS layer's
/// (`sched_getcpu` on Linux, CPU 0 where the target cannot tell).
///
/// The answer is cached per thread and refreshed every 64 calls, and at
/// once after a pageset was found busy: a thread that migrates keeps using
/// its old CPU's lists for a few operations, which costs nothing in
/// correctness (the lists are locked) and saves a call per operation.
pub(crate) fn default_cpu_id() -> usize {
    crate::sys::cpu_id()
}

/// Per-CPU flags kept outside the pagesets, padded to a cache line.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct CpuSlot {
    /// A [`PinnedCpu`](crate::PinnedCpu) holds this CPU's pagesets.
    pub pinned: AtomicBool,
    /// Work other threads asked of a pinned CPU's owner (`REQUEST_*`
    /// bits); the owner serves it at its next operation.
    requests: AtomicU8,
}

/// Empty the pagesets (`drain_all_pages`).
pub(crate) const REQUEST_DRAIN: u8 = 1;
/// Re-read `percpu_pagelist_high_fraction`.
pub(crate) const REQUEST_RESIZE: u8 = 2;

impl CpuSlot {
    /// Asks the pinned owner for `bits` of work.
    pub(crate) fn request(&self, bits: u8) {
        self.requests.fetch_or(bits, Release);
    }

    /// Whether any request is pending (one relaxed load).
    #[inline(always)]
    pub(crate) fn has_requests(&self) -> bool {
        self.requests.load(Relaxed) != 0
    }

    /// Takes the pending requests (one load when there are none).
    #[inline]
    pub(crate) fn take_requests(&self) -> u8 {
        if self.requests.load(Relaxed) == 0 {
            0
        } else {
            self.requests.swap(0, Acquire)
        }
    }
}
