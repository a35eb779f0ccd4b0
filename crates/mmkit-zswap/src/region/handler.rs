//! The region's fault handler: one thread per region that reads
//! userfaultfd events and requests, maps and drops pages, and runs the
//! CLOCK that picks eviction victims.
//!
//! Only this thread maps or drops pages of the region, so the `RESIDENT`
//! flags it keeps in the shared page states (`page`) are exact. Accessors
//! pin a page and ask this thread to map it ([`Request::Load`]) before
//! they touch it, so that a failed load reaches them as an error; raw
//! accesses fault, and a failed load poisons their page. Owns the
//! handler-private page state (referenced, dirty) and the stored copies
//! (`slots`); memory access goes through `sys`, storage through
//! [`Zswap`]'s public calls.

use super::page::{self, EVICTING, FAILED, RESIDENT};
use super::slots::Slots;
use super::sys::Mapping;
use super::uffd::{Event, EventBuffer, FaultKind, Uffd};
use super::{Counters, RegionConfig};
use crate::{Zswap, PAGE_SIZE};
use rustix::event::{PollFd, PollFlags};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};

/// Work for the handler besides faults.
pub(crate) enum Request {
    /// Evict down to `keep` resident pages; reply with the pages evicted.
    Reclaim { keep: usize, reply: mpsc::Sender<usize> },
    /// Map page `index`, which the asker has pinned, unless it is mapped
    /// (writable and dirty when `write`); reply whether it is mapped now
    /// (false: its load failed, and its stored copy is kept).
    Load { index: usize, write: bool, reply: mpsc::Sender<bool> },
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
    /// Each page's shared state word (`page`).
    pub(crate) states: Box<[AtomicU32]>,
    /// Whether the kernel has `UFFDIO_POISON` for this region.
    pub(crate) poison: bool,
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

/// The part of a page's state only the handler sees.
#[derive(Clone, Copy, Default)]
struct PageState {
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
    slots: Slots,
    resident: usize,
    hand: usize,
    /// The last page mapped, to detect sequential runs.
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
            pages: vec![PageState::default(); n],
            slots: Slots::new(n),
            resident: 0,
            hand: 0,
            last_fault: usize::MAX,
            buf: vec![0; around * PAGE_SIZE],
        }
    }

    /// Frees every stored copy of the region (its release).
    pub(crate) fn release(&self) {
        self.slots.release(&self.shared.zswap, self.shared.config.release);
    }

    fn flags(&self, index: usize) -> u32 {
        page::flags(&self.shared.states[index])
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
                for request in requests {
                    match request {
                        Request::Reclaim { keep, reply } => {
                            let before = self.resident;
                            while self.resident > keep {
                                let want = (self.resident - keep).min(self.shared.config.evict_batch.max(64));
                                if self.evict(want) == 0 {
                                    break;
                                }
                            }
                            let _ = reply.send(before.saturating_sub(self.resident));
                        }
                        Request::Load { index, write, reply } => {
                            let _ = reply.send(self.load_request(index, write));
                        }
                    }
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
            }
        }
    }

    fn wake(&self, first: usize, n: usize) {
        let _ = self.shared.uffd.wake(self.shared.map.page_addr(first), n * PAGE_SIZE);
    }

    /// A first write to a clean (write-protected) page: it is dirty now.
    fn write_fault(&mut self, index: usize) {
        Counters::bump(&self.shared.counters.wp_faults);
        if self.flags(index) & RESIDENT != 0 {
            let page = &mut self.pages[index];
            page.dirty = true;
            page.referenced = true;
            let _ = self.shared.uffd.remove_write_protection(self.shared.map.page_addr(index), PAGE_SIZE, true);
        } else {
            // Evicted while the writer waited: it retries and faults again.
            self.wake(index, 1);
        }
    }

    /// A raw access touched a missing page.
    fn missing_fault(&mut self, index: usize, write: bool) {
        Counters::bump(&self.shared.counters.missing_faults);
        let flags = self.flags(index);
        if flags & RESIDENT != 0 {
            // Another thread's fault (or an accessor's load) came first.
            self.wake(index, 1);
            return;
        }
        if flags & FAILED != 0 {
            // Not poisoned (the kernel cannot): the thread stays blocked
            // until an accessor's load of the page succeeds.
            return;
        }
        match self.map_in(index, write) {
            Some(n) => self.wake(index, n.max(1)),
            None => {
                // Never a page that is not the data: the page is poisoned
                // (the faulting thread gets SIGBUS, as from a swap-in I/O
                // error in the kernel) and its stored copy kept.
                page::set(&self.shared.states[index], FAILED);
                if self.shared.poison {
                    let _ = self.shared.map.uffd_poison(&self.shared.uffd, index);
                }
            }
        }
    }

    /// An accessor's request for page `index`: whether it is mapped now.
    fn load_request(&mut self, index: usize, write: bool) -> bool {
        let flags = self.flags(index);
        if flags & RESIDENT != 0 {
            return true;
        }
        if flags & FAILED != 0 {
            // Drop the poison marker before the retry.
            let _ = self.shared.map.dontneed(index, 1);
            page::clear(&self.shared.states[index], FAILED);
        }
        let mapped = self.map_in(index, write).is_some();
        // Raw accesses blocked on the page (where it could not be
        // poisoned) fault again and find it.
        self.wake(index, 1);
        mapped && self.flags(index) & RESIDENT != 0
    }

    /// Evicts down below the budget if a new page would pass it.
    fn make_room(&mut self) {
        let budget = self.shared.config.resident_budget;
        if self.resident >= budget {
            let want = (self.resident + 1 - budget).max(self.shared.config.evict_batch.min(budget));
            self.evict(want);
        }
    }

    /// Maps page `index`: its stored copy (with the next stored pages on a
    /// sequential run: a page right after the last one mapped), else the
    /// zero page. Returns the pages mapped from `index` on; `None` when the
    /// load of page `index` failed (nothing mapped, the stored copy kept).
    fn map_in(&mut self, index: usize, write: bool) -> Option<usize> {
        let sequential = self.last_fault.wrapping_add(1) == index;
        self.last_fault = index;
        self.make_room();
        if !self.slots.is_stored(index) {
            return Some(self.zero_fill(index));
        }
        // Fault-around: on a sequential run, the next stored pages come
        // with this one, as far as the budget allows.
        let mut n = 1;
        if sequential {
            let room = self.shared.config.resident_budget.saturating_sub(self.resident);
            let max = self.shared.config.fault_around.min(room).min(self.pages.len() - index);
            while n < max && self.flags(index + n) & (RESIDENT | FAILED) == 0 && self.slots.is_stored(index + n) {
                n += 1;
            }
        }
        let mut loaded = 0;
        for k in 0..n {
            let page = &mut self.buf[k * PAGE_SIZE..(k + 1) * PAGE_SIZE];
            match self.slots.load(&self.shared.zswap, index + k, page) {
                Ok(_) => loaded += 1,
                Err(_) if k == 0 => {
                    Counters::bump(&self.shared.counters.load_failures);
                    return None;
                }
                Err(_) => break,
            }
        }
        let placed = self.place(index, loaded, write);
        self.last_fault = index + placed.saturating_sub(1);
        let c = &self.shared.counters;
        c.swap_ins.fetch_add(placed as u64, Relaxed);
        c.fault_around_pages.fetch_add(placed.saturating_sub(1) as u64, Relaxed);
        Some(placed)
    }

    /// Places the `n` pages loaded into the buffer at page `index`: the
    /// first writable and dirty when `write` (a write fault needs no
    /// second, write-protect, fault), the others write-protected and
    /// clean. A partial copy counts the pages it placed and goes on from
    /// the first page it did not place. Returns the pages placed.
    fn place(&mut self, index: usize, n: usize, write: bool) -> usize {
        let mut placed = 0;
        let mut retries = 0;
        while placed < n {
            let at = index + placed;
            let writable = write && placed == 0;
            let end = if writable { 1 } else { n };
            let src = &self.buf[placed * PAGE_SIZE..end * PAGE_SIZE];
            match self.shared.map.uffd_copy(&self.shared.uffd, at, src, !writable) {
                // A page there already: it is not ours to place.
                Ok(0) => break,
                Ok(k) => {
                    for j in at..at + k {
                        page::set(&self.shared.states[j], RESIDENT);
                        self.pages[j] = PageState { referenced: j == index, dirty: writable };
                    }
                    placed += k;
                    self.resident += k;
                    self.shared.counters.resident.store(self.resident as u64, Relaxed);
                }
                // The address space is changing: try again.
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && retries < 16 => retries += 1,
                Err(_) => break,
            }
        }
        placed
    }

    /// Maps the zero page at page `index`; returns the pages mapped.
    fn zero_fill(&mut self, index: usize) -> usize {
        if let Ok(true) = self.shared.map.uffd_zeropage(&self.shared.uffd, index) {
            page::set(&self.shared.states[index], RESIDENT);
            // Writes to the zero page are not write-protect faults: treat it
            // as dirty from the start.
            self.pages[index] = PageState { referenced: true, dirty: true };
            self.resident += 1;
            Counters::bump(&self.shared.counters.zero_fills);
            self.shared.counters.resident.store(self.resident as u64, Relaxed);
            return 1;
        }
        0
    }

    /// Picks up to `n` victims with the CLOCK and marks them `EVICTING`:
    /// a marked page is not picked again (one scan may pass a page twice),
    /// and a pinned one is not picked at all.
    fn pick_victims(&mut self, n: usize) -> Vec<usize> {
        let mut victims = Vec::with_capacity(n);
        let total = self.pages.len();
        let mut scanned = 0;
        while victims.len() < n && scanned < 2 * total {
            let i = self.hand;
            self.hand = (self.hand + 1) % total;
            scanned += 1;
            if self.flags(i) & (RESIDENT | EVICTING) != RESIDENT {
                continue;
            }
            if self.pages[i].referenced {
                self.pages[i].referenced = false;
                continue;
            }
            if page::try_evict(&self.shared.states[i]) {
                victims.push(i);
            }
        }
        victims
    }

    /// Evicts up to `n` pages; returns how many went.
    fn evict(&mut self, n: usize) -> usize {
        let mut victims = self.pick_victims(n);
        victims.sort_unstable();
        let mut page = vec![0u8; PAGE_SIZE];
        let mut stored = Vec::with_capacity(victims.len());
        for &v in &victims {
            if !self.pages[v].dirty && self.slots.is_stored(v) {
                Counters::bump(&self.shared.counters.evicted_clean);
                stored.push(v);
                continue;
            }
            // Stop writers while the page is read and stored; a page that
            // cannot be protected stays (a write could slip past the read).
            let addr = self.shared.map.page_addr(v);
            if self.shared.uffd.write_protect(addr, PAGE_SIZE).is_err() {
                self.keep(v);
                continue;
            }
            self.shared.map.read(v * PAGE_SIZE, &mut page);
            match self.slots.store(&self.shared.zswap, v, &page) {
                Ok(()) => {
                    // Stored and write-protected: clean, whether it goes or
                    // stays.
                    self.pages[v].dirty = false;
                    stored.push(v);
                }
                Err(_) => {
                    let _ = self.shared.uffd.remove_write_protection(addr, PAGE_SIZE, true);
                    self.keep(v);
                }
            }
        }
        // Drop the victims in runs of neighbours, one madvise per run.
        let mut gone = 0;
        let mut k = 0;
        while k < stored.len() {
            let mut run = 1;
            while k + run < stored.len() && stored[k + run] == stored[k] + run {
                run += 1;
            }
            let dropped = self.shared.map.dontneed(stored[k], run).is_ok();
            for &v in &stored[k..k + run] {
                if dropped {
                    page::clear(&self.shared.states[v], RESIDENT | EVICTING);
                    self.pages[v] = PageState::default();
                } else {
                    self.keep(v);
                }
            }
            if dropped {
                gone += run;
            }
            // Writers that waited on the write protection fault again.
            self.wake(stored[k], run);
            k += run;
        }
        self.resident -= gone;
        let c = &self.shared.counters;
        c.evictions.fetch_add(gone as u64, Relaxed);
        c.resident.store(self.resident as u64, Relaxed);
        gone
    }

    /// A victim that could not be evicted stays resident.
    fn keep(&mut self, v: usize) {
        Counters::bump(&self.shared.counters.evict_failures);
        page::clear(&self.shared.states[v], EVICTING);
    }
}

impl Counters {
    pub(crate) fn bump(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}
