//! The region's handler thread: reads userfaultfd events (the faults of
//! raw accesses through the region's address; the region's own accessors
//! load pages in their own threads and do not fault) and resolves them
//! with the `pager`, and between events is the background reclaimer,
//! evicting down to the low mark once a load has woken it at the high one.
//!
//! Owns only its wake-up pipe's reading end; everything else is the
//! `pager`'s shared state.

use super::page::{self, EVICTING, LOADING, RESIDENT};
use super::pager::Shared;
use super::uffd::{Event, EventBuffer, FaultKind};
use super::Counters;
use crate::PAGE_SIZE;
use rustix::event::{PollFd, PollFlags, Timespec};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The handler thread's state.
pub(crate) struct Handler {
    shared: Arc<Shared>,
    wake_r: OwnedFd,
}

impl Handler {
    pub(crate) fn new(shared: Arc<Shared>, wake_r: OwnedFd) -> Self {
        Self { shared, wake_r }
    }

    /// Serves faults and reclaims until the region is dropped.
    pub(crate) fn run(self) {
        let mut events = EventBuffer::new(64);
        let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
        loop {
            let reclaiming = self.shared.reclaim_wanted.load(Relaxed);
            let (uffd_ready, wake_ready) = {
                let mut fds = [PollFd::new(&self.shared.uffd, PollFlags::IN), PollFd::new(&self.wake_r, PollFlags::IN)];
                // While reclaiming, only look for events between batches.
                if rustix::event::poll(&mut fds, reclaiming.then_some(&zero)).is_err() {
                    continue;
                }
                (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
            };
            if wake_ready {
                let mut sink = [0u8; 64];
                while matches!(rustix::io::read(&self.wake_r, &mut sink), Ok(n) if n > 0) {}
                if self.shared.stop.load(Relaxed) {
                    return;
                }
            }
            if uffd_ready {
                let faults: Vec<(usize, FaultKind)> = match self.shared.uffd.read_events(&mut events) {
                    Ok(iter) => iter
                        .filter_map(|event| match event {
                            Event::Pagefault { kind, addr } => {
                                let offset = (addr as usize).wrapping_sub(self.shared.map.as_ptr() as usize);
                                (offset < self.shared.map.len()).then_some((offset / PAGE_SIZE, kind))
                            }
                            Event::Other => None,
                        })
                        .collect(),
                    Err(_) => Vec::new(),
                };
                for (index, kind) in faults {
                    match kind {
                        FaultKind::WriteProtected => self.write_fault(index),
                        FaultKind::Missing => self.missing_fault(index, false),
                        FaultKind::MissingWrite => self.missing_fault(index, true),
                    }
                }
            } else if reclaiming && !wake_ready {
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
    fn missing_fault(&self, index: usize, write: bool) {
        Counters::bump(&self.shared.counters.missing_faults);
        let state = &self.shared.states[index];
        loop {
            if page::try_claim_load(state) {
                // Waking is the copy's; a failed load poisons the page (the
                // faulting thread gets SIGBUS, as from a swap-in I/O error in
                // the kernel) and keeps its stored copy.
                let _ = self.shared.timed_load(index, write, true);
                return;
            }
            let flags = page::flags(state);
            if flags & (RESIDENT | EVICTING | LOADING) == RESIDENT {
                // Another thread's load came first.
                self.shared.wake(index, 1);
                return;
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
