//! The region's paging, callable from any thread: loading a page (with
//! fault-around), making room under the budget, making a clean page
//! writable. The transitions are the page states' (`page`)
//! compare-and-swaps, so an accessor loads the page it needs in its own
//! thread, evicts for itself when the region is at its budget (direct
//! reclaim), and the handler thread does the same for raw faults and
//! evicts in the background. Eviction is `evict`'s, the `SIGBUS`
//! handler's path and its hand-offs `fault`'s, the region's calls on top
//! of these `calls`'.
//!
//! Owns what every thread of a region shares: the operating system's
//! facade (`os::Os`: generic, so that the policy runs as well on the
//! tests' in-memory fake as on Linux), the page states and slots, the
//! counters and the CLOCK hand, the load buffers and the hand-offs.
//! Storage goes through `slots`.

use super::handoff::Handoff;
use super::os::{CopyError, Os};
use super::page::{self, DIRTY, FAILED, LOADING, REFERENCED, RESIDENT};
use super::slots::Slots;
use super::times::Times;
use super::{Counters, RegionConfig};
use crate::{Zswap, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
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
pub(super) enum Room {
    Made,
    /// Only the handler thread may make it (a dirty victim's compression
    /// is no work for a signal handler).
    HandOff,
    SwapFull,
}

/// Hand-offs that may wait at once (more wait for a free one).
const HANDOFFS: usize = 16;

/// What every thread of a region shares.
pub(crate) struct Shared<O: Os> {
    /// The operating system: the region's memory and the handler
    /// thread's events.
    pub(crate) os: O,
    pub(crate) zswap: Arc<Zswap>,
    pub(crate) config: RegionConfig,
    pub(crate) counters: Counters,
    /// The region is being dropped: the handler returns.
    pub(crate) stop: AtomicBool,
    /// Each page's state word (`page`).
    pub(crate) states: Box<[AtomicU32]>,
    /// Each page's stored copy.
    pub(crate) slots: Slots,
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
    pub(super) buffers: Box<[Mutex<Box<[u8]>>]>,
    /// Loads handed from the `SIGBUS` handler to the handler thread.
    pub(super) handoffs: Box<[Handoff]>,
    /// The handler thread runs (cleared as it returns).
    pub(crate) handler_alive: AtomicBool,
}

impl<O: Os> Shared<O> {
    /// The shared state of a region over `os`, made in a process whose
    /// fork count (`os::forks`) is `forks`; `None` when the per-page state
    /// cannot be allocated.
    pub(crate) fn new(os: O, zswap: Arc<Zswap>, config: RegionConfig, forks: u64) -> Option<Self> {
        let pages = os.pages();
        let buffers = std::thread::available_parallelism().map_or(2, usize::from).clamp(2, 16) * 2;
        let buffer = || Mutex::new(vec![0u8; config.fault_around * PAGE_SIZE].into_boxed_slice());
        Some(Self {
            os,
            zswap,
            config,
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            states: page::new_states(pages)?,
            slots: Slots::new(pages)?,
            hand: AtomicUsize::new(0),
            last_loaded: AtomicUsize::new(usize::MAX),
            reclaim_wanted: AtomicBool::new(false),
            load_times: Times::new(),
            forks,
            buffers: (0..buffers).map(|_| buffer()).collect(),
            handoffs: (0..HANDOFFS).map(|_| Handoff::new()).collect(),
            handler_alive: AtomicBool::new(true),
        })
    }

    /// Whether this process is a child forked after the region was made.
    pub(crate) fn forked(&self) -> bool {
        super::os::forks() != self.forks
    }

    pub(crate) fn pages(&self) -> usize {
        self.states.len()
    }

    pub(crate) fn resident(&self) -> usize {
        self.counters.resident.load(Relaxed) as usize
    }

    /// Wakes the handler out of its wait.
    pub(crate) fn kick(&self) {
        self.os.kick();
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
        self.os.wake(first, n);
    }

    /// Evicts for the caller when a new page would pass the budget; in a
    /// signal handler (`in_signal`) clean victims only.
    pub(super) fn make_room(&self, in_signal: bool) -> Room {
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
    pub(super) fn fail_load(&self, index: usize, poison: bool) {
        let state = &self.states[index];
        Counters::bump(&self.counters.load_failures);
        if poison {
            page::set(state, FAILED);
            self.os.poison(index);
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
    pub(super) fn load_claimed(
        &self,
        index: usize,
        write: bool,
        poison_on_failure: bool,
        buf: &mut [u8],
    ) -> Result<usize, LoadError> {
        let state = &self.states[index];
        if page::flags(state) & FAILED != 0 {
            // Drop the poison marker before the retry.
            self.os.drop_page(index);
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
            match self.os.copy(at, &src[placed * PAGE_SIZE..end * PAGE_SIZE], !writable, wake) {
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
                Err(CopyError::Again) if retries < 16 => retries += 1,
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
        if !self.os.zero_fill(index) {
            return None;
        }
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

    /// Makes mapped page `index`, which the caller has pinned, writable and
    /// dirty (a clean page is write-protected), waking writers waiting on
    /// its protection.
    pub(crate) fn make_writable(&self, index: usize) {
        let old = page::set_old(&self.states[index], DIRTY | REFERENCED);
        if old & DIRTY == 0 {
            self.os.unprotect(index, 1, true);
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
