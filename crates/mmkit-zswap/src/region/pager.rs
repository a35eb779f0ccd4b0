//! The region's paging, callable from any thread: loading a page (with
//! fault-around), evicting with the CLOCK, making a clean page writable.
//! The transitions are the page states' (`page`) compare-and-swaps, so an
//! accessor loads the page it needs in its own thread, evicts for itself
//! when the region is at its budget (direct reclaim), and the handler
//! thread does the same for raw faults and evicts in the background.
//!
//! Owns what every thread of a region shares: the mapping, the
//! userfaultfd, the page states and slots, the counters and the CLOCK
//! hand, the load buffers and the hand-offs from the `SIGBUS` handler to
//! the handler thread. Everything the operating system does goes through
//! `os`, storage through `slots`.
//!
//! What runs in the `SIGBUS` handler (`resolve_signal` and what it calls)
//! is async-signal-safe by construction: atomics, system calls, zswap's
//! load (its locks, which no code interrupted by the handler holds: region
//! code runs with asynchronous signals blocked, and a raw touch is no
//! region code), a load buffer taken with a non-blocking `try_lock` from
//! a pool made with the region, and eviction of clean pages only (a drop,
//! no compression, no allocation). Anything else — no free buffer, no
//! clean victim at the budget — is handed to the handler thread, and the
//! handler waits on a futex for its answer.

use super::os::mapping::Mapping;
use super::os::uffd::Uffd;
use super::os::{self, WakePipe};
use super::page::{self, DIRTY, EVICTING, FAILED, LOADING, REFERENCED, RESIDENT};
use super::slots::Slots;
use super::times::Times;
use super::{Counters, RegionConfig};
use crate::{Zswap, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// Why a load placed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoadError {
    /// The stored copy could not be read back, or the page not placed.
    Failed,
    /// The region is at its budget and no victim could be stored (the
    /// swap file is full): the budget holds, the load does not happen.
    SwapFull,
}

/// Whether room was made for one more page.
enum Room {
    Made,
    /// Only the handler thread may make it (a dirty victim's compression
    /// is no work for a signal handler).
    HandOff,
    SwapFull,
}

/// A load the `SIGBUS` handler hands to the handler thread: the page's
/// claim (`LOADING`) is the handler's, the work the thread's.
pub(crate) struct Handoff {
    /// `FREE` → `FILLING` → `PENDING` → `TAKEN` → `DONE_OK` / `DONE_FAILED`
    /// → `FREE`; the handler sleeps on it (a futex).
    state: AtomicU32,
    page: AtomicUsize,
    write: AtomicBool,
}

const FREE: u32 = 0;
const FILLING: u32 = 1;
const PENDING: u32 = 2;
const TAKEN: u32 = 3;
const DONE_OK: u32 = 4;
const DONE_FAILED: u32 = 5;

/// Hand-offs that may wait at once (more wait for a free one).
const HANDOFFS: usize = 16;

/// What every thread of a region shares.
pub(crate) struct Shared {
    pub(crate) map: Mapping,
    pub(crate) uffd: Uffd,
    pub(crate) zswap: Arc<Zswap>,
    pub(crate) config: RegionConfig,
    pub(crate) counters: Counters,
    /// The region is being dropped: the handler returns.
    pub(crate) stop: AtomicBool,
    /// The handler thread's wake-up pipe.
    pub(crate) wake: WakePipe,
    /// Each page's state word (`page`).
    pub(crate) states: Box<[AtomicU32]>,
    /// Each page's stored copy.
    pub(crate) slots: Slots,
    /// Whether the kernel has `UFFDIO_POISON` for this region.
    pub(crate) poison: bool,
    /// The CLOCK hand (a page index, modulo the page count).
    pub(crate) hand: AtomicUsize,
    /// The last page loaded, to detect sequential runs.
    last_loaded: AtomicUsize,
    /// The background reclaimer was asked to run and has not finished.
    pub(crate) reclaim_wanted: AtomicBool,
    /// How long loads took.
    pub(crate) load_times: Times,
    /// The fork count when the region was made (`os::forks`): a child's
    /// calls are refused.
    pub(crate) forks: u64,
    /// Load buffers of `fault_around` pages, made with the region and
    /// taken with `try_lock` (never waited for).
    buffers: Box<[Mutex<Box<[u8]>>]>,
    /// Loads handed from the `SIGBUS` handler to the handler thread.
    handoffs: Box<[Handoff]>,
    /// The handler thread runs (cleared as it returns).
    pub(crate) handler_alive: AtomicBool,
}

impl Shared {
    pub(crate) fn new(
        map: Mapping,
        uffd: Uffd,
        zswap: Arc<Zswap>,
        config: RegionConfig,
        wake: WakePipe,
        poison: bool,
        forks: u64,
    ) -> Option<Self> {
        let pages = map.len() / PAGE_SIZE;
        let buffers = std::thread::available_parallelism().map_or(2, usize::from).clamp(2, 16) * 2;
        let buffer = || Mutex::new(vec![0u8; config.fault_around * PAGE_SIZE].into_boxed_slice());
        Some(Self {
            map,
            uffd,
            zswap,
            config,
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            wake,
            states: page::new_states(pages)?,
            slots: Slots::new(pages)?,
            poison,
            hand: AtomicUsize::new(0),
            last_loaded: AtomicUsize::new(usize::MAX),
            reclaim_wanted: AtomicBool::new(false),
            load_times: Times::new(),
            forks,
            buffers: (0..buffers).map(|_| buffer()).collect(),
            handoffs: (0..HANDOFFS)
                .map(|_| Handoff {
                    state: AtomicU32::new(FREE),
                    page: AtomicUsize::new(0),
                    write: AtomicBool::new(false),
                })
                .collect(),
            handler_alive: AtomicBool::new(true),
        })
    }

    /// Whether this process is a child forked after the region was made.
    pub(crate) fn forked(&self) -> bool {
        os::forks() != self.forks
    }

    pub(crate) fn pages(&self) -> usize {
        self.states.len()
    }

    pub(crate) fn resident(&self) -> usize {
        self.counters.resident.load(Relaxed) as usize
    }

    /// Wakes the handler out of its wait.
    pub(crate) fn kick(&self) {
        self.wake.kick();
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

    /// Evicts for the caller when a new page would pass the budget; in a
    /// signal handler (`in_signal`) clean victims only.
    fn make_room(&self, in_signal: bool) -> Room {
        let budget = self.config.resident_budget;
        if self.resident() < budget {
            return Room::Made;
        }
        Counters::bump(&self.counters.direct_reclaims);
        let want = (self.resident() + 1).saturating_sub(budget).max(self.config.evict_batch.min(budget));
        if in_signal {
            self.evict_with(want, true);
            return if self.resident() < budget { Room::Made } else { Room::HandOff };
        }
        let failures = self.counters.evict_failures.load(Relaxed);
        self.evict(want);
        // Over the budget with victims that could not be stored: the swap
        // is full. (Over it with every page pinned: the pins' business.)
        if self.resident() >= budget && self.counters.evict_failures.load(Relaxed) != failures {
            Room::SwapFull
        } else {
            Room::Made
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

    /// Runs `f` with a load buffer: one of the pool's, else (many threads
    /// loading at once; never in a signal handler) a new one.
    fn with_buffer<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> T {
        for buffer in self.buffers.iter() {
            if let Ok(mut buffer) = buffer.try_lock() {
                return f(&mut buffer);
            }
        }
        f(&mut vec![0u8; self.config.fault_around * PAGE_SIZE])
    }

    /// Loads claimed page `index` in a thread that may evict anything (an
    /// accessor, with its asynchronous signals blocked, or the handler
    /// thread, with `buffer`), timed into `load_times`. `raw`: a raw
    /// access's fault, which no error can reach (a failure poisons the
    /// page).
    pub(crate) fn load_in_thread(
        &self,
        index: usize,
        write: bool,
        raw: bool,
        buffer: Option<&mut [u8]>,
    ) -> Result<usize, LoadError> {
        let start = std::time::Instant::now();
        let out = match self.make_room(false) {
            Room::SwapFull => {
                self.fail_load(index, raw);
                Err(LoadError::SwapFull)
            }
            _ => match buffer {
                Some(buf) => self.load_claimed(index, write, raw, buf),
                None => self.with_buffer(|buf| self.load_claimed(index, write, raw, buf)),
            },
        };
        self.load_times.record(start.elapsed().as_nanos().try_into().unwrap_or(u64::MAX));
        out
    }

    /// A claimed load that placed nothing: counted, the claim dropped; a
    /// raw access's page poisoned where the kernel can (its thread gets
    /// `SIGBUS`), an accessor's left missing and its racing raw faults
    /// woken to fault again.
    fn fail_load(&self, index: usize, poison: bool) {
        let state = &self.states[index];
        Counters::bump(&self.counters.load_failures);
        if poison {
            page::set(state, FAILED);
            if self.poison {
                let _ = self.map.uffd_poison(&self.uffd, index);
            }
        }
        page::clear(state, LOADING);
        if !poison {
            self.wake(index, 1);
        }
    }

    /// Loads page `index`, whose load the caller claimed (`LOADING`) and
    /// made room for, into `buf` and maps it: its stored copy (with the
    /// next stored pages on a sequential run of reads, as many as `buf`
    /// holds), else the zero page; writable and dirty when `write`, else
    /// clean and write-protected. Returns the pages mapped; on an error
    /// nothing is mapped, the stored copy is kept, and the page is
    /// poisoned when `poison_on_failure` (a raw access, which no error can
    /// reach) and the kernel can, else left missing (threads blocked on it
    /// fault again). Allocates nothing.
    fn load_claimed(
        &self,
        index: usize,
        write: bool,
        poison_on_failure: bool,
        buf: &mut [u8],
    ) -> Result<usize, LoadError> {
        let state = &self.states[index];
        if page::flags(state) & FAILED != 0 {
            // Drop the poison marker before the retry.
            let _ = self.map.dontneed(index, 1);
            page::clear(state, FAILED);
        }
        let slot = self.slots.lock(index);
        if !slot.is_stored() {
            drop(slot);
            return match self.zero_fill(index) {
                Some(n) => Ok(n),
                None => {
                    self.fail_load(index, poison_on_failure);
                    Err(LoadError::Failed)
                }
            };
        }
        let sequential = self.last_loaded.swap(index, Relaxed).wrapping_add(1) == index;
        // Fault-around: the next stored pages nobody maps or loads, as far
        // as the budget and the buffer allow.
        let mut n = 1;
        if sequential && !write {
            let room = self.config.resident_budget.saturating_sub(self.resident());
            let max = self.config.fault_around.min(room).min(self.pages() - index).min(buf.len() / PAGE_SIZE);
            while n < max && page::try_claim_load(&self.states[index + n]) {
                if !self.slots.lock(index + n).is_stored() {
                    page::clear(&self.states[index + n], LOADING);
                    break;
                }
                n += 1;
            }
        }
        let mut loaded = 0;
        for k in 0..n {
            let page = &mut buf[k * PAGE_SIZE..(k + 1) * PAGE_SIZE];
            let ok =
                if k == 0 { slot.load(&self.zswap, page) } else { self.slots.lock(index + k).load(&self.zswap, page) };
            if ok.is_err() {
                break;
            }
            loaded += 1;
        }
        drop(slot);
        // A raw fault's thread is woken once the states and counts are
        // updated (what it sees next is then consistent); an accessor has
        // no waiter but racing raw accesses, which the copy wakes.
        let raw = poison_on_failure;
        let placed = if loaded == 0 { 0 } else { self.place(index, &buf[..loaded * PAGE_SIZE], write, !raw) };
        if raw && placed > 0 {
            self.wake(index, placed);
        }
        for k in placed.max(1)..n {
            page::clear(&self.states[index + k], LOADING);
        }
        if placed == 0 {
            self.fail_load(index, poison_on_failure);
            return Err(LoadError::Failed);
        }
        self.last_loaded.store(index + placed - 1, Relaxed);
        let c = &self.counters;
        c.swap_ins.fetch_add(placed as u64, Relaxed);
        c.fault_around_pages.fetch_add(placed as u64 - 1, Relaxed);
        self.after_map();
        Ok(placed)
    }

    /// Places the pages of `src` at page `index` (waking the threads
    /// waiting on them in the copy when `wake`): the first writable and
    /// dirty when `write` (a write fault needs no second, write-protect,
    /// fault), the others (or all) write-protected and clean. A partial
    /// copy counts the pages it placed and goes on from the first page it
    /// did not place; a copy refused whole (a copy may not cross a memory
    /// area's end, and `madvise`, `mlock` or `mprotect` on part of the
    /// region splits its area) is tried again with the one page asked
    /// for. Returns the pages placed from `index` on.
    fn place(&self, index: usize, src: &[u8], write: bool, wake: bool) -> usize {
        let mut n = src.len() / PAGE_SIZE;
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
                Err(e) if os::is_again(&e) && retries < 16 => retries += 1,
                // Refused whole: the requested page alone (the pages ahead
                // stay where they are, stored).
                Err(_) if placed == 0 && end > 1 => n = 1,
                Err(_) => break,
            }
        }
        placed
    }

    /// Maps the zero page at page `index` (claimed); returns the pages
    /// mapped (1), or `None` when the kernel refused (the region's memory
    /// unmapped under it): the caller's load fails, and nothing reads a
    /// page that is not there.
    fn zero_fill(&self, index: usize) -> Option<usize> {
        let state = &self.states[index];
        // A page there already (`Ok(false)`) was placed by nobody but the
        // region's own calls, which the claim excludes; it is taken as
        // mapped and dirty, which is what a later eviction checks.
        self.map.uffd_zeropage(&self.uffd, index).ok()?;
        // Writes to the zero page are not write-protect faults: dirty from
        // the start.
        page::set(state, RESIDENT | DIRTY | REFERENCED);
        self.counters.resident.fetch_add(1, Relaxed);
        Counters::bump(&self.counters.zero_fills);
        page::clear(state, LOADING);
        self.wake(index, 1);
        self.after_map();
        Some(1)
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
    /// clean), reloads one the program dropped behind the region's back
    /// (marked mapped, not in the page tables), or loads a missing one
    /// (writable and dirty when `write`). False when the fault is not the
    /// region's to resolve (a load that failed, or a forked child's): the
    /// signal then goes on to the program's handler or the default action,
    /// as a `SIGBUS` from a swap-in error does in the kernel.
    ///
    /// Async-signal-safe (see the module docs): no allocation, no lock the
    /// interrupted code may hold, no wait on a claim of its own thread
    /// (region code that claims pages runs with asynchronous signals
    /// blocked, and reads victims through the kernel, never faulting).
    ///
    /// On a small stack (`small_stack`: another than the faulting code's,
    /// such as a chaining program handler's alternate stack) a load is
    /// handed to the handler thread at once: the hand-off needs a few
    /// hundred bytes, a load in the handler a few KiB (measured in the
    /// region's tests; `docs/zsmalloc-zswap.md`).
    pub(crate) fn resolve_signal(&self, index: usize, write: bool, small_stack: bool) -> bool {
        if self.forked() {
            return false;
        }
        Counters::bump(&self.counters.faults_in_thread);
        let state = &self.states[index];
        loop {
            let flags = page::flags(state);
            if flags & FAILED != 0 {
                return false;
            }
            if flags & (EVICTING | LOADING) != 0 {
                // Another thread's claim: it finishes without this one.
                std::thread::yield_now();
                continue;
            }
            if flags & RESIDENT != 0 {
                if write && flags & DIRTY == 0 {
                    // A write to a clean page: writable, and the access
                    // runs again (and faults again if the page is gone).
                    if let Some(pinned) = page::try_pin(state) {
                        if pinned & (RESIDENT | DIRTY) == RESIDENT {
                            self.make_writable(index);
                        }
                        page::unpin(state);
                    }
                    return true;
                }
                // A read, or a write to a writable page: only a page that
                // is not there faults so. Another thread's load may have
                // placed it since; else the program dropped it.
                if self.map.is_mapped(index) {
                    return true;
                }
                if page::try_claim_reload(state) {
                    self.dropped_by_program();
                    return self.signal_load(index, write, small_stack);
                }
                continue;
            }
            if page::try_claim_load(state) {
                return self.signal_load(index, write, small_stack);
            }
        }
    }

    /// A page marked mapped was not: counted, and out of the resident
    /// count (its reload claimed it).
    pub(crate) fn dropped_by_program(&self) {
        self.counters.resident.fetch_sub(1, Relaxed);
        Counters::bump(&self.counters.program_drops);
    }

    /// The `SIGBUS` handler's load of claimed page `index`: room from
    /// clean victims and a pool buffer, else handed to the handler thread.
    fn signal_load(&self, index: usize, write: bool, small_stack: bool) -> bool {
        if small_stack {
            return self.hand_off(index, write);
        }
        let start = std::time::Instant::now();
        let loaded = match self.make_room(true) {
            Room::Made => match self.buffers.iter().find_map(|b| b.try_lock().ok()) {
                Some(mut buf) => self.load_claimed(index, write, false, &mut buf).is_ok(),
                None => self.hand_off(index, write),
            },
            Room::HandOff => self.hand_off(index, write),
            Room::SwapFull => {
                self.fail_load(index, false);
                false
            }
        };
        self.load_times.record(start.elapsed().as_nanos().try_into().unwrap_or(u64::MAX));
        loaded
    }

    /// Hands the load of claimed page `index` to the handler thread and
    /// sleeps until it is done; false when it failed or the thread is
    /// gone.
    fn hand_off(&self, index: usize, write: bool) -> bool {
        Counters::bump(&self.counters.handoffs);
        loop {
            if !self.handler_alive.load(SeqCst) {
                self.fail_load(index, false);
                return false;
            }
            for h in self.handoffs.iter() {
                if h.state.compare_exchange(FREE, FILLING, SeqCst, SeqCst).is_err() {
                    continue;
                }
                h.page.store(index, SeqCst);
                h.write.store(write, SeqCst);
                h.state.store(PENDING, SeqCst);
                self.kick();
                loop {
                    match h.state.load(SeqCst) {
                        done @ (DONE_OK | DONE_FAILED) => {
                            h.state.store(FREE, SeqCst);
                            return done == DONE_OK;
                        }
                        PENDING if !self.handler_alive.load(SeqCst) => {
                            // Taken back unless the thread took it first.
                            if h.state.compare_exchange(PENDING, FREE, SeqCst, SeqCst).is_ok() {
                                self.fail_load(index, false);
                                return false;
                            }
                        }
                        seen => os::futex_wait(&h.state, seen),
                    }
                }
            }
            // Every hand-off in use: wait for one.
            std::thread::yield_now();
        }
    }

    /// The handler thread's side of the hand-offs: does each pending
    /// load (with `buf`) and wakes its handler.
    pub(crate) fn serve_handoffs(&self, buf: &mut [u8]) {
        for h in self.handoffs.iter() {
            if h.state.compare_exchange(PENDING, TAKEN, SeqCst, SeqCst).is_err() {
                continue;
            }
            let index = h.page.load(SeqCst);
            let write = h.write.load(SeqCst);
            let loaded = self.load_in_thread(index, write, false, Some(buf)).is_ok();
            h.state.store(if loaded { DONE_OK } else { DONE_FAILED }, SeqCst);
            os::futex_wake(&h.state);
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
}

impl Counters {
    pub(crate) fn bump(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}
