//! The region's fault handler: one thread per region that reads
//! userfaultfd events and resolves them, keeps each page's state and runs
//! the CLOCK that picks eviction victims.
//!
//! Only this thread maps or drops pages of the region, so its page table
//! view (`PageState::resident`) is exact; user threads only ever block on
//! faults that this thread resolves and wakes. Owns the per-page state;
//! memory access goes through `sys`, storage through [`Zswap`]'s public
//! calls.

use super::sys::Mapping;
use super::uffd::{Event, EventBuffer, FaultKind, Uffd};
use super::{Counters, RegionConfig};
use crate::{KeepEntry, SwpEntry, Zswap, ZswapError, PAGE_SIZE};
use rustix::event::{PollFd, PollFlags};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};

/// Work for the handler besides faults.
pub(crate) enum Request {
    /// Evict down to `keep` resident pages; reply with the pages evicted.
    Reclaim { keep: usize, reply: mpsc::Sender<usize> },
}

/// What the region and its handler share.
pub(crate) struct Shared {
    pub(crate) map: Mapping,
    pub(crate) uffd: Uffd,
    pub(crate) zswap: Arc<Zswap>,
    pub(crate) config: RegionConfig,
    pub(crate) counters: Counters,
    pub(crate) stop: AtomicBool,
    pub(crate) wake_w: OwnedFd,
    pub(crate) requests: Mutex<Vec<Request>>,
}

impl Shared {
    /// Wakes the handler out of `poll`.
    pub(crate) fn kick(&self) {
        let _ = rustix::io::write(&self.wake_w, &[1]);
    }

    pub(crate) fn push(&self, request: Request) {
        self.requests.lock().unwrap_or_else(|p| p.into_inner()).push(request);
        self.kick();
    }
}

/// One page's state, as only the handler sees it.
#[derive(Default)]
struct PageState {
    /// Where the page's last stored copy is, if any.
    swap: Option<SwpEntry>,
    /// Mapped now.
    resident: bool,
    /// Touched since the CLOCK hand last passed (fault or first write).
    referenced: bool,
    /// Differs from its stored copy, or has none: eviction must store it.
    dirty: bool,
}

/// The handler thread's state.
pub(crate) struct Handler {
    shared: Arc<Shared>,
    wake_r: OwnedFd,
    pages: Vec<PageState>,
    resident: usize,
    hand: usize,
    /// The last missing fault's page, to detect sequential runs.
    last_fault: usize,
    buf: Vec<u8>,
}

impl Handler {
    pub(crate) fn new(shared: Arc<Shared>, wake_r: OwnedFd) -> Self {
        let n = shared.map.len() / PAGE_SIZE;
        let around = shared.config.fault_around.min(n);
        Self {
            shared,
            wake_r,
            pages: (0..n).map(|_| PageState::default()).collect(),
            resident: 0,
            hand: 0,
            last_fault: usize::MAX,
            buf: vec![0; around * PAGE_SIZE],
        }
    }

    /// Every swap entry the region holds, for the release: the entries
    /// never leave the handler otherwise.
    pub(crate) fn into_swap_entries(self) -> Vec<SwpEntry> {
        self.pages.into_iter().filter_map(|p| p.swap).collect()
    }

    /// Serves faults and requests until the region is dropped.
    pub(crate) fn run(mut self) -> Self {
        let mut events = EventBuffer::new(64);
        loop {
            let (uffd_ready, wake_ready) = {
                let mut fds = [PollFd::new(&self.shared.uffd, PollFlags::IN), PollFd::new(&self.wake_r, PollFlags::IN)];
                if rustix::event::poll(&mut fds, None).is_err() {
                    continue;
                }
                (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
            };
            if wake_ready {
                let mut sink = [0u8; 64];
                while matches!(rustix::io::read(&self.wake_r, &mut sink), Ok(n) if n > 0) {}
                if self.shared.stop.load(Relaxed) {
                    return self;
                }
                let requests = std::mem::take(&mut *self.shared.requests.lock().unwrap_or_else(|p| p.into_inner()));
                for Request::Reclaim { keep, reply } in requests {
                    let before = self.resident;
                    while self.resident > keep {
                        let want = (self.resident - keep).min(self.shared.config.evict_batch.max(64));
                        if self.evict(want) == 0 {
                            break;
                        }
                    }
                    let _ = reply.send(before - self.resident);
                }
            }
            if uffd_ready {
                let faults: Vec<(usize, bool)> = match self.shared.uffd.read_events(&mut events) {
                    Ok(iter) => iter
                        .filter_map(|event| match event {
                            Event::Pagefault { kind, addr } => {
                                let offset = (addr as usize).wrapping_sub(self.shared.map.as_ptr() as usize);
                                (offset < self.shared.map.len())
                                    .then_some((offset / PAGE_SIZE, kind == FaultKind::WriteProtected))
                            }
                            Event::Other => None,
                        })
                        .collect(),
                    Err(_) => Vec::new(),
                };
                for (index, wp) in faults {
                    if wp {
                        self.write_fault(index);
                    } else {
                        self.missing_fault(index);
                    }
                }
            }
        }
    }

    fn wake(&self, first: usize, n: usize) {
        let _ = self.shared.uffd.wake(self.shared.map.page_addr(first), n * PAGE_SIZE);
    }

    /// A first write to a clean (write-protected) page: it is dirty now.
    fn write_fault(&mut self, index: usize) {
        Counters::bump(&self.shared.counters.wp_faults);
        let page = &mut self.pages[index];
        if page.resident {
            page.dirty = true;
            page.referenced = true;
            let _ = self.shared.uffd.remove_write_protection(self.shared.map.page_addr(index), PAGE_SIZE, true);
        } else {
            // Evicted while the writer waited: it retries and faults again.
            self.wake(index, 1);
        }
    }

    fn missing_fault(&mut self, index: usize) {
        Counters::bump(&self.shared.counters.missing_faults);
        if self.pages[index].resident {
            // Another thread's fault on this page was served first.
            self.wake(index, 1);
            return;
        }
        let budget = self.shared.config.resident_budget;
        if self.resident >= budget {
            let want = (self.resident + 1 - budget).max(self.shared.config.evict_batch.min(budget));
            self.evict(want);
        }
        let sequential = self.last_fault.wrapping_add(1) == index;
        self.last_fault = index;
        if self.pages[index].swap.is_none() {
            self.zero_fill(index);
            return;
        }
        // Fault-around: on a sequential run, the next swapped pages come
        // with this one, as far as the budget allows.
        let mut n = 1;
        if sequential {
            let room = budget.saturating_sub(self.resident);
            let max = self.shared.config.fault_around.min(room).min(self.pages.len() - index);
            while n < max && !self.pages[index + n].resident && self.pages[index + n].swap.is_some() {
                n += 1;
            }
        }
        let mut loaded = 0;
        for k in 0..n {
            let Some(e) = self.pages[index + k].swap.as_ref() else { break };
            let page = &mut self.buf[k * PAGE_SIZE..(k + 1) * PAGE_SIZE];
            match self.shared.zswap.swap_in(e, page, KeepEntry::Keep) {
                Ok(()) => loaded += 1,
                Err(_) if k == 0 => {
                    // The data is lost: the page reads as zeros rather than
                    // leaving the faulting thread blocked for ever.
                    Counters::bump(&self.shared.counters.load_failures);
                    self.zero_fill(index);
                    return;
                }
                Err(_) => break,
            }
        }
        let n = loaded;
        match self.shared.map.uffd_copy_wp(&self.shared.uffd, index, &self.buf[..n * PAGE_SIZE]) {
            Ok(true) => {
                // Mapped write-protected: any thread's first write is seen,
                // the faulting one's and those of threads that find the page
                // (or a page loaded ahead) present.
                for k in 0..n {
                    let p = &mut self.pages[index + k];
                    p.resident = true;
                    p.dirty = false;
                    p.referenced = k == 0;
                }
                self.resident += n;
                let c = &self.shared.counters;
                c.swap_ins.fetch_add(n as u64, Relaxed);
                c.fault_around_pages.fetch_add(n as u64 - 1, Relaxed);
                c.resident.store(self.resident as u64, Relaxed);
            }
            _ => Counters::bump(&self.shared.counters.load_failures),
        }
        self.wake(index, n);
    }

    fn zero_fill(&mut self, index: usize) {
        if let Ok(true) = self.shared.map.uffd_zeropage(&self.shared.uffd, index) {
            let p = &mut self.pages[index];
            p.resident = true;
            // Writes to the zero page are not write-protect faults: treat it
            // as dirty from the start.
            p.dirty = true;
            p.referenced = true;
            self.resident += 1;
            Counters::bump(&self.shared.counters.zero_fills);
            self.shared.counters.resident.store(self.resident as u64, Relaxed);
        }
        self.wake(index, 1);
    }

    /// Picks up to `n` victims with the CLOCK.
    fn pick_victims(&mut self, n: usize) -> Vec<usize> {
        let mut victims = Vec::with_capacity(n);
        let total = self.pages.len();
        let mut scanned = 0;
        while victims.len() < n && scanned < 2 * total + 1 {
            let i = self.hand;
            self.hand = (self.hand + 1) % total;
            scanned += 1;
            let p = &mut self.pages[i];
            if !p.resident {
                continue;
            }
            if p.referenced {
                p.referenced = false;
                continue;
            }
            victims.push(i);
        }
        victims
    }

    /// Evicts up to `n` pages; returns how many went.
    fn evict(&mut self, n: usize) -> usize {
        let mut victims = self.pick_victims(n);
        victims.sort_unstable();
        let mut page = vec![0u8; PAGE_SIZE];
        let mut gone = Vec::with_capacity(victims.len());
        for &v in &victims {
            let state = &self.pages[v];
            if !state.dirty && state.swap.is_some() {
                Counters::bump(&self.shared.counters.evicted_clean);
                gone.push(v);
                continue;
            }
            // Stop writers while the page is read and stored.
            let addr = self.shared.map.page_addr(v);
            let _ = self.shared.uffd.write_protect(addr, PAGE_SIZE);
            self.shared.map.read(v * PAGE_SIZE, &mut page);
            let old = self.pages[v].swap.take();
            match self.store(old, &page) {
                Ok(entry) => {
                    self.pages[v].swap = Some(entry);
                    gone.push(v);
                }
                Err(old) => {
                    self.pages[v].swap = old;
                    Counters::bump(&self.shared.counters.evict_failures);
                    let _ = self.shared.uffd.remove_write_protection(addr, PAGE_SIZE, true);
                }
            }
        }
        // Drop the victims in runs of neighbours, one madvise per run.
        let mut k = 0;
        while k < gone.len() {
            let mut run = 1;
            while k + run < gone.len() && gone[k + run] == gone[k] + run {
                run += 1;
            }
            let _ = self.shared.map.dontneed(gone[k], run);
            // Writers that waited on the write protection fault again.
            self.wake(gone[k], run);
            k += run;
        }
        for &v in &gone {
            let p = &mut self.pages[v];
            p.resident = false;
            p.dirty = false;
            p.referenced = false;
        }
        self.resident -= gone.len();
        let c = &self.shared.counters;
        c.evictions.fetch_add(gone.len() as u64, Relaxed);
        c.resident.store(self.resident as u64, Relaxed);
        gone.len()
    }

    /// Stores a dirty page: over its old slot when it has one (the store
    /// replaces the old entry), else in a new slot. On failure the old
    /// entry comes back, still the page's.
    fn store(&self, old: Option<SwpEntry>, page: &[u8]) -> Result<SwpEntry, Option<SwpEntry>> {
        let zswap = &self.shared.zswap;
        match old {
            Some(entry) => match zswap.zswap_store(&entry, page) {
                Ok(()) => Ok(entry),
                Err(ZswapError::Rejected(_)) => match zswap.swap_writepage(&entry, page) {
                    Ok(()) => Ok(entry),
                    Err(_) => Err(Some(entry)),
                },
                Err(_) => Err(Some(entry)),
            },
            None => zswap.swap_out(page).map_err(|_| None),
        }
    }
}

impl Counters {
    pub(crate) fn bump(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}
