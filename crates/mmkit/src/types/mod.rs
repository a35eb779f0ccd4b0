//! Shared types and constants every layer uses: GFP and migratetypes, the
//! error types, the placement policy. Imports nothing from the rest of the crate.

pub(crate) mod config_error;
pub mod error;
pub(crate) mod geometry;
pub mod gfp;
pub(crate) mod page_flags;
pub(crate) mod pfn_calls;
pub mod placement;

/// Orders above this are "costly": they give up sooner (Linux's
/// `PAGE_ALLOC_COSTLY_ORDER`).
pub const PAGE_ALLOC_COSTLY_ORDER: u32 = 3;

/// Names one CMA area of a [`PageAllocator`](crate::PageAllocator); areas are numbered in the
/// order they were declared on the builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmaId(pub(crate) usize);

impl CmaId {
    /// Position of the area in declaration order.
    pub const fn index(self) -> usize {
        self.0
    }
}
