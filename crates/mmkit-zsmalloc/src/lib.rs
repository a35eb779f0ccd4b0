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
//!
//! Objects are owned: [`Handle`] is a token that is not `Copy`, borrowed
//! by reads and writes and consumed by frees, carrying 64-bit pool ids and
//! generations that are never reused; a slot table that needs one word per
//! object holds them as raw words under the pool's [`RawKey`], checked on
//! every use (the handle module's documentation argues why that is safe).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod class;
mod compact;
mod deferred;
mod deferred_queue;
mod deferred_state;
mod groups;
mod handle;
mod migrate;
mod pool;
mod raw;
mod size_class;
mod slot_state;
mod stats;
mod worker;
mod zspage;

pub use deferred_state::{DeferredLayout, DeferredStats};
pub use handle::{Handle, HandleId, RawKey};
pub use pool::{ZsConfig, ZsPool, ZsPoolStats};

use mmkit::AllocError;

/// Why a zsmalloc call failed. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZsError {
    /// The page allocator has no real memory behind its pages.
    NoRealMemory,
    /// A chain size outside Linux's 4 ..= 16.
    BadChainSize(usize),
    /// The page allocator's pages are not of a size a pool can be made
    /// for (4 ..= 64 KiB, [`class::PAGE_SIZES`]).
    UnsupportedPageSize(usize),
    /// `zs_malloc` of 0 bytes or of more than a page.
    BadSize {
        /// Bytes asked for.
        size: usize,
        /// The largest object (the page size).
        max: usize,
    },
    /// The page allocator could not supply a zspage.
    NoMemory(Option<AllocError>),
    /// The handle or raw word names no live object of this pool that it
    /// may reach: a handle of another (or a dropped) pool, a raw word
    /// freed, queued or taken back already, stale, forged, or of another
    /// pool's key.
    InvalidHandle(HandleId),
    /// `zs_obj_write` of more bytes than the object has.
    TooLong {
        /// Bytes given.
        len: usize,
        /// The object's size.
        size: usize,
    },
    /// `zs_migrate_page` of a page no zspage of the pool holds.
    UnknownPage(mmkit::Pfn),
    /// No pool can be made: every pool id was handed out (the process made
    /// 2^64 - 1 pools; ids are never reused, so they are refused rather
    /// than wrapped). A page allocator with no owner tag left is
    /// [`OwnerTagsExhausted`](Self::OwnerTagsExhausted).
    TooManyPools,
    /// A call made from inside a `zs_obj_read_with` closure needs the size
    /// class that closure reads: the read holds the class's lock, so the
    /// call is refused rather than waiting for ever. Read the object out
    /// first ([`ZsPool::zs_obj_read`]) to change its class.
    Reentered {
        /// The class index.
        class: usize,
    },
    /// The page allocator has no owner tag left for another pool: every
    /// one of its [`PageOwner::MAX`](mmkit::PageOwner::MAX) tags is held
    /// (by pools, quicklist sets, frame adapters, guards, or tags retired
    /// with pages still out).
    OwnerTagsExhausted,
    /// A `zs_obj_read_with` call from inside the closures of `max` reads
    /// nested in each other on one thread: the thread's record of the
    /// classes it reads (what tells re-entry from contention) is full.
    ReadsNestedTooDeep {
        /// Reads one thread may nest.
        max: usize,
    },
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
            Self::UnsupportedPageSize(n) => write!(f, "page size {n} outside 4 KiB ..= 64 KiB"),
            Self::BadSize { size, max } => write!(f, "object size {size} outside 1..={max}"),
            Self::NoMemory(Some(e)) => write!(f, "no zspage: {e}"),
            Self::NoMemory(None) => f.write_str("no zspage"),
            Self::InvalidHandle(h) => write!(f, "handle {h} names no live object"),
            Self::TooManyPools => f.write_str("every zsmalloc pool id was handed out"),
            Self::UnknownPage(pfn) => write!(f, "pfn {pfn} is in no zspage of this pool"),
            Self::TooLong { len, size } => write!(f, "{len} bytes do not fit an object of {size}"),
            Self::BufferTooSmall { need, got } => write!(f, "the object has {need} bytes, the buffer {got}"),
            Self::Reentered { class } => write!(
                f,
                "size class {class} is being read by this thread's zs_obj_read_with closure; \
                 a call from that closure cannot lock it"
            ),
            Self::ReadsNestedTooDeep { max } => {
                write!(f, "{max} zs_obj_read_with closures are already nested on this thread; no deeper read is taken")
            }
            Self::OwnerTagsExhausted => {
                f.write_str("the page allocator's owner tags are all held; no owner key is left for another pool")
            }
        }
    }
}

impl std::error::Error for ZsError {}
