//! # mmkit — Linux's page allocator as a library
//!
//! A buddy page allocator with Linux's semantics and vocabulary: nodes and
//! zones, memory sections, pageblocks with migratetypes and fallback,
//! watermarks and `lowmem_reserve`, GFP → ALLOC flag conversion, compound and
//! frozen pages, bad-page reports and hardware poison. The core is `no_std` +
//! `alloc`; the default `std` feature adds real-memory backing.
//!
//! ```
//! use mmkit::{Gfp, MemoryMapBuilder, Report};
//!
//! // 64 MiB on one node: DMA below 16 MiB, DMA32 above.
//! let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
//! let pfn = mm.alloc_pages(Gfp::KERNEL, 3).unwrap();   // 8 contiguous pages
//! assert_eq!(pfn.0 % 8, 0);                             // naturally aligned
//! mm.free_pages(pfn, 3).unwrap();
//! assert!(mm.free_pages(pfn, 3).is_err());              // double free: typed error
//! Report::new(&mm).check_invariants().unwrap();
//! ```
//!
//! ## Glossary
//! - **page**: the unit of allocation (4 KiB by default); **PFN**: its number.
//! - **order**: a block of 2^order pages, naturally aligned.
//! - **pageblock**: 2^`pageblock_order` pages sharing one migratetype.
//! - **section**: 2^`section_order` pages; no free block crosses one.
//!
//! ## Layers
//! One folder per layer; a file imports only from its own layer or those
//! below it (`tests/layers.rs` checks every `crate::` path):
//!
//! 1. `types`: PFNs, geometry, GFP and migratetypes, page flags and owner
//!    tags, the error types.
//! 2. `sys`: the OS and the CPU (restartable sequences and membarrier,
//!    mmap and huge pages, the CPU id), one x86-64 Linux implementation
//!    and a fallback that says "not available"; with `mem::rawmem` the
//!    only place of `unsafe`.
//! 3. `mem`: page descriptors, the pageblock bitmap, the one index-linked
//!    list, locks, zeroed tables and owned blocks' bytes (`rawmem`).
//! 4. `zone`: buddy free areas, zones and watermarks, the fallback and
//!    claim rules, zonelists, CMA areas' bookkeeping.
//! 5. `pcp`: per-CPU lists, their sizing, the per-CPU state.
//! 6. `page_alloc`: [`PageAllocator`], the allocation API: the per-CPU
//!    cache (one door per direction for an order-0 page), the one slow
//!    path behind it, free paths, bulk, pinned CPUs and held zones, owned
//!    blocks for the layers above, the embedder's hooks and migrator; the
//!    views [`Cpus`] (per-CPU control), [`Tuning`] (knobs and background
//!    work) and [`Blocks`] (owner keys and owned blocks).
//! 7. `contig`: [`Contig`], a view of the allocator with
//!    `alloc_contig_range`, `free_contig_range`, owned ranges and CMA;
//!    pageblock isolation.
//! 8. `memmap` (the builder) and `report`: [`Report`], a view with the
//!    counters, the `/proc` text, snapshots and the invariant checker.
//!
//! Only `page_alloc` adds methods to [`PageAllocator`]; the other concerns
//! are views that borrow it (`Cpus::new(&mm)`, `Report::new(&mm)`), so the
//! allocator's own methods are the allocation API and it never names what
//! is built on it.
//!
//! Layers above the allocator live in crates of their own on its public
//! API: quicklists and page tables, zsmalloc, the trace parser.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

extern crate alloc;

mod contig;
// The x86_64 crate's traits are unsafe to implement: a promise, no unsafe
// operation (see the module).
#[cfg(feature = "x86_64")]
#[allow(unsafe_code)]
mod frames;
mod mem;
pub mod memmap;
mod page_alloc;
mod pcp;
mod report;
// The OS layer: restartable sequences, membarrier, mmap (see the module).
#[allow(unsafe_code)]
mod sys;
mod types;
pub mod zone;

pub use contig::cma;
pub use contig::Contig;
pub use page_alloc::{cpu, hooks, migrate};
pub use report::procfs;
pub use report::Report;
pub use types::{error, gfp};

pub use contig::cma::{CmaAreaInfo, CmaStats};
pub use contig::free_contig::ContigFreeSummary;
pub use contig::owned::{ContigRange, ContigRangeError};
#[cfg(feature = "x86_64")]
pub use frames::X86Frames;
pub use mem::owned::{BlockRef, BlockStack, OwnerKey, PageBlock};
pub use memmap::machine_memory;
pub use memmap::{Backing, MemoryMapBuilder};
pub use page_alloc::block::BlockError;
pub use page_alloc::bulk::BulkFreeError;
pub use page_alloc::compaction::{fragmentation_score_wmark, CompactResult, COMPACTION_HPAGE_ORDER};
pub use page_alloc::cpu::BadHighFraction;
pub use page_alloc::cpus::{CpuHandle, NoSuchCpu, PcpInfo};
pub use page_alloc::guard::PageGuard;
pub use page_alloc::hooks::{Hooks, NoHooks, QuietHooks};
pub use page_alloc::hwpoison::MemoryFailure;
pub use page_alloc::locked_zone::LockedZone;
pub use page_alloc::migrate::{CopyMigrator, MigrateRequest, Migrator};
pub use page_alloc::pinned::{PinError, PinnedCpu};
#[cfg(all(feature = "std", not(loom)))]
pub use page_alloc::reporting::FreePageReporter;
pub use page_alloc::reporting::{ReportSummary, PAGE_REPORTING_CAPACITY, PAGE_REPORTING_DELAY};
pub use page_alloc::source::PageSource;
pub use page_alloc::stats::StatsSnapshot;
pub use page_alloc::{Blocks, Cpus, PageAllocator, Tuning};
pub use pcp::{PcpCounters, PcpSizing};
pub use report::info::ZoneSnapshot;
pub use report::invariants::InvariantViolation;
pub use sys::{prefetch, HugePages};
pub use types::error::{
    AllocError, BadCmaReason, BadPageReason, BadRangeReason, BuildError, CmaError, ContigError, FreeError, IndexError,
    MigrateError, OwnerTagsExhausted, PageError, RangeKind, Tunable,
};
pub use types::geometry::{Geometry, ZoneSpec};
pub use types::gfp::{AllocFlags, Gfp, MigrateType, Watermark, ZoneType};
pub use types::page_flags::{PageFlags, PageOwner};
pub use types::pfn_calls::{OnOwnedBlock, PfnCall, PFN_CALLS};
pub use types::placement::{CompactionMode, PlacementPolicy};
pub use types::{CmaId, PAGE_ALLOC_COSTLY_ORDER};
pub use zone::placement::PlacementCounters;

/// Highest node id + 1 the map accepts.
pub const MAX_NUMNODES: usize = 64;

/// Most CPUs a map keeps lists for: the top of Linux's `CONFIG_NR_CPUS`
/// range on x86-64 (`MAXSMP`).
pub const MAX_NR_CPUS: usize = 8192;

/// A page frame number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pfn(pub u64);

impl core::fmt::Display for Pfn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
