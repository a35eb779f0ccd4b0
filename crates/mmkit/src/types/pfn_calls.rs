//! [`PFN_CALLS`]: the one list of every public call of this crate that
//! takes a bare [`Pfn`](crate::Pfn), and what each does to a block a
//! handle owns.
//!
//! Owns only the list. The rule it states (`docs/architecture.md`, "Safe
//! at the edges"): a bare PFN grants nothing over an owned block (a
//! layer's `PageBlock`, a `PageGuard`, a frame adapter's frame, a
//! contiguous range, a quicklist's or a zsmalloc pool's page), so every
//! call that changes state refuses such a block and changes nothing. The
//! test `crates/mmkit-edges/tests/pfn_calls.rs` reads this crate's
//! sources, fails when a public fn taking a `Pfn` is missing here (or
//! listed and gone), and applies every call listed as changing state to a
//! block of every owned kind.

/// What a call that takes a bare PFN does to a block a handle owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnOwnedBlock {
    /// Changes state; refused with the error's `Owned` variant
    /// ([`FreeError::Owned`](crate::FreeError::Owned),
    /// [`PageError::Owned`](crate::PageError::Owned)), nothing changed.
    RefusedAsOwned,
    /// Changes state; refused with the error that says why the page is
    /// not the call's to take (not free, not in the CMA area's records),
    /// nothing changed.
    RefusedAsNotFree,
    /// Changes only pages of its own kind, which an owned block never is
    /// (a pinned CPU's `LOCAL` pages): the call succeeds and changes
    /// nothing.
    LeftAlone,
    /// Reads only (counts, flags, the owner, the node, an address).
    ReadsOnly,
    /// The PFNs are the call's output (slots it fills), not its input.
    Output,
    /// Changes an owned block by design, for the reason given.
    Exempt(&'static str),
}

/// A public call that takes a bare PFN: `Type::method` and what it does to
/// an owned block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfnCall {
    /// `Type::method`, as written in the source (`PageAllocator::get_page`).
    pub name: &'static str,
    /// What it does to an owned block.
    pub on_owned: OnOwnedBlock,
}

const fn call(name: &'static str, on_owned: OnOwnedBlock) -> PfnCall {
    PfnCall { name, on_owned }
}

use OnOwnedBlock::{Exempt, LeftAlone, Output, ReadsOnly, RefusedAsNotFree, RefusedAsOwned};

/// Every public call of this crate that takes a bare PFN (or a slice of
/// them), with what it does to an owned block. A new call belongs here;
/// the test of this list fails until it is.
pub const PFN_CALLS: &[PfnCall] = &[
    // References and frees.
    call("PageAllocator::free_pages", RefusedAsOwned),
    call("PageAllocator::free_frozen_pages", RefusedAsOwned),
    call("PageAllocator::put_page", RefusedAsOwned),
    call("PageAllocator::get_page", RefusedAsOwned),
    call("PageAllocator::free_pages_bulk", RefusedAsOwned),
    call("PageAllocator::release_pages", RefusedAsOwned),
    call("CpuHandle::free_pages", RefusedAsOwned),
    call("CpuHandle::free_frozen_pages", RefusedAsOwned),
    call("CpuHandle::put_page", RefusedAsOwned),
    call("CpuHandle::free_pages_bulk", RefusedAsOwned),
    call("CpuHandle::release_pages", RefusedAsOwned),
    call("PinnedCpu::free_pages", RefusedAsOwned),
    call("PinnedCpu::free_frozen_pages", RefusedAsOwned),
    call("PinnedCpu::put_page", RefusedAsOwned),
    call("PinnedCpu::free_pages_bulk", RefusedAsOwned),
    call("LockedZone::free_pages", RefusedAsOwned),
    call("Contig::free_contig_range", RefusedAsOwned),
    call("Contig::free_contig_frozen_range", RefusedAsOwned),
    // Flags and the private word.
    call("PageAllocator::set_page_flags", RefusedAsOwned),
    call("PageAllocator::clear_page_flags", RefusedAsOwned),
    call("PageAllocator::set_page_private", RefusedAsOwned),
    // Allocation at a place, isolation and migration types (contiguous
    // allocation isolates the range's pageblocks and changes their type).
    call("PageAllocator::alloc_pages_at", RefusedAsNotFree),
    call("Contig::alloc_contig_range", RefusedAsNotFree),
    call("Contig::alloc_contig_frozen_range", RefusedAsNotFree),
    call("Contig::alloc_contig_block", RefusedAsNotFree),
    call("Contig::cma_release", RefusedAsNotFree),
    call("PinnedCpu::hand_over", LeftAlone),
    call("LockedZone::hand_over", LeftAlone),
    // The owner's own way back: it needs the owner's key, not a bare PFN.
    call("Blocks::take_back_block", Exempt("needs the owner's key; another key's blocks are refused")),
    // Hardware poison: the report of a broken frame, whoever holds it.
    call(
        "PageAllocator::memory_failure",
        Exempt("marks the frame poisoned for its owner to see (block_poisoned); the owner's free takes it offline"),
    ),
    // Reads.
    call("Blocks::page_owner", ReadsOnly),
    call("PageAllocator::compound_head", ReadsOnly),
    call("PageAllocator::page_count", ReadsOnly),
    call("PageAllocator::page_flags", ReadsOnly),
    call("PageAllocator::page_private", ReadsOnly),
    call("PageAllocator::page_to_nid", ReadsOnly),
    call("PageAllocator::prefetch_page", ReadsOnly),
    call("PageAllocator::page_address", ReadsOnly),
    call("Report::pageblock_migratetype", ReadsOnly),
    // Slots the call fills.
    call("PageAllocator::alloc_pages_bulk", Output),
    call("PageAllocator::alloc_pages_bulk_vec", Output),
    call("CpuHandle::alloc_pages_bulk", Output),
    call("CpuHandle::alloc_pages_bulk_vec", Output),
    call("PinnedCpu::alloc_pages_bulk", Output),
];
