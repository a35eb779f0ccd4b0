//! Unwind safety of the caller's closures: a constructor or destructor
//! runs on a held page, and a panic in it must not lose the page.
//!
//! Owns only the guard; the quicklists decide when a closure runs.

use mmkit::Blocks;
use mmkit::{PageAllocator, PageBlock};

/// A held block while a caller's constructor or destructor runs on it:
/// freed to the page allocator if that closure panics, so that the panic
/// leaves the page free rather than allocated with no handle. Taken out
/// (`block.take()`) when the closure returns.
pub(super) struct FreeOnUnwind<'q> {
    pub(super) alloc: &'q PageAllocator,
    pub(super) block: Option<PageBlock>,
}

impl Drop for FreeOnUnwind<'_> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            let _ = Blocks::new(self.alloc).free_block(block);
        }
    }
}
