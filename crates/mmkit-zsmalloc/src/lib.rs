//! # mmkit-zsmalloc — Linux's zsmalloc on mmkit's pages
//!
//! zsmalloc is the allocator under zram and zswap: it packs compressed
//! pages of any size from 32 bytes to a page into "zspages", chains of up
//! to 16 order-0 pages, with objects allowed to straddle two pages, so that
//! it never needs a high-order allocation and wastes little. This crate
//! follows `mm/zsmalloc.c`: Linux's size classes and merging, fullness
//! groups, handles that survive compaction, in-object headers, huge
//! classes, and the 2026 work that made `zs_free` cheap (class index in the
//! handle, no pool-wide lock, pages freed outside the class lock, and
//! `zs_free_deferred`), and page migration for the page allocator's
//! contiguous allocations (`zs_migrate_page`).
//!
//! Its pages come from a [`mmkit::PageAllocator`] with real memory through
//! the public owned-block API (tagged with each pool's own key, [`ZsPool::owner`]), so the crate has
//! no `unsafe`. See [`ZsPool`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod class;
mod compact;
mod deferred;
mod handle;
mod migrate;
mod pool;
mod size_class;
mod stats;
mod zspage;

pub use deferred::{DeferredLayout, DeferredStats};
pub use handle::Handle;
pub use pool::{ZsConfig, ZsPool, ZsPoolStats};

use mmkit::AllocError;

/// Why a zsmalloc call failed. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZsError {
    /// The page allocator has no real memory behind its pages.
    NoRealMemory,
    /// A chain size outside Linux's 4 ..= 16.
    BadChainSize(usize),
    /// `zs_malloc` of 0 bytes or of more than a page.
    BadSize {
        /// Bytes asked for.
        size: usize,
        /// The largest object (the page size).
        max: usize,
    },
    /// The page allocator could not supply a zspage.
    NoMemory(Option<AllocError>),
    /// The handle names no live object: freed already, forged, or from
    /// another pool.
    InvalidHandle(Handle),
    /// `zs_obj_write` of more bytes than the object has.
    TooLong {
        /// Bytes given.
        len: usize,
        /// The object's size.
        size: usize,
    },
    /// `zs_migrate_page` of a page no zspage of the pool holds.
    UnknownPage(mmkit::Pfn),
    /// Every pool id is taken (4095 pools are alive at once), or the page
    /// allocator has no owner tag left for another pool
    /// ([`PageAllocator::new_owner_key`](mmkit::PageAllocator::new_owner_key)).
    TooManyPools,
    /// The caller's buffer cannot hold the object.
    BufferTooSmall {
        /// The object's size.
        need: usize,
        /// The buffer's.
        got: usize,
    },
}

impl core::fmt::Display for ZsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoRealMemory => f.write_str("zsmalloc needs a page allocator with real memory"),
            Self::BadChainSize(n) => write!(f, "chain size {n} outside 4..=16"),
            Self::BadSize { size, max } => write!(f, "object size {size} outside 1..={max}"),
            Self::NoMemory(Some(e)) => write!(f, "no zspage: {e}"),
            Self::NoMemory(None) => f.write_str("no zspage"),
            Self::InvalidHandle(h) => write!(f, "handle {h} names no live object"),
            Self::TooManyPools => f.write_str("4095 zsmalloc pools are alive already"),
            Self::UnknownPage(pfn) => write!(f, "pfn {pfn} is in no zspage of this pool"),
            Self::TooLong { len, size } => write!(f, "{len} bytes do not fit an object of {size}"),
            Self::BufferTooSmall { need, got } => write!(f, "the object has {need} bytes, the buffer {got}"),
        }
    }
}

impl std::error::Error for ZsError {}
