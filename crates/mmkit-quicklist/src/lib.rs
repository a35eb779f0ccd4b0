//! # mmkit-quicklist — quicklists and a page table on mmkit's pages
//!
//! Linux's quicklists (`include/linux/quicklist.h`, from the 2007 series
//! "Quicklists for page table pages"): per-CPU stacks of free pages kept in
//! a known state — zero, or what a constructor wrote — so that a page-table
//! page comes without zeroing; and a four-level radix page table that takes
//! its table pages from them.
//!
//! Built on the page allocator's public API only: pages are held as
//! [`mmkit::PageBlock`]s tagged with each set's own [`mmkit::OwnerKey`]
//! ([`Quicklists::owner`]), whose bytes are reached
//! through [`mmkit::Blocks::block_bytes`], so this crate has no
//! `unsafe` block. Its only `unsafe` items are the two frees that trust
//! their caller's word about a page's bytes (Linux's `quicklist_free`
//! contract, [`Quicklists::quicklist_free_page_in_state`] and
//! [`QuicklistCpu::free_page_in_state`](quicklist::QuicklistCpu::free_page_in_state)),
//! each allowed where it is declared. Needs a map with real memory
//! ([`mmkit::Backing::RealMemory`]).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod pagetable;
pub mod quicklist;

pub use quicklist::{
    PageFn, QuickPage, QuicklistCpu, QuicklistError, QuicklistStats, Quicklists, DEFAULT_NR_QUICK,
    FRACTION_OF_NODE_MEM, MAX_NR_QUICK,
};
