//! # mmkit-zswap — Linux's zswap on mmkit's zsmalloc, with a userfaultfd front end
//!
//! zswap is a compressed cache in front of a swap device (`mm/zswap.c`): a
//! page being swapped out is offered to it (`zswap_store`); if accepted, it
//! is kept compressed in a zsmalloc pool and never reaches the device. On
//! swap-in `zswap_load` decompresses it. When the swap entry is freed (the
//! owner exits, unmaps, discards) `zswap_invalidate` drops the entry, here
//! through `zs_free_deferred` so the exit path does not wait for zsmalloc.
//! When the pool reaches its limit (`max_pool_percent` of the page
//! allocator's memory), the coldest entries are written back to the real
//! swap device (`zswap_writeback_entry`), a file with its own slot
//! allocator ([`SwapFile`]).
//!
//! Two layers:
//! - [`Zswap`] — the cache: entries keyed by swap entry ([`SwpEntry`], an
//!   owned token made by allocating a slot and consumed by freeing it), an
//!   LRU with a second-chance shrinker, the pool limit with hysteresis,
//!   same-filled pages kept as their value, reject counters and parameters
//!   named as Linux names them. No `unsafe`.
//! - [`SwapRegion`] — anonymous memory with a resident budget, whose pages
//!   beyond the budget are swapped out to a [`Zswap`] and faulted back in
//!   through userfaultfd. Its `unsafe` (mmap, madvise, copies in and out
//!   of the mapping, the userfaultfd system call and ioctls, the `SIGBUS`
//!   handler's `sigaction` and signal arguments) is confined to three
//!   modules: the mapping's, the userfaultfd bindings' (declared in the
//!   crate from the kernel's uAPI header, no bindgen) and the signal
//!   handler's.
//!
//! ```
//! use mmkit::{Backing, HugePages, MemoryMapBuilder};
//! use mmkit_zswap::{SwapFile, Zswap, ZswapParams};
//! use std::sync::Arc;
//!
//! let mm = MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
//! let swap = SwapFile::create_temp(1024).unwrap();           // 1024 slots of 4 KiB, locked
//! let zswap = Zswap::new(Arc::new(mm), swap, ZswapParams::default()).unwrap();
//! let entry = zswap.alloc_swap_slot().unwrap();              // Linux's folio_alloc_swap: an owned token
//! let page = [0x5au8; 4096];
//! zswap.zswap_store(&entry, &page).unwrap();                 // same-filled: kept as its value
//! let mut back = [0u8; 4096];
//! assert!(zswap.zswap_load(&entry, &mut back).unwrap());     // exclusive load: the entry is gone
//! assert_eq!(back, page);
//! zswap.swap_free(entry).unwrap();                           // consumed: the slot goes back to the file
//! assert_eq!(zswap.stats().stored_pages, 0);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod backing;
mod entry;
mod params;
mod region;
mod stats;
mod swap;
mod tree;
mod zswap;

pub use backing::SwapFile;
pub use entry::{EntryId, SwpEntry};
pub use params::{ZswapParams, PARAM_NAMES};

pub use region::{PinnedRange, RegionConfig, RegionError, RegionStats, SwapRegion};
pub use stats::ZswapStats;
pub use swap::KeepEntry;
pub use zswap::{Injected, ReleaseMode, Zswap};

/// Bytes of the pages zswap stores.
pub const PAGE_SIZE: usize = 4096;

/// Why zswap refused a page (each has its debugfs counter in
/// [`ZswapStats`]). The caller writes such a page to the swap device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// zswap is disabled (`enabled` = N).
    Disabled,
    /// The pool is at its limit, or has not yet shrunk below the accept
    /// threshold (`pool_limit_hit`).
    PoolLimit,
    /// The compressor failed (`reject_compress_fail`).
    CompressFail,
    /// The page compressed to a page or more (`reject_compress_poor`).
    CompressPoor,
    /// zsmalloc had no memory for the object (`reject_alloc_fail`).
    AllocFail,
    /// No entry could be allocated (`reject_kmemcache_fail`).
    KmemcacheFail,
}

/// Why a zswap call failed. Nothing was changed, except where a variant
/// says otherwise.
#[derive(Debug)]
pub enum ZswapError {
    /// The page was not stored (counted); the swap entry is unchanged and
    /// still the caller's.
    Rejected(Reject),
    /// A swap entry of another swap device (another [`Zswap`]).
    ForeignEntry(EntryId),
    /// A swap entry whose slot is not allocated on this device.
    BadSlot(EntryId),
    /// The entry is not in zswap (never stored, loaded exclusively,
    /// invalidated or written back already).
    NoEntry(EntryId),
    /// A page buffer that is not exactly [`PAGE_SIZE`] bytes.
    BadPageSize(usize),
    /// The stored data did not decompress (`decompress_fail`); the entry
    /// is kept.
    DecompressFail(EntryId),
    /// Every slot of the swap file is in use (or a swap file of 0 slots).
    SwapFull,
    /// A slot count whose swap file, slot bitmap or (for [`Zswap::new`])
    /// entry table cannot be made: refused before anything is created on
    /// disk or allocated.
    TooManySlots(u64),
    /// The swap file is locked by another owner (another process or another
    /// open file description): it holds someone's swapped pages.
    Busy,
    /// The swap file failed (open, lock, read, write).
    Io(std::io::Error),
    /// The page allocator's pages are not 4 KiB, or it has no real memory.
    Allocator(String),
    /// A parameter name `/sys/module/zswap/parameters` does not have, or a
    /// value it would refuse.
    BadParam {
        /// The parameter.
        name: String,
        /// The value given.
        value: String,
    },
    /// `zswap_writeback_entry` found the writeback failing
    /// (`reject_reclaim_fail`); the entry stays in zswap.
    WritebackFail(EntryId),
}

impl core::fmt::Display for ZswapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Rejected(why) => write!(f, "zswap rejected the page: {why:?}"),
            Self::ForeignEntry(e) => write!(f, "swap entry {e} belongs to another swap device"),
            Self::BadSlot(e) => write!(f, "swap entry {e} names no allocated slot"),
            Self::NoEntry(e) => write!(f, "swap entry {e} is not in zswap"),
            Self::BadPageSize(n) => write!(f, "a page of {n} bytes (zswap stores {PAGE_SIZE})"),
            Self::DecompressFail(e) => write!(f, "swap entry {e} did not decompress"),
            Self::SwapFull => f.write_str("every swap slot is in use"),
            Self::Busy => f.write_str("the swap file is locked by another owner"),
            Self::TooManySlots(n) => write!(
                f,
                "{n} swap slots do not fit: the file would pass 2^63 bytes, or the slot bitmap or zswap's \
                 entry table a quarter of the machine's memory"
            ),
            Self::Io(e) => write!(f, "swap file: {e}"),
            Self::Allocator(why) => write!(f, "page allocator: {why}"),
            Self::BadParam { name, value } => write!(f, "zswap parameter {name}={value:?} refused"),
            Self::WritebackFail(e) => write!(f, "writeback of swap entry {e} failed"),
        }
    }
}

impl std::error::Error for ZswapError {}
