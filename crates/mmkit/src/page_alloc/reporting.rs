//! Free page reporting: giving free memory back to the OS (Linux's
//! mm/page_reporting.c, which tells a hypervisor which guest pages are
//! free; here the "hypervisor" is the process's own kernel).
//!
//! Owns the reporting pass ([`Tuning::report_free_pages`]), its
//! counters, and (with `std`) the background thread that runs a pass
//! every [`PAGE_REPORTING_DELAY`] ([`FreePageReporter`]). It edits free
//! lists only through `zone::buddy`'s reporting helpers and the ordinary
//! release path, and touches page memory only through
//! `mem::rawmem::RealMemory::discard_pages`. It must not touch the
//! allocation or free fast paths: the pass costs them nothing.
//!
//! # What a pass does
//! On a map with real memory ([`Backing::RealMemory`](crate::Backing)),
//! free blocks of at least the pageblock order (Linux's
//! `page_reporting_order`, 2 MiB by default) that are not yet `REPORTED`
//! are discarded with `madvise(MADV_DONTNEED)`: the OS frees their frames,
//! the process's resident size falls, and the next touch of a page faults
//! in a zero-filled one. Smaller free blocks, per-CPU lists and thread
//! caches are left alone, as in Linux: they are reused soon, and a block
//! below a pageblock is too small to be worth a system call. A metadata-only
//! map has no memory of its own to give back, so a pass does nothing there.
//!
//! # The protocol: isolate, discard unlocked, return
//! A block is never discarded while it is on a free list, where another
//! thread could take it and write it while the OS drops its frames. Per
//! zone, a pass repeats until nothing is left to report:
//! 1. Under the zone lock, take up to [`PAGE_REPORTING_CAPACITY`]
//!    unreported blocks off the lists (largest orders first), while the
//!    zone keeps at least its high watermark free (Linux's
//!    `page_reporting_process_zone` checks the low mark plus a batch).
//!    Each head gets `REPORTED` without `BUDDY`: not free to any list
//!    walk, merge or allocation, not allocated to any free path. The zone's
//!    `reporting_pages` counts them for the invariant checker.
//! 2. With the lock dropped, discard each block. No other thread can reach
//!    them: they are on no list, and no handle to them exists.
//! 3. Under the lock again, free each block through the ordinary release
//!    path (`release_locked`, which also drops a page `memory_failure`
//!    poisoned meanwhile) at the list tail, so that allocations take
//!    resident blocks first (Linux's `__putback_isolated_page` with
//!    `FPI_TO_TAIL`); then mark it `REPORTED` if it is still a free block
//!    of its order. If it merged with a free buddy, the merged block stays
//!    unreported and a later batch discards it again (Linux's rule).
//!
//! `REPORTED` is cleared by the one store every list edit already makes
//! (`zone::buddy::reporting`), so taking a reported block, splitting it
//! or merging it costs nothing extra; pages of a reported block refault on
//! first touch (a page fault and the OS's zeroing per page), which is why
//! reported blocks wait at the tails of their lists.
//!
//! While a batch is out, the zone's free count is lower by up to
//! `PAGE_REPORTING_CAPACITY` blocks (64 MiB with 4 KiB pages), never below
//! the high watermark; an allocation that needs exactly those blocks may
//! take the slow path meanwhile, and `alloc_contig_range` over them reports
//! the range busy, as over any page in use.
//!
//! # When a pass runs
//! The core is `no_std`, so it has no timer of its own: the embedder calls
//! [`report_free_pages`](Tuning::report_free_pages) when it wants
//! memory back (zram's `compact` and `reset` do, after draining the per-CPU
//! lists), or, with `std`, starts a [`FreePageReporter`] on an
//! `Arc<PageAllocator>`, which runs a pass every `delay` (Linux's
//! `page_reporting_delay`, 2 s) until dropped. Linux schedules its worker
//! from the free path once enough high-order pages are free; polling
//! instead keeps the free path untouched, and an idle pass costs one walk
//! of each zone's lists of pageblock order and above under its lock.
#![deny(unsafe_code)]

use crate::mem::page::PageIdx;
use crate::page_alloc::Tuning;
use crate::types::gfp::Watermark;
use crate::zone::buddy::Placement;
use crate::zone::Zone;
use crate::PageAllocator;
use core::sync::atomic::Ordering::Relaxed;
use core::time::Duration;

/// Blocks a pass takes off one zone's lists at a time (Linux's
/// `PAGE_REPORTING_CAPACITY`).
pub const PAGE_REPORTING_CAPACITY: usize = 32;

/// How often a [`FreePageReporter`] runs a pass by default (Linux's
/// `page_reporting_delay`).
pub const PAGE_REPORTING_DELAY: Duration = Duration::from_secs(2);

/// What one reporting pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportSummary {
    /// Blocks discarded and marked `REPORTED`.
    pub blocks: u64,
    /// Pages in those blocks.
    pub pages: u64,
    /// Bytes the OS was asked to drop (whole OS pages of the blocks).
    pub bytes_discarded: u64,
}

impl Tuning<'_> {
    /// The smallest order a reporting pass gives back: the pageblock
    /// order (Linux's default `page_reporting_order`).
    pub fn page_reporting_order(&self) -> u32 {
        self.mm.page_reporting_order()
    }

    /// One free page reporting pass over every zone: free blocks of at
    /// least [`page_reporting_order`](Self::page_reporting_order) whose
    /// memory is still resident are given back to the OS
    /// (`madvise(MADV_DONTNEED)`) and marked `REPORTED`, so the next pass
    /// skips them. Pages of a reported block read zero when allocated
    /// again (zeroed by the OS on first touch; `Gfp::ZERO` still zeroes).
    /// See the module doc of `page_alloc::reporting` for the protocol.
    ///
    /// Does nothing on a map without real memory. Per-CPU lists are not
    /// drained first: call [`drain_all_pages`](crate::Cpus::drain_all_pages)
    /// before, to give back what they hold too. Safe to call from any
    /// thread at any time, concurrently with everything else (also with
    /// another pass); bounded by the free blocks of reporting order, in
    /// batches of [`PAGE_REPORTING_CAPACITY`] per zone lock hold.
    ///
    /// # Examples
    /// ```
    /// use mmkit::{Backing, Cpus, Gfp, HugePages, MemoryMapBuilder, Tuning};
    ///     ///
    /// let mm = MemoryMapBuilder::with_memory(64 << 20)
    ///     .backing(Backing::RealMemory(HugePages::None))
    ///     .build()
    ///     .unwrap();
    /// let pfn = mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 9).unwrap(); // 2 MiB, now resident
    /// mm.free_pages(pfn, 9).unwrap();
    /// Cpus::new(&mm).drain_all_pages();                                     // per-CPU lists to the buddy
    /// let summary = Tuning::new(&mm).report_free_pages();                     // back to the OS
    /// assert!(summary.pages >= 512);
    /// assert_eq!(Tuning::new(&mm).report_free_pages().pages, 0);              // nothing twice
    /// ```
    pub fn report_free_pages(&self) -> ReportSummary {
        if let Some(memory) = self.mm.real_memory() {
            let mut summary = ReportSummary::default();
            for zone in self.mm.zones.iter() {
                self.mm.report_zone(zone, memory, &mut summary);
            }
            self.mm.stats.reporting_passes.fetch_add(1, Relaxed);
            self.mm.stats.reported_pages.fetch_add(summary.pages, Relaxed);
            return summary;
        }
        ReportSummary::default()
    }
}

impl PageAllocator {
    /// The smallest order a reporting pass gives back: the pageblock
    /// order (Linux's default `page_reporting_order`).
    pub(crate) fn page_reporting_order(&self) -> u32 {
        self.mem.geometry.pageblock_order
    }

    /// The pass over one zone: batches of isolate, discard, return.
    fn report_zone(&self, zone: &Zone, memory: &crate::sys::RealMemory, summary: &mut ReportSummary) {
        let cx = zone.cx(&self.mem);
        let order = self.page_reporting_order();
        let mut batch = [(0 as PageIdx, 0u32); PAGE_REPORTING_CAPACITY];
        // Every batch but the last empties PAGE_REPORTING_CAPACITY blocks
        // of at least this order, and a merged block is re-reported at most
        // once per level: this bounds the loop even while other threads
        // keep freeing.
        let max_batches = 2 + (zone.managed_pages >> order) as usize / PAGE_REPORTING_CAPACITY * 2;
        for _ in 0..max_batches {
            let (taken, pages) = {
                let mut state = zone.state.lock();
                let keep_free = zone.watermark(Watermark::High);
                let taken = state.area.isolate_unreported(cx, order, keep_free, &mut batch);
                let pages: u64 = batch[..taken].iter().map(|&(_, o)| 1u64 << o).sum();
                state.reporting_pages += pages;
                zone.publish(&state);
                (taken, pages)
            };
            if taken == 0 {
                return;
            }
            for &(idx, o) in &batch[..taken] {
                summary.bytes_discarded += memory.discard_pages(idx as usize, 1 << o) as u64;
            }
            let mut state = zone.state.lock();
            for &(idx, o) in &batch[..taken] {
                // Prepared as any freed block: a merge with a lower buddy
                // leaves this head unwritten, and it must not stay marked.
                self.desc(idx).clear_reporting_state();
                self.release_locked(&mut state, cx, idx, 1 << o, Placement::Tail);
                if state.area.mark_reported(cx, idx, o) {
                    summary.blocks += 1;
                    summary.pages += 1 << o;
                }
            }
            state.reporting_pages -= pages;
            zone.publish(&state);
            drop(state);
            if taken < PAGE_REPORTING_CAPACITY {
                return;
            }
        }
    }
}

#[cfg(all(feature = "std", not(loom)))]
pub use reporter::FreePageReporter;

#[cfg(all(feature = "std", not(loom)))]
mod reporter {
    use super::*;
    use alloc::sync::Arc;
    use std::sync::{Condvar, Mutex};

    /// A background thread that runs a free page reporting pass
    /// ([`Tuning::report_free_pages`]) every `delay`, until dropped
    /// (Linux's `page_reporting_process` work, rescheduled every
    /// `page_reporting_delay`).
    ///
    /// It holds the allocator through its `Arc`, which is why it is started
    /// on one rather than by the builder. Dropping it wakes the thread and
    /// waits for it (at most one pass).
    ///
    /// # Examples
    /// ```
    /// use mmkit::{Backing, FreePageReporter, HugePages, MemoryMapBuilder, PAGE_REPORTING_DELAY};
    /// use std::sync::Arc;
    ///
    /// let mm = Arc::new(
    ///     MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    /// );
    /// let reporter = FreePageReporter::start(Arc::clone(&mm), PAGE_REPORTING_DELAY).unwrap();
    /// // ... allocate and free; free 2 MiB blocks go back to the OS within 2 s ...
    /// drop(reporter);
    /// ```
    pub struct FreePageReporter {
        stop: Arc<(Mutex<bool>, Condvar)>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl FreePageReporter {
        /// Starts the thread (named `mmkit-reporting`); its first pass runs
        /// `delay` from now.
        ///
        /// # Errors
        /// The OS's error when the thread cannot be created.
        pub fn start(mm: Arc<PageAllocator>, delay: Duration) -> std::io::Result<Self> {
            let stop = Arc::new((Mutex::new(false), Condvar::new()));
            let flag = Arc::clone(&stop);
            let thread = std::thread::Builder::new().name("mmkit-reporting".into()).spawn(move || {
                let (lock, wake) = &*flag;
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    stopped = wake.wait_timeout_while(stopped, delay, |s| !*s).unwrap_or_else(|e| e.into_inner()).0;
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    crate::Tuning::new(&mm).report_free_pages();
                    stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                }
            })?;
            Ok(Self { stop, thread: Some(thread) })
        }
    }

    impl Drop for FreePageReporter {
        fn drop(&mut self) {
            let (lock, wake) = &*self.stop;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
            wake.notify_all();
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }
}
