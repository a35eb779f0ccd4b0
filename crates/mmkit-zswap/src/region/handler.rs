//! The region's handler thread: reads userfaultfd events (the faults of
//! raw accesses through the region's address; the region's own accessors
//! load pages in their own threads and do not fault) and resolves them
//! with the `pager`, and between events is the background reclaimer,
//! evicting down to the low mark once a load has woken it at the high one.
//!
//! In `SIGBUS` mode it also does the loads the faulting threads' handlers
//! hand to it (`fault`'s hand-offs). It blocks the program's asynchronous
//! signals, so that none of the program's handlers runs on it, and is
//! region code for its whole life (`signal::RegionCode`: an allocator
//! whose heap is a region serves it from elsewhere). Generic over the
//! operating system's facade, like the pager: the policy tests run it on
//! the in-memory fake.
//!
//! Owns only its load buffer; everything else is the `pager`'s shared
//! state.

use super::os::{FaultKind, Os};
use super::page::{self, EVICTING, LOADING, RESIDENT};
use super::pager::Shared;
use super::signal::RegionCode;
use super::Counters;
use crate::PAGE_SIZE;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

/// The handler thread's state.
pub(crate) struct Handler<O: Os> {
    shared: Arc<Shared<O>>,
    /// Its load buffer (`fault_around` pages).
    buf: Vec<u8>,
}

/// Says the thread is gone when it returns (or unwinds), so that nothing
/// waits on it.
struct Alive<'a, O: Os>(&'a Shared<O>);

impl<O: Os> Drop for Alive<'_, O> {
    fn drop(&mut self) {
        self.0.handler_alive.store(false, SeqCst);
    }
}

impl<O: Os> Handler<O> {
    pub(crate) fn new(shared: Arc<Shared<O>>) -> Self {
        let buf = vec![0u8; shared.config.fault_around * PAGE_SIZE];
        Self { shared, buf }
    }

    /// Serves faults, hand-offs and reclaim until the region is dropped.
    pub(crate) fn run(mut self) {
        let shared = self.shared.clone();
        let _alive = Alive(&shared);
        // Everything this thread does is the region's own code (a global
        // allocator whose heap is a region serves it elsewhere).
        let _region_code = RegionCode::enter();
        // The program's signals land on its own threads, never here.
        std::mem::forget(O::block_signals());
        let mut faults = Vec::with_capacity(64);
        loop {
            let reclaiming = self.shared.reclaim_wanted.load(Relaxed);
            // While reclaiming, only look for events between batches.
            let ready = self.shared.os.wait(reclaiming);
            if ready.kicked {
                self.shared.os.drain_kicks();
                if self.shared.stop.load(Relaxed) {
                    return;
                }
                let mut buf = std::mem::take(&mut self.buf);
                self.shared.serve_handoffs(&mut buf);
                self.buf = buf;
            }
            if ready.faults {
                faults.clear();
                self.shared.os.read_faults(&mut faults);
                for &(index, kind) in &faults {
                    match kind {
                        FaultKind::WriteProtected => self.write_fault(index),
                        FaultKind::Missing => self.missing_fault(index, false),
                        FaultKind::MissingWrite => self.missing_fault(index, true),
                    }
                }
            } else if reclaiming && !ready.kicked {
                self.reclaim_step();
            }
        }
    }

    /// One batch of background eviction; the reclaimer stops at the low
    /// mark, or when nothing more can be evicted.
    fn reclaim_step(&self) {
        let (low, _) = self.shared.marks();
        let resident = self.shared.resident();
        if resident <= low {
            self.shared.reclaim_wanted.store(false, Relaxed);
            return;
        }
        let gone = self.shared.evict((resident - low).min(self.shared.config.evict_batch));
        self.shared.counters.background_evictions.fetch_add(gone as u64, Relaxed);
        if gone == 0 {
            self.shared.reclaim_wanted.store(false, Relaxed);
        }
    }

    /// A raw write to a clean (write-protected) page.
    fn write_fault(&self, index: usize) {
        Counters::bump(&self.shared.counters.wp_faults);
        let state = &self.shared.states[index];
        // Pinned, the page cannot be evicted while it is made writable; one
        // being evicted is left to the eviction, which wakes the writer.
        let flags = loop {
            match page::try_pin(state) {
                Some(flags) => break flags,
                None if page::defer_to_eviction(state) => return,
                // The eviction ended meanwhile: pin the page as it is now.
                None => continue,
            }
        };
        if flags & RESIDENT != 0 {
            self.shared.make_writable(index);
        } else {
            // Evicted while the writer waited: it retries and faults again.
            self.shared.wake(index, 1);
        }
        page::unpin(state);
    }

    /// A raw access touched a missing page.
    fn missing_fault(&mut self, index: usize, write: bool) {
        Counters::bump(&self.shared.counters.missing_faults);
        let state = &self.shared.states[index];
        loop {
            if page::try_claim_load(state) {
                // Waking is the copy's; a failed load poisons the page (the
                // faulting thread gets SIGBUS, as from a swap-in I/O error in
                // the kernel) and keeps its stored copy.
                let _ = self.shared.load_in_thread(index, write, true, Some(&mut self.buf));
                return;
            }
            let flags = page::flags(state);
            if flags & (RESIDENT | EVICTING | LOADING) == RESIDENT {
                if self.shared.os.is_mapped(index) {
                    // Another thread's load came first.
                    self.shared.wake(index, 1);
                    return;
                }
                // Marked mapped and not there: the program dropped it.
                if page::try_claim_reload(state) {
                    self.shared.dropped_by_program();
                    let _ = self.shared.load_in_thread(index, write, true, Some(&mut self.buf));
                    return;
                }
                continue;
            }
            if flags & LOADING != 0 {
                // Its loader's copy (or, if the load fails, its own wake)
                // wakes the faulting thread.
                return;
            }
            if page::defer_to_eviction(state) {
                // The eviction wakes the faulting thread once it has
                // updated the state, so that the thread's next fault finds
                // the page free to load.
                return;
            }
            // The eviction ended between the looks: resolve it again.
        }
    }
}
