//! [`SwapRegion`]: anonymous memory with a resident budget, paged to a
//! [`Zswap`] through userfaultfd — a userspace swap-out and swap-in path
//! over the same zswap calls the kernel makes.
//!
//! - **States.** Each page has one atomic state word (`page`): empty or
//!   stored, loading, resident clean (write-protected, its stored copy
//!   current) or dirty, evicting, failed; plus a count of pins. Every
//!   transition is a compare-and-swap, so any thread may load or evict.
//! - **Accessors load in their own thread.** [`SwapRegion::read`],
//!   [`SwapRegion::write`] and the word calls pin each page they touch
//!   (a pinned page is not evicted), load it in the calling thread if it is
//!   not mapped (`UFFDIO_COPY` from one of the region's load buffers, with
//!   the thread's asynchronous signals blocked meanwhile; the zero page,
//!   `UFFDIO_ZEROPAGE`, for a page never stored), and lift the write
//!   protection of a clean page themselves before writing: no fault and no
//!   hand-off to another thread. A failed load is
//!   [`RegionError::LoadFailed`]; the stored copy is kept.
//! - **Raw accesses fault, resolved in the faulting thread.** Touches
//!   through [`SwapRegion::as_ptr`] are userfaultfd faults. By default
//!   (and `UFFD_FEATURE_SIGBUS`) a fault raises `SIGBUS` in the faulting
//!   thread, and the crate's process-wide handler (`os::signal`,
//!   `signal`) resolves it there, on a stack of its own (`os::stack`), and
//!   returns: async-signal-safe by construction (see `fault`), handing
//!   what it cannot do to the handler thread. Every other `SIGBUS` goes to the action installed before the
//!   first region; a `SIGBUS` handler installed after it replaces the
//!   crate's and must chain to it for region addresses. A thread that
//!   blocks `SIGBUS` dies on a raw touch of an evicted page (the kernel
//!   forces the default action); its accessor calls never fault. The
//!   handler loads with zswap's locks, so region memory must not be handed
//!   to zswap's own calls by the program (the crate never does). A global
//!   allocator whose heap is a region serves what is allocated while
//!   [`SwapRegion::in_region_call`] is true from other memory.
//! - **Or by the handler thread**, with [`RegionConfig::fault_in_thread`]
//!   off or where the kernel lacks the feature: a write to a missing page
//!   maps it writable and dirty at once. A failed load poisons the page
//!   (`UFFDIO_POISON`, Linux 6.6): the thread gets `SIGBUS`, as from a
//!   swap-in I/O error in the kernel.
//! - **Eviction.** A CLOCK picks victims (a page referenced since the hand
//!   last passed gets a second chance) and marks them evicting, so that no
//!   scan picks a page twice. A victim is write-protected (so a concurrent
//!   writer waits instead of losing its write), read, stored (`zswap_store`,
//!   or the swap file when zswap refuses it) unless it is clean, and
//!   dropped with `MADV_DONTNEED`, one call per run of neighbours. A load
//!   that finds the region at its budget evicts for itself (direct
//!   reclaim); a load that passes the high mark, a little under the budget,
//!   wakes the handler thread, which evicts in the background down to the
//!   low mark between faults (kswapd's shape).
//! - **Fault-around.** On a run of reads at consecutive pages, the next
//!   stored pages are loaded with the first in one `UFFDIO_COPY` (Linux's
//!   swap readahead, VMA-based in spirit).
//! - **Release.** Dropping the region is a process exit: every swap entry
//!   is freed at once, zswap entries through `zs_free_deferred` (or
//!   synchronously, [`ReleaseMode::Sync`], to compare).
//!
//! Write tracking uses synchronous write-protection (`UFFDIO_WRITEPROTECT`,
//! Linux 5.7+), not `UFFD_FEATURE_WP_ASYNC` with `PAGEMAP_SCAN`: eviction
//! must stop writers while it reads a victim, and asynchronous
//! write-protection does not stop them.
//!
//! Misuse is an error or documented behaviour (`docs/zsmalloc-zswap.md`
//! has the table): the region's calls in a forked child are
//! [`RegionError::Forked`]; a page the program dropped (`MADV_DONTNEED`)
//! is reloaded; a memory area split under fault-around places the page
//! asked for alone; a page unmapped under the region fails to load. Not
//! supported: `mremap` or `munmap` of parts of the region, pages larger
//! than 4 KiB, sharing the region with another process.
//!
//! Files: `page` (the state word), `pager` (loading, any thread), `evict`
//! (the CLOCK and eviction), `fault` (the `SIGBUS` handler's path and its
//! hand-offs), `calls` (what the region's calls do, over any facade),
//! `handler` (the fault and reclaim thread), `signal` (the table of
//! regions the `SIGBUS` handler resolves, and the mark of region code),
//! `slots` (the stored copies: the only use of swap entries), `times` (the
//! load-time histogram), `os` (the operating system behind the `os::Os`
//! facade — the mapping, the userfaultfd bindings, the `SIGBUS` action and
//! the handler's stacks, pipes, futexes, signal masks, forks — and the
//! tests' in-memory fake of it). The paging policy is generic over the
//! facade, so the same code runs on Linux and, in `policy_tests`, on the
//! fake. No `rustix` or `libc` outside `os`; its `unsafe` is in `os` and
//! `signal`.

mod calls;
mod evict;
mod fault;
mod handler;
mod handoff;
mod os;
mod page;
mod pager;
mod pinned;
mod signal;
mod slots;
mod times;

use crate::{ReleaseMode, Zswap, PAGE_SIZE};
use handler::Handler;
use os::linux::{Linux, SetupError};
use os::Os;
use pager::Shared;
pub use pinned::PinnedRange;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How a region is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// Bytes of the region: a positive multiple of 4 KiB, at most
    /// [`SwapRegion::max_len`].
    pub len: usize,
    /// Pages that may be resident at once (at least 2: one instruction may
    /// touch two pages, and both must be mapped for it to complete).
    pub resident_budget: usize,
    /// Pages evicted together when the budget is reached (at least 1).
    pub evict_batch: usize,
    /// Most pages one fault loads on a sequential run (1: no fault-around).
    pub fault_around: usize,
    /// How the swap entries are freed when the region is dropped.
    pub release: ReleaseMode,
    /// Whether the handler thread evicts in the background, from a high
    /// mark a little under the budget down to a low mark under it, so that
    /// loads rarely evict for themselves (false: eviction only when a load
    /// would pass the budget).
    pub background_reclaim: bool,
    /// Whether raw accesses' faults are resolved in the faulting thread
    /// (the default): with `UFFD_FEATURE_SIGBUS`, a fault raises `SIGBUS`
    /// there and the region's process-wide handler loads the page and
    /// returns (see the module docs for what that asks of the program's
    /// own signal handling). False, or where the kernel lacks the feature:
    /// the handler thread resolves them, a hand-off to another thread and
    /// back for each ([`SwapRegion::resolves_faults_in_thread`]).
    pub fault_in_thread: bool,
}

impl RegionConfig {
    /// `len` bytes with `resident_budget` pages resident, evicting 16
    /// pages at a time, fault-around of 8 pages, deferred release,
    /// background reclaim, raw faults resolved in the faulting thread.
    pub fn new(len: usize, resident_budget: usize) -> Self {
        Self {
            len,
            resident_budget,
            evict_batch: 16,
            fault_around: 8,
            release: ReleaseMode::Deferred,
            background_reclaim: true,
            fault_in_thread: true,
        }
    }
}

/// Why a region call failed. Nothing was changed.
#[derive(Debug)]
pub enum RegionError {
    /// A region of 0 bytes.
    Empty,
    /// A length that is not a multiple of 4 KiB.
    Unaligned(usize),
    /// A resident budget, eviction batch or fault-around of 0.
    ZeroParameter(&'static str),
    /// A resident budget of 1 page: an instruction that touches two pages
    /// could never complete (each load would evict the other page).
    BudgetTooSmall(usize),
    /// A region longer than [`SwapRegion::max_len`]: its per-page state
    /// would not fit in memory. Refused before anything is allocated.
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// The most this machine takes.
        max: usize,
    },
    /// The call was made in a process forked after the region was made:
    /// the region is its parent's (its memory is not mapped in the child,
    /// and its userfaultfd would reach into the parent), so nothing is
    /// done.
    Forked,
    /// A page already holds the most pins it can count (about 16 million):
    /// a pin more is refused rather than wrapped.
    TooManyPins {
        /// The offset of the first byte of the page.
        offset: usize,
    },
    /// A page could not be loaded because the region is at its resident
    /// budget and no victim could be stored (the swap file is full): the
    /// budget holds. Nothing was read or written from that page on.
    SwapFull {
        /// The offset of the first byte of the page.
        offset: usize,
    },
    /// userfaultfd is unavailable or lacks write-protection here.
    Userfaultfd(String),
    /// The mapping or the handler thread could not be made.
    Setup(std::io::Error),
    /// An access past the region's end.
    OutOfBounds {
        /// Offset asked for.
        offset: usize,
        /// Bytes asked for.
        len: usize,
        /// The region's length.
        size: usize,
    },
    /// A word access at an offset that is not 8-aligned.
    Misaligned(usize),
    /// The fault handler has stopped.
    HandlerGone,
    /// A page of the access could not be loaded (its stored copy could not
    /// be read back: a decompression or swap file error). Nothing was read
    /// or written from that page on; the stored copy is kept, and a later
    /// access tries the load again.
    LoadFailed {
        /// The offset of the first byte of the page that failed.
        offset: usize,
    },
    /// A [`SwapRegion::pin`] of more pages than the resident budget.
    PinTooLarge {
        /// Pages the range touches.
        pages: usize,
        /// The region's resident budget.
        budget: usize,
    },
}

impl core::fmt::Display for RegionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Empty => f.write_str("a region of 0 bytes"),
            Self::Unaligned(len) => write!(f, "a region of {len} bytes, not a multiple of {PAGE_SIZE}"),
            Self::ZeroParameter(name) => write!(f, "{name} must be at least 1"),
            Self::BudgetTooSmall(n) => write!(f, "a resident budget of {n} page(s); at least 2"),
            Self::TooLarge { len, max } => write!(f, "a region of {len} bytes, more than the {max} this machine takes"),
            Self::Forked => f.write_str("the region belongs to the parent of this forked process"),
            Self::TooManyPins { offset } => write!(f, "the page at {offset} holds the most pins it can"),
            Self::SwapFull { offset } => {
                write!(f, "the page at {offset} was not loaded: the region is at its budget and the swap is full")
            }
            Self::Userfaultfd(why) => write!(f, "userfaultfd: {why}"),
            Self::Setup(e) => write!(f, "region setup: {e}"),
            Self::OutOfBounds { offset, len, size } => {
                write!(f, "{len} bytes at {offset} past the region's {size} bytes")
            }
            Self::Misaligned(offset) => write!(f, "word access at {offset}, not 8-aligned"),
            Self::HandlerGone => f.write_str("the fault handler has stopped"),
            Self::LoadFailed { offset } => write!(f, "the page at {offset} could not be loaded"),
            Self::PinTooLarge { pages, budget } => {
                write!(f, "a pin of {pages} pages, more than the resident budget of {budget}")
            }
        }
    }
}

impl std::error::Error for RegionError {}

/// A region's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionStats {
    /// Missing faults handled.
    pub missing_faults: u64,
    /// Write-protect faults handled (first writes to clean pages).
    pub wp_faults: u64,
    /// Faults resolved with the zero page.
    pub zero_fills: u64,
    /// Pages loaded from zswap or the swap file (fault-around included).
    pub swap_ins: u64,
    /// Of those, pages loaded ahead of a fault.
    pub fault_around_pages: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Evicted pages that were clean and already stored: not compressed
    /// again.
    pub evicted_clean: u64,
    /// Victims that could not be stored (swap full, write error): kept
    /// resident.
    pub evict_failures: u64,
    /// Loads that failed. The page's stored copy is kept; the access that
    /// needed it got [`RegionError::LoadFailed`] (or, a raw access,
    /// `SIGBUS` where the kernel has `UFFDIO_POISON`).
    pub load_failures: u64,
    /// Pages resident now.
    pub resident: u64,
    /// Pages the region's accessors ([`SwapRegion::read`] and the like)
    /// loaded in their own threads (no fault, no hand-off).
    pub loads_in_thread: u64,
    /// Loads that found the region at its budget and evicted for
    /// themselves (direct reclaim).
    pub direct_reclaims: u64,
    /// Times a load woke the background reclaimer at the high mark.
    pub reclaimer_wakeups: u64,
    /// Of [`evictions`](Self::evictions), the background reclaimer's.
    pub background_evictions: u64,
    /// The 99th percentile of the time a load took, from its claim to the
    /// page mapped (a fault's time in the handler thread, or an accessor's
    /// load with any eviction it did first), in ns, to within a quarter.
    pub load_p99_ns: u64,
    /// Raw faults resolved in the faulting thread's `SIGBUS` handler
    /// ([`RegionConfig::fault_in_thread`]).
    pub faults_in_thread: u64,
    /// Of those, loads the handler handed to the handler thread (no free
    /// load buffer, or no clean victim at the budget).
    pub handoffs: u64,
    /// Pages marked resident that the program had dropped behind the
    /// region's back (`MADV_DONTNEED`): reloaded from their stored copy
    /// (or zeros) when touched, or found so by eviction.
    pub program_drops: u64,
    /// Dirty victims that held only zeros: dropped with no stored copy
    /// (and no swap slot).
    pub zero_drops: u64,
}

/// Counters the handler updates and anyone may read.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) missing_faults: AtomicU64,
    pub(crate) wp_faults: AtomicU64,
    pub(crate) zero_fills: AtomicU64,
    pub(crate) swap_ins: AtomicU64,
    pub(crate) fault_around_pages: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) evicted_clean: AtomicU64,
    pub(crate) evict_failures: AtomicU64,
    pub(crate) load_failures: AtomicU64,
    pub(crate) resident: AtomicU64,
    pub(crate) loads_in_thread: AtomicU64,
    pub(crate) direct_reclaims: AtomicU64,
    pub(crate) reclaimer_wakeups: AtomicU64,
    pub(crate) background_evictions: AtomicU64,
    pub(crate) faults_in_thread: AtomicU64,
    pub(crate) handoffs: AtomicU64,
    pub(crate) program_drops: AtomicU64,
    pub(crate) zero_drops: AtomicU64,
}

/// Anonymous memory of `len` bytes of which at most `resident_budget`
/// pages are resident; the rest live in a [`Zswap`].
///
/// Any number of threads may read and write it at once, through
/// [`read`](Self::read)/[`write`](Self::write) and the word calls (or
/// through raw pointers from [`as_ptr`](Self::as_ptr), at the caller's
/// risk: a touch of an evicted page is loaded in the touching thread's
/// `SIGBUS` handler (or, without that mode, by the region's handler
/// thread), and one whose load failed raises `SIGBUS`). The accessors load
/// evicted pages in the calling thread.
///
/// ```
/// use mmkit::{Backing, HugePages, MemoryMapBuilder};
/// use mmkit_zswap::{RegionConfig, SwapFile, SwapRegion, Zswap, ZswapParams};
/// use std::sync::Arc;
///
/// let mm = MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
/// let zswap = Arc::new(Zswap::new(Arc::new(mm), SwapFile::create_temp(4096).unwrap(), ZswapParams::default()).unwrap());
/// let region = match SwapRegion::new(zswap.clone(), RegionConfig::new(1 << 20, 16)) {
///     Ok(region) => region,
///     Err(e) => { eprintln!("skipped: {e}"); return; }      // no userfaultfd here
/// };
/// for page in 0..256 {
///     region.write_u64(page * 4096, page as u64).unwrap(); // 256 pages, 16 resident
/// }
/// assert_eq!(region.read_u64(0).unwrap(), 0);               // faulted back in from zswap
/// assert!(zswap.stats().stored_pages > 200);
/// drop(region);                                             // every entry invalidated
/// zswap.flush_deferred();
/// assert_eq!(zswap.stats().stored_pages, 0);
/// ```
pub struct SwapRegion {
    shared: Arc<Shared<Linux>>,
    handler: Option<JoinHandle<()>>,
    /// The region's entry in the `SIGBUS` handler's table, in that mode.
    signal: Option<signal::Registration>,
}

impl core::fmt::Debug for SwapRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SwapRegion").field("len", &self.len()).field("stats", &self.stats()).finish()
    }
}

/// Starts the handler thread of `shared`.
fn spawn_handler<O: os::Os>(shared: &Arc<Shared<O>>) -> std::io::Result<JoinHandle<()>> {
    let handler = Handler::new(shared.clone());
    std::thread::Builder::new().name("mmkit-zswap-uffd".into()).spawn(move || handler.run())
}

impl SwapRegion {
    /// Maps the region, registers it with a new userfaultfd (missing and
    /// write-protect faults) and starts its fault handler.
    ///
    /// # Errors
    /// [`RegionError::Empty`], [`RegionError::Unaligned`],
    /// [`RegionError::ZeroParameter`] for bad configurations;
    /// [`RegionError::Userfaultfd`] where the kernel has no userfaultfd
    /// for this process or no anonymous write-protection;
    /// [`RegionError::Setup`].
    pub fn new(zswap: Arc<Zswap>, config: RegionConfig) -> Result<Self, RegionError> {
        if config.len == 0 {
            return Err(RegionError::Empty);
        }
        if config.len % PAGE_SIZE != 0 {
            return Err(RegionError::Unaligned(config.len));
        }
        for (name, value) in [
            ("resident_budget", config.resident_budget),
            ("evict_batch", config.evict_batch),
            ("fault_around", config.fault_around),
        ] {
            if value == 0 {
                return Err(RegionError::ZeroParameter(name));
            }
        }
        if config.resident_budget < 2 {
            return Err(RegionError::BudgetTooSmall(config.resident_budget));
        }
        let max = Self::max_len();
        if config.len > max {
            return Err(RegionError::TooLarge { len: config.len, max });
        }
        let _region_code = signal::RegionCode::enter();
        let forks = os::watch_forks();
        // The handler goes in before the descriptor asks for SIGBUS mode.
        let sigbus = config.fault_in_thread && signal::install();
        let os = Linux::new(config.len, sigbus).map_err(|e| match e {
            SetupError::Userfaultfd(why) => RegionError::Userfaultfd(why),
            SetupError::Io(e) => RegionError::Setup(e),
        })?;
        let shared = Shared::new(os, zswap, config, forks).ok_or(RegionError::TooLarge { len: config.len, max })?;
        let shared = Arc::new(shared);
        let thread = spawn_handler(&shared).map_err(RegionError::Setup)?;
        let signal = if shared.os.has_sigbus() {
            match signal::register(&shared) {
                Some(registration) => Some(registration),
                None => {
                    shared.stop.store(true, Relaxed);
                    shared.kick();
                    let _ = thread.join();
                    let full = "the SIGBUS handler's table of regions is full";
                    return Err(RegionError::Setup(std::io::Error::other(full)));
                }
            }
        } else {
            None
        };
        Ok(Self { shared, handler: Some(thread), signal })
    }

    /// The longest region this machine takes: one whose per-page state
    /// (a few dozen bytes a page) fits in a quarter of its memory, and at
    /// most 2^47 bytes (x86-64's user address space).
    pub fn max_len() -> usize {
        let per_page = (size_of::<std::sync::atomic::AtomicU32>() + slots::Slots::BYTES_PER_PAGE) as u64;
        let pages = (os::physical_memory() / 4 / per_page).min((1u64 << 47) / PAGE_SIZE as u64);
        usize::try_from(pages).unwrap_or(usize::MAX / PAGE_SIZE).saturating_mul(PAGE_SIZE)
    }

    /// Whether the calling thread is running a region's own code: one of
    /// the calls of a region that may load, evict or allocate, or a
    /// region's handler thread. A global allocator whose heap is region
    /// memory must serve the allocations made while this is true from
    /// other memory (and free each block where it came from): the
    /// region's code may hold the page claims and locks that a fault on
    /// its own allocation would need, and such a fault ends the process
    /// with a message (`docs/zsmalloc-zswap.md`, "A heap in a region").
    /// One thread-local read: no allocation, no lock, safe in an allocator
    /// and in a signal handler.
    pub fn in_region_call() -> bool {
        signal::RegionCode::active()
    }

    /// Bytes of the region.
    pub fn len(&self) -> usize {
        self.shared.os.len()
    }

    /// Always false: a region has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The address of the region's first byte. Reading or writing through
    /// it is the caller's `unsafe` business; [`read`](Self::read) and
    /// [`write`](Self::write) are the safe way.
    pub fn as_ptr(&self) -> *mut u8 {
        self.shared.os.as_ptr()
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        if self.shared.forked() {
            return Err(RegionError::Forked);
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(RegionError::OutOfBounds { offset, len, size: self.len() }),
        }
    }

    /// Copies `out.len()` bytes at `offset` out of the region.
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`]; [`RegionError::LoadFailed`] (the
    /// bytes before that page were read); [`RegionError::HandlerGone`].
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), RegionError> {
        self.check(offset, out.len())?;
        let os = &self.shared.os;
        self.shared.by_page(offset, out.len(), false, |at, from, n| os.read(at, &mut out[from..from + n]))
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`]; [`RegionError::LoadFailed`] (the
    /// bytes before that page were written, none from it on);
    /// [`RegionError::HandlerGone`].
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        self.check(offset, data.len())?;
        let os = &self.shared.os;
        self.shared.by_page(offset, data.len(), true, |at, from, n| os.write(at, &data[from..from + n]))
    }

    /// The word at `offset` (8-aligned).
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`], [`RegionError::Misaligned`],
    /// [`RegionError::LoadFailed`], [`RegionError::HandlerGone`].
    pub fn read_u64(&self, offset: usize) -> Result<u64, RegionError> {
        self.check(offset, 8)?;
        if offset % 8 != 0 {
            return Err(RegionError::Misaligned(offset));
        }
        self.shared.with_page(offset / PAGE_SIZE, false, || self.shared.os.load_u64(offset))
    }

    /// Stores `value` at `offset` (8-aligned).
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`], [`RegionError::Misaligned`],
    /// [`RegionError::LoadFailed`], [`RegionError::HandlerGone`].
    pub fn write_u64(&self, offset: usize, value: u64) -> Result<(), RegionError> {
        self.check(offset, 8)?;
        if offset % 8 != 0 {
            return Err(RegionError::Misaligned(offset));
        }
        self.shared.with_page(offset / PAGE_SIZE, true, || self.shared.os.store_u64(offset, value))
    }

    /// Evicts pages until at most `keep` are resident, and returns how many
    /// were evicted (pinned pages, and pages that cannot be stored, stay).
    ///
    /// # Errors
    /// [`RegionError::HandlerGone`], [`RegionError::Forked`].
    pub fn reclaim(&self, keep: usize) -> Result<usize, RegionError> {
        self.shared.reclaim(keep)
    }

    /// Whether raw accesses' faults are resolved in the faulting thread
    /// (`SIGBUS` mode, [`RegionConfig::fault_in_thread`] on a kernel with
    /// `UFFD_FEATURE_SIGBUS`), rather than by the handler thread.
    pub fn resolves_faults_in_thread(&self) -> bool {
        self.signal.is_some()
    }

    /// The region's counters.
    pub fn stats(&self) -> RegionStats {
        self.shared.stats()
    }

    /// Pages of the region the kernel has mapped now (`mincore`): what
    /// [`RegionStats::resident`] counts, as the page tables see it.
    ///
    /// # Errors
    /// [`RegionError::Setup`] when `mincore` fails.
    pub fn mapped_pages(&self) -> Result<usize, RegionError> {
        let _region_code = signal::RegionCode::enter();
        self.shared.os.mapped_pages().map_err(RegionError::Setup)
    }

    /// The zswap the region swaps to.
    pub fn zswap(&self) -> &Arc<Zswap> {
        &self.shared.zswap
    }
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod tests;

impl Drop for SwapRegion {
    /// The process exit: the handler stops, then every swap entry of the
    /// region is freed in one batch (zswap entries through the deferred
    /// free unless the region was built with [`ReleaseMode::Sync`]), then
    /// the memory is unmapped.
    fn drop(&mut self) {
        if self.shared.forked() {
            // A forked child's copy: the handler thread is the parent's,
            // the memory is not mapped here, and the swap entries are the
            // parent's to free. Nothing is touched; the child's copies of
            // the bookkeeping are left for its exit.
            std::mem::forget(self.handler.take());
            std::mem::forget(self.signal.take());
            std::mem::forget(self.shared.clone());
            return;
        }
        let _region_code = signal::RegionCode::enter();
        // Out of the SIGBUS handler's table first (waiting only for this
        // region's handlers in flight, which may need the handler thread
        // to finish a hand-off), then the handler stops.
        drop(self.signal.take());
        self.shared.stop.store(true, Relaxed);
        self.shared.kick();
        if let Some(thread) = self.handler.take() {
            let _ = thread.join();
        }
        // No thread touches the region now (the drop has it exclusively,
        // and the handler has returned and dropped its reference).
        match Arc::get_mut(&mut self.shared) {
            Some(shared) => shared.slots.release(&shared.zswap, shared.config.release),
            None => self.shared.slots.release_shared(&self.shared.zswap, self.shared.config.release),
        }
    }
}
