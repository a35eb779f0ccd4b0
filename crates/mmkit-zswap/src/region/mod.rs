//! [`SwapRegion`]: anonymous memory with a resident budget, paged to a
//! [`Zswap`] through userfaultfd — a userspace swap-out and swap-in path
//! over the same zswap calls the kernel makes.
//!
//! - **Eviction.** When a fault would take the region past its budget, a
//!   CLOCK picks victims (a page referenced since the hand last passed gets
//!   a second chance; faults and first writes set the bit). A victim is
//!   write-protected (so a concurrent writer waits instead of losing its
//!   write), read, stored (`zswap_store`, or the swap file when zswap
//!   refuses it) unless it is clean, and dropped with `MADV_DONTNEED`.
//! - **Faults.** A missing fault on a swapped page loads it with
//!   `UFFDIO_COPY` (keeping the zswap entry); on a page never swapped it
//!   maps the zero page (`UFFDIO_ZEROPAGE`). A page loaded from zswap is
//!   mapped write-protected: its first write is a write-protect fault that
//!   marks it dirty. A clean page whose entry is still in zswap (or on the
//!   swap file) is evicted without being compressed again.
//! - **Fault-around.** On a run of faults at consecutive pages, the next
//!   swapped pages are loaded with the faulting one in one `UFFDIO_COPY`
//!   (Linux's swap readahead, VMA-based in spirit).
//! - **Release.** Dropping the region is a process exit: every swap entry
//!   is freed at once, zswap entries through `zs_free_deferred` (or
//!   synchronously, [`ReleaseMode::Sync`], to compare).
//!
//! Write tracking uses synchronous write-protect faults (`UFFDIO_WRITEPROTECT`,
//! Linux 5.7+), not `UFFD_FEATURE_WP_ASYNC` with `PAGEMAP_SCAN`: eviction
//! must stop writers while it reads a victim, and asynchronous
//! write-protection does not stop them.
//!
//! Not supported: `fork` (the mapping is `MADV_DONTFORK`: a child does not
//! see it), `mremap` or `munmap` of parts of the region, pages larger than
//! 4 KiB, sharing the region with another process.
//!
//! Owns the mapping, the fault-handler thread and the per-page state; uses
//! only [`Zswap`]'s public calls. Its `unsafe` is all in `sys` (the
//! mapping) and `uffd` (the userfaultfd bindings).

mod handler;
mod sys;
mod uffd;

use crate::{ReleaseMode, Zswap, PAGE_SIZE};
use handler::{Handler, Request, Shared};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use uffd::{FeatureFlags, IoctlFlags, RegisterMode, UffdBuilder};

/// How a region is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// Bytes of the region: a positive multiple of 4 KiB.
    pub len: usize,
    /// Pages that may be resident at once (at least 1).
    pub resident_budget: usize,
    /// Pages evicted together when the budget is reached (at least 1).
    pub evict_batch: usize,
    /// Most pages one fault loads on a sequential run (1: no fault-around).
    pub fault_around: usize,
    /// How the swap entries are freed when the region is dropped.
    pub release: ReleaseMode,
}

impl RegionConfig {
    /// `len` bytes with `resident_budget` pages resident, evicting 16
    /// pages at a time, fault-around of 8 pages, deferred release.
    pub fn new(len: usize, resident_budget: usize) -> Self {
        Self { len, resident_budget, evict_batch: 16, fault_around: 8, release: ReleaseMode::Deferred }
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
}

impl core::fmt::Display for RegionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Empty => f.write_str("a region of 0 bytes"),
            Self::Unaligned(len) => write!(f, "a region of {len} bytes, not a multiple of {PAGE_SIZE}"),
            Self::ZeroParameter(name) => write!(f, "{name} must be at least 1"),
            Self::Userfaultfd(why) => write!(f, "userfaultfd: {why}"),
            Self::Setup(e) => write!(f, "region setup: {e}"),
            Self::OutOfBounds { offset, len, size } => {
                write!(f, "{len} bytes at {offset} past the region's {size} bytes")
            }
            Self::Misaligned(offset) => write!(f, "word access at {offset}, not 8-aligned"),
            Self::HandlerGone => f.write_str("the fault handler has stopped"),
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
    /// Loads that failed (data lost: the page reads as zeros).
    pub load_failures: u64,
    /// Pages resident now.
    pub resident: u64,
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
}

/// Anonymous memory of `len` bytes of which at most `resident_budget`
/// pages are resident; the rest live in a [`Zswap`].
///
/// Any number of threads may read and write it at once, through
/// [`read`](Self::read)/[`write`](Self::write) and the word calls (or
/// through raw pointers from [`as_ptr`](Self::as_ptr), at the caller's
/// risk). A touch of an evicted page blocks until the region's fault
/// handler thread has loaded it.
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
    shared: Arc<Shared>,
    handler: Option<JoinHandle<Handler>>,
}

impl core::fmt::Debug for SwapRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SwapRegion").field("len", &self.len()).field("stats", &self.stats()).finish()
    }
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
        let uffd = UffdBuilder::new()
            .close_on_exec(true)
            .non_blocking(true)
            .user_mode_only(true)
            .require_features(FeatureFlags::PAGEFAULT_FLAG_WP)
            .create()
            .map_err(|e| RegionError::Userfaultfd(e.to_string()))?;
        let map = sys::Mapping::new(config.len).map_err(RegionError::Setup)?;
        map.dont_fork().map_err(RegionError::Setup)?;
        let ioctls = uffd
            .register_with_mode(map.as_ptr().cast(), map.len(), RegisterMode::MISSING | RegisterMode::WRITE_PROTECT)
            .map_err(|e| RegionError::Userfaultfd(format!("register: {e}")))?;
        if !ioctls.contains(IoctlFlags::WRITE_PROTECT | IoctlFlags::COPY) {
            return Err(RegionError::Userfaultfd("no write-protection for anonymous memory".into()));
        }
        let (wake_r, wake_w) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK)
                .map_err(|e| RegionError::Setup(e.into()))?;
        let shared = Arc::new(Shared {
            map,
            uffd,
            zswap,
            config,
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            wake_w,
            requests: Mutex::new(Vec::new()),
        });
        let handler = Handler::new(shared.clone(), wake_r);
        let thread = std::thread::Builder::new()
            .name("mmkit-zswap-uffd".into())
            .spawn(move || handler.run())
            .map_err(RegionError::Setup)?;
        Ok(Self { shared, handler: Some(thread) })
    }

    /// Bytes of the region.
    pub fn len(&self) -> usize {
        self.shared.map.len()
    }

    /// Always false: a region has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The address of the region's first byte. Reading or writing through
    /// it is the caller's `unsafe` business; [`read`](Self::read) and
    /// [`write`](Self::write) are the safe way.
    pub fn as_ptr(&self) -> *mut u8 {
        self.shared.map.as_ptr()
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(RegionError::OutOfBounds { offset, len, size: self.len() }),
        }
    }

    /// Copies `out.len()` bytes at `offset` out of the region.
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`].
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), RegionError> {
        self.check(offset, out.len())?;
        self.shared.map.read(offset, out);
        Ok(())
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`].
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        self.check(offset, data.len())?;
        self.shared.map.write(offset, data);
        Ok(())
    }

    /// The word at `offset` (8-aligned).
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`], [`RegionError::Misaligned`].
    pub fn read_u64(&self, offset: usize) -> Result<u64, RegionError> {
        self.check(offset, 8)?;
        if offset % 8 != 0 {
            return Err(RegionError::Misaligned(offset));
        }
        Ok(self.shared.map.load_u64(offset))
    }

    /// Stores `value` at `offset` (8-aligned).
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`], [`RegionError::Misaligned`].
    pub fn write_u64(&self, offset: usize, value: u64) -> Result<(), RegionError> {
        self.check(offset, 8)?;
        if offset % 8 != 0 {
            return Err(RegionError::Misaligned(offset));
        }
        self.shared.map.store_u64(offset, value);
        Ok(())
    }

    /// Evicts pages until at most `keep` are resident, and returns how many
    /// were evicted.
    ///
    /// # Errors
    /// [`RegionError::HandlerGone`].
    pub fn reclaim(&self, keep: usize) -> Result<usize, RegionError> {
        let (tx, rx) = mpsc::channel();
        self.shared.push(Request::Reclaim { keep, reply: tx });
        rx.recv().map_err(|_| RegionError::HandlerGone)
    }

    /// The region's counters.
    pub fn stats(&self) -> RegionStats {
        let c = &self.shared.counters;
        RegionStats {
            missing_faults: c.missing_faults.load(Relaxed),
            wp_faults: c.wp_faults.load(Relaxed),
            zero_fills: c.zero_fills.load(Relaxed),
            swap_ins: c.swap_ins.load(Relaxed),
            fault_around_pages: c.fault_around_pages.load(Relaxed),
            evictions: c.evictions.load(Relaxed),
            evicted_clean: c.evicted_clean.load(Relaxed),
            evict_failures: c.evict_failures.load(Relaxed),
            load_failures: c.load_failures.load(Relaxed),
            resident: c.resident.load(Relaxed),
        }
    }

    /// The zswap the region swaps to. Sharing it gives no reach into the
    /// region's pages: the region's swap entries never leave its handler,
    /// and every zswap call that touches a slot takes the entry token its
    /// allocation made (entries cannot be built from numbers), so another
    /// region's user, or this one's, can reach only the slots it allocated
    /// itself.
    pub fn zswap(&self) -> &Arc<Zswap> {
        &self.shared.zswap
    }
}

impl Drop for SwapRegion {
    /// The process exit: the handler stops, then every swap entry of the
    /// region is freed in one batch (zswap entries through the deferred
    /// free unless the region was built with [`ReleaseMode::Sync`]), then
    /// the memory is unmapped.
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        self.shared.kick();
        if let Some(thread) = self.handler.take() {
            if let Ok(handler) = thread.join() {
                let entries = handler.into_swap_entries();
                // Every entry is this instance's: the region made them all.
                let _ = self.shared.zswap.swap_free_batch(entries, self.shared.config.release);
            }
        }
    }
}
