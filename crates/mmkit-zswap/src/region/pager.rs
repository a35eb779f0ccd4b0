//! The region's paging, callable from any thread: loading a page (with
//! fault-around), evicting with the CLOCK, making a clean page writable.
//! The transitions are the page states' (`page`) compare-and-swaps, so an
//! accessor loads the page it needs in its own thread, evicts for itself
//! when the region is at its budget (direct reclaim), and the handler
//! thread does the same for raw faults and evicts in the background.
//!
//! Owns what every thread of a region shares: the mapping, the
//! userfaultfd, the page states and slots, the counters and the CLOCK
//! hand. Memory access goes through `sys`, storage through `slots`.

use super::page::{self, DIRTY, EVICTING, FAILED, LOADING, REFERENCED, RESIDENT};
use super::slots::Slots;
use super::sys::Mapping;
use super::times::Times;
use super::uffd::Uffd;
use super::{Counters, RegionConfig};
use crate::{Zswap, PAGE_SIZE};
use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// What every thread of a region shares.
pub(crate) struct Shared {
    pub(crate) map: Mapping,
    pub(crate) uffd: Uffd,
    pub(crate) zswap: Arc<Zswap>,
    pub(crate) config: RegionConfig,
    pub(crate) counters: Counters,
    /// The region is being dropped: the handler returns.
    pub(crate) stop: AtomicBool,
    /// The handler's wake-up pipe.
    pub(crate) wake_w: OwnedFd,
    /// Each page's state word (`page`).
    pub(crate) states: Box<[AtomicU32]>,
    /// Each page's stored copy.
    pub(crate) slots: Slots,
    /// Whether the kernel has `UFFDIO_POISON` for this region.
    pub(crate) poison: bool,
    /// The CLOCK hand (a page index, modulo the page count).
    hand: AtomicUsize,
    /// The last page loaded, to detect sequential runs.
    last_loaded: AtomicUsize,
    /// The background reclaimer was asked to run and has not finished.
    pub(crate) reclaim_wanted: AtomicBool,
    /// How long loads took.
    pub(crate) load_times: Times,
}

thread_local! {
    /// Each thread's buffer for the pages it loads: no allocation on a
    /// load once a thread has loaded a run.
    static LOAD_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Shared {
    pub(crate) fn new(
        map: Mapping,
        uffd: Uffd,
        zswap: Arc<Zswap>,
        config: RegionConfig,
        wake_w: OwnedFd,
        poison: bool,
    ) -> Self {
        let pages = map.len() / PAGE_SIZE;
        Self {
            map,
            uffd,
            zswap,
            config,
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            wake_w,
            states: page::new_states(pages),
            slots: Slots::new(pages),
            poison,
            hand: AtomicUsize::new(0),
            last_loaded: AtomicUsize::new(usize::MAX),
            reclaim_wanted: AtomicBool::new(false),
            load_times: Times::new(),
        }
    }

    fn pages(&self) -> usize {
        self.states.len()
    }

    pub(crate) fn resident(&self) -> usize {
        self.counters.resident.load(Relaxed) as usize
    }

    /// Wakes the handler out of `poll`.
    pub(crate) fn kick(&self) {
        let _ = rustix::io::write(&self.wake_w, &[1]);
    }

    /// The background reclaimer's marks: it is woken when a load takes the
    /// region to `high` resident pages, and evicts down to `low`. A load
    /// evicts for itself only at the budget. (kswapd's shape: woken at the
    /// low watermark of free pages, reclaiming up to the high one, with
    /// direct reclaim below min; mm/vmscan.c.) The gap between the marks is
    /// four batches, or 1/64 of the budget if that is more (a reclaimer
    /// kept off its CPU for a scheduler's time slice must not send every
    /// load into direct reclaim), at most 1/8 of it.
    pub(crate) fn marks(&self) -> (usize, usize) {
        let budget = self.config.resident_budget;
        let gap = (4 * self.config.evict_batch).max(budget / 64).min(budget / 8).max(1);
        (budget.saturating_sub(2 * gap), budget.saturating_sub(gap))
    }

    pub(crate) fn wake(&self, first: usize, n: usize) {
        let _ = self.uffd.wake(self.map.page_addr(first), n * PAGE_SIZE);
    }

    /// Evicts for the caller when a new page would pass the budget.
    fn make_room(&self) {
        let budget = self.config.resident_budget;
        if self.resident() >= budget {
            Counters::bump(&self.counters.direct_reclaims);
            let want = (self.resident() + 1).saturating_sub(budget).max(self.config.evict_batch.min(budget));
            self.evict(want);
        }
    }

    /// Evicts what is resident over the budget (pins released while the
    /// region was past it); pages that cannot go stay.
    pub(crate) fn evict_to_budget(&self) {
        let over = self.resident().saturating_sub(self.config.resident_budget);
        if over > 0 {
            self.evict(over);
        }
    }

    /// [`load_claimed`](Self::load_claimed), timed into `load_times`.
    pub(crate) fn timed_load(&self, index: usize, write: bool, poison_on_failure: bool) -> Option<usize> {
        let start = std::time::Instant::now();
        let mapped = self.load_claimed(index, write, poison_on_failure);
        self.load_times.record(start.elapsed().as_nanos().try_into().unwrap_or(u64::MAX));
        mapped
    }

    /// Loads page `index`, whose load the caller claimed (`LOADING`), and
    /// maps it: its stored copy (with the next stored pages on a sequential
    /// run of reads), else the zero page; writable and dirty when `write`,
    /// else clean and write-protected. Returns the pages mapped, or `None`
    /// when the load of page `index` failed: nothing is mapped, the stored
    /// copy is kept, and the page is poisoned when `poison_on_failure`
    /// (a raw access, which no error can reach) and the kernel can, else
    /// left missing (threads blocked on it fault again).
    pub(crate) fn load_claimed(&self, index: usize, write: bool, poison_on_failure: bool) -> Option<usize> {
        let state = &self.states[index];
        if page::flags(state) & FAILED != 0 {
            // Drop the poison marker before the retry.
            let _ = self.map.dontneed(index, 1);
            page::clear(state, FAILED);
        }
        self.make_room();
        let slot = self.slots.lock(index);
        if !slot.is_stored() {
            drop(slot);
            return Some(self.zero_fill(index));
        }
        let sequential = self.last_loaded.swap(index, Relaxed).wrapping_add(1) == index;
        // Fault-around: the next stored pages nobody maps or loads, as far
        // as the budget allows.
        let mut n = 1;
        if sequential && !write {
            let room = self.config.resident_budget.saturating_sub(self.resident());
            let max = self.config.fault_around.min(room).min(self.pages() - index);
            while n < max && page::try_claim_load(&self.states[index + n]) {
                if !self.slots.lock(index + n).is_stored() {
                    page::clear(&self.states[index + n], LOADING);
                    break;
                }
                n += 1;
            }
        }
        LOAD_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            if buf.len() < n * PAGE_SIZE {
                buf.resize(n * PAGE_SIZE, 0);
            }
            let mut loaded = 0;
            for k in 0..n {
                let page = &mut buf[k * PAGE_SIZE..(k + 1) * PAGE_SIZE];
                let ok = if k == 0 {
                    slot.load(&self.zswap, page)
                } else {
                    self.slots.lock(index + k).load(&self.zswap, page)
                };
                if ok.is_err() {
                    break;
                }
                loaded += 1;
            }
            drop(slot);
            // A raw fault's thread is woken once the states and counts are
            // updated (what it sees next is then consistent); an accessor
            // has no waiter but racing raw accesses, which the copy wakes.
            let raw = poison_on_failure;
            let placed = if loaded == 0 { 0 } else { self.place(index, &buf[..loaded * PAGE_SIZE], write, !raw) };
            if raw && placed > 0 {
                self.wake(index, placed);
            }
            for k in placed.max(1)..n {
                page::clear(&self.states[index + k], LOADING);
            }
            if placed == 0 {
                Counters::bump(&self.counters.load_failures);
                if poison_on_failure {
                    page::set(state, FAILED);
                    if self.poison {
                        let _ = self.map.uffd_poison(&self.uffd, index);
                    }
                }
                page::clear(state, LOADING);
                if !poison_on_failure {
                    self.wake(index, 1);
                }
                return None;
            }
            self.last_loaded.store(index + placed - 1, Relaxed);
            let c = &self.counters;
            c.swap_ins.fetch_add(placed as u64, Relaxed);
            c.fault_around_pages.fetch_add(placed as u64 - 1, Relaxed);
            self.after_map();
            Some(placed)
        })
    }

    /// Places the pages of `src` at page `index` (waking the threads
    /// waiting on them in the copy when `wake`): the first writable and dirty when `write` (a write
    /// fault needs no second, write-protect, fault), the others (or all)
    /// write-protected and clean. A partial copy counts the pages it placed
    /// and goes on from the first page it did not place. Returns the pages
    /// placed from `index` on.
    fn place(&self, index: usize, src: &[u8], write: bool, wake: bool) -> usize {
        let n = src.len() / PAGE_SIZE;
        let mut placed = 0;
        let mut retries = 0;
        while placed < n {
            let at = index + placed;
            let writable = write && placed == 0;
            let end = if writable { 1 } else { n };
            match self.map.uffd_copy(&self.uffd, at, &src[placed * PAGE_SIZE..end * PAGE_SIZE], !writable, wake) {
                // A page there already: it is not ours to place.
                Ok(0) => break,
                Ok(k) => {
                    for j in at..at + k {
                        let flags = if writable { RESIDENT | DIRTY } else { RESIDENT };
                        let flags = if j == index { flags | REFERENCED } else { flags };
                        page::set(&self.states[j], flags);
                        page::clear(&self.states[j], LOADING);
                    }
                    self.counters.resident.fetch_add(k as u64, Relaxed);
                    placed += k;
                }
                // The address space is changing: try again.
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && retries < 16 => retries += 1,
                Err(_) => break,
            }
        }
        placed
    }

    /// Maps the zero page at page `index` (claimed); returns the pages
    /// mapped.
    fn zero_fill(&self, index: usize) -> usize {
        let state = &self.states[index];
        let mapped = matches!(self.map.uffd_zeropage(&self.uffd, index), Ok(true));
        if mapped {
            // Writes to the zero page are not write-protect faults: dirty
            // from the start.
            page::set(state, RESIDENT | DIRTY | REFERENCED);
            self.counters.resident.fetch_add(1, Relaxed);
            Counters::bump(&self.counters.zero_fills);
        }
        page::clear(state, LOADING);
        self.wake(index, 1);
        if mapped {
            self.after_map();
        }
        usize::from(mapped)
    }

    /// After a page was mapped: wakes the background reclaimer at the high
    /// mark (once until it has finished).
    fn after_map(&self) {
        let (_, high) = self.marks();
        if self.config.background_reclaim && self.resident() >= high && !self.reclaim_wanted.swap(true, Relaxed) {
            Counters::bump(&self.counters.reclaimer_wakeups);
            self.kick();
        }
    }

    /// Resolves a fault on page `index` in the faulting thread's `SIGBUS`
    /// handler (`signal`): waits for a thread loading or evicting the page,
    /// makes a mapped page writable (the fault was a write to it, being
    /// clean), or loads a missing one (writable and dirty when `write`).
    /// False when the fault is not the region's to resolve (a load that
    /// failed): the signal then goes on to the program's handler or the
    /// default action, as a `SIGBUS` from a swap-in error does in the
    /// kernel.
    ///
    /// What it may call, being in a signal handler: the userfaultfd ioctls,
    /// zswap's load (its tree lock, zsmalloc's class lock) and, at the
    /// budget, an eviction (zswap's store, the page allocator). The thread
    /// it interrupted was touching region memory, which no code of this
    /// crate does while holding those locks; a program that passes region
    /// memory to zswap itself could deadlock here, which the module docs
    /// rule out. The per-thread load buffer is not in use by the
    /// interrupted thread for the same reason.
    pub(crate) fn resolve_signal(&self, index: usize, write: bool) -> bool {
        Counters::bump(&self.counters.faults_in_thread);
        let state = &self.states[index];
        loop {
            let flags = page::flags(state);
            if flags & FAILED != 0 {
                return false;
            }
            if flags & (EVICTING | LOADING) != 0 {
                // Its owner finishes without this thread.
                std::thread::yield_now();
                continue;
            }
            if flags & RESIDENT != 0 {
                // A write to a clean page (or a fault another thread has
                // resolved since): writable, and the access runs again.
                if let Some(pinned) = page::try_pin(state) {
                    if pinned & (RESIDENT | DIRTY) == RESIDENT {
                        self.make_writable(index);
                    }
                    page::unpin(state);
                }
                return true;
            }
            if page::try_claim_load(state) {
                return self.timed_load(index, write, false).is_some();
            }
        }
    }

    /// Makes mapped page `index`, which the caller has pinned, writable and
    /// dirty (a clean page is write-protected), waking writers waiting on
    /// its protection.
    pub(crate) fn make_writable(&self, index: usize) {
        let old = page::set_old(&self.states[index], DIRTY | REFERENCED);
        let addr = self.map.page_addr(index);
        if old & DIRTY == 0 {
            let _ = self.uffd.remove_write_protection(addr, PAGE_SIZE, true);
        } else {
            self.wake(index, 1);
        }
    }

    /// Picks up to `n` victims with the CLOCK and marks them `EVICTING`:
    /// a marked page is not picked again (one scan may pass a page twice),
    /// and a pinned or loading one is not picked at all.
    fn pick_victims(&self, n: usize) -> Vec<usize> {
        let mut victims = Vec::with_capacity(n);
        let total = self.pages();
        for _ in 0..2 * total {
            if victims.len() >= n {
                break;
            }
            let i = self.hand.fetch_add(1, Relaxed) % total;
            let state = &self.states[i];
            let flags = page::flags(state);
            if flags & (RESIDENT | EVICTING | LOADING) != RESIDENT {
                continue;
            }
            if flags & REFERENCED != 0 {
                page::clear(state, REFERENCED);
                continue;
            }
            if page::try_evict(state) {
                victims.push(i);
            }
        }
        victims
    }

    /// Evicts up to `n` pages; returns how many went.
    pub(crate) fn evict(&self, n: usize) -> usize {
        let mut victims = self.pick_victims(n);
        victims.sort_unstable();
        let mut page = [0u8; PAGE_SIZE];
        let mut stored = Vec::with_capacity(victims.len());
        for &v in &victims {
            let state = &self.states[v];
            let mut slot = self.slots.lock(v);
            if page::flags(state) & DIRTY == 0 && slot.is_stored() {
                // Clean: write-protected since it was loaded, its copy
                // current.
                Counters::bump(&self.counters.evicted_clean);
                stored.push(v);
                continue;
            }
            // Stop writers while the page is read and stored; a page that
            // cannot be protected stays (a write could slip past the read).
            let addr = self.map.page_addr(v);
            if self.uffd.write_protect(addr, PAGE_SIZE).is_err() {
                self.keep(v);
                continue;
            }
            self.map.read(v * PAGE_SIZE, &mut page);
            match slot.store(&self.zswap, &page) {
                Ok(()) => {
                    // Stored and write-protected: clean, whether it goes or
                    // stays.
                    page::clear(state, DIRTY);
                    stored.push(v);
                }
                Err(_) => {
                    let _ = self.uffd.remove_write_protection(addr, PAGE_SIZE, true);
                    self.keep(v);
                }
            }
        }
        // Drop the victims in runs of neighbours, all runs in one call.
        let mut runs = Vec::new();
        let mut k = 0;
        while k < stored.len() {
            let mut run = 1;
            while k + run < stored.len() && stored[k + run] == stored[k] + run {
                run += 1;
            }
            runs.push((stored[k], run));
            k += run;
        }
        let dropped = self.map.dontneed_runs(&runs);
        let mut gone = 0;
        for (&(first, run), dropped) in runs.iter().zip(dropped) {
            for v in first..first + run {
                if !dropped {
                    self.keep(v);
                } else if page::end_eviction(&self.states[v], RESIDENT | DIRTY | REFERENCED) {
                    // After the state: a raw access that faulted on the
                    // victim (a writer stopped by its protection, or a
                    // touch after the drop) faults again and finds the
                    // page missing and free to load. Victims nobody
                    // faulted on need no wake.
                    self.wake(v, 1);
                }
            }
            if dropped {
                gone += run;
                self.counters.resident.fetch_sub(run as u64, Relaxed);
            }
        }
        self.counters.evictions.fetch_add(gone as u64, Relaxed);
        gone
    }

    /// A victim that could not be evicted stays resident; a raw fault left
    /// to its eviction is woken, to find it mapped.
    fn keep(&self, v: usize) {
        Counters::bump(&self.counters.evict_failures);
        if page::end_eviction(&self.states[v], 0) {
            self.wake(v, 1);
        }
    }
}

impl Counters {
    pub(crate) fn bump(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}
