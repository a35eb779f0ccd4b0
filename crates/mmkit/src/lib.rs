//! # mmkit — Linux's page allocator as a library
//!
//! A buddy page allocator with Linux's semantics and vocabulary: nodes and
//! zones, memory sections, pageblocks with migratetypes and fallback,
//! watermarks and `lowmem_reserve`, GFP → ALLOC flag conversion, compound and
//! frozen pages, bad-page reports and hardware poison. The core is `no_std` +
//! `alloc`; the default `std` feature adds real-memory backing.
//!
//! ```
//! use mmkit::{Gfp, MemoryMapBuilder};
//!
//! // 64 MiB on one node: DMA below 16 MiB, DMA32 above.
//! let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
//! let pfn = mm.alloc_pages(Gfp::KERNEL, 3).unwrap();   // 8 contiguous pages
//! assert_eq!(pfn.0 % 8, 0);                             // naturally aligned
//! mm.free_pages(pfn, 3).unwrap();
//! assert!(mm.free_pages(pfn, 3).is_err());              // double free: typed error
//! mm.check_invariants().unwrap();
//! ```
//!
//! ## Glossary
//! - **page**: the unit of allocation (4 KiB by default); **PFN**: its number.
//! - **order**: a block of 2^order pages, naturally aligned.
//! - **pageblock**: 2^`pageblock_order` pages sharing one migratetype.
//! - **section**: 2^`section_order` pages; no free block crosses one.
//!
//! ## Layers
//! Public API (`allocator`, `alloc_at`, `free`, `info`, `contig`, `free_contig`, `cma`)
//! → zones (`zone`, `fallback`, `isolation`) → buddy lists (`buddy`) → page
//! descriptors (`page`, `pageblock`). `migrate` is the embedder's side of
//! contiguous allocation. `quicklist` and `pagetable` (with `std`) sit on
//! top of the public API: per-CPU caches of pages in a known state, and a
//! radix page table built on them. `unsafe` lives in `rawmem`, plus the few calls to its page-content
//! accessors in `quicklist` and `pagetable`, each on a page that layer holds.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

extern crate alloc;

mod alloc_at;
mod allocator;
mod buddy;
mod bulk;
pub mod cma;
mod contig;
pub mod cpu;
pub mod error;
mod fallback;
mod free;
mod free_contig;
pub mod gfp;
pub mod hooks;
mod info;
mod invariants;
mod isolation;
pub mod memmap;
pub mod migrate;
mod page;
mod pageblock;
#[cfg(feature = "std")]
pub mod pagetable;
mod pcp;
mod pinned;
pub mod procfs;
#[cfg(feature = "std")]
pub mod quicklist;
mod rawmem;
mod slowpath;
mod stats;
mod sync;
pub mod zone;

pub use allocator::{PageAllocator, PAGE_ALLOC_COSTLY_ORDER};
pub use bulk::BulkFreeError;
pub use cma::{CmaAreaInfo, CmaId, CmaStats};
pub use cpu::{CpuHandle, NoSuchCpu, PcpInfo};
pub use error::{
    AllocError, BadCmaReason, BadPageReason, BuildError, CmaError, ContigError, FreeError, MigrateError, PageError,
};
pub use free::MemoryFailure;
pub use free_contig::ContigFreeSummary;
pub use gfp::{AllocFlags, Gfp, MigrateType, Watermark, ZoneType};
pub use hooks::{Hooks, NoHooks, QuietHooks};
pub use info::ZoneSnapshot;
pub use invariants::InvariantViolation;
pub use memmap::{Backing, Geometry, MemoryMapBuilder};
pub use migrate::{CopyMigrator, MigrateRequest, Migrator};
pub use page::PageFlags;
pub use pcp::{PcpCounters, PcpSizing};
pub use pinned::{PinError, PinnedCpu};
pub use rawmem::prefetch;
#[cfg(feature = "std")]
pub use rawmem::HugePages;
pub use stats::StatsSnapshot;

/// Highest node id + 1 the map accepts.
pub const MAX_NUMNODES: usize = 64;

/// A page frame number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pfn(pub u64);

impl core::fmt::Display for Pfn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The README's library example, compiled and run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExample;
