//! Reporting: `/proc`-style text, snapshots of zones and per-CPU lists, and
//! the invariant checker. Reads the allocator's state; changes none of it.
//!
//! The layer's public face is [`Report`], a view borrowing the allocator:
//! every query of the layer is a method of the view, never of
//! [`PageAllocator`] itself, because `page_alloc` sits below this layer and
//! must stay whole without it (`tests/layers.rs` holds the rule). The view
//! reads the allocator only through what `page_alloc` and the layers under
//! it make visible to the crate, and must not take two zone locks at once.
//!
//! [`PageAllocator`]: crate::PageAllocator
#![deny(unsafe_code)]

pub(crate) mod info;
pub(crate) mod invariants;
pub mod procfs;

crate::page_alloc::view::allocator_view! {
    /// The reporting layer over one allocator: the `/proc` texts, zone
    /// snapshots, vmstat counters and the invariant checker. A borrowed view;
    /// make one wherever it is needed, it costs a reference.
    ///
    /// ```
    /// use mmkit::{Gfp, MemoryMapBuilder, Report};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    /// let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    /// let report = Report::new(&mm);
    /// assert!(report.buddyinfo().starts_with("Node 0, zone "));
    /// report.check_invariants().unwrap();
    /// mm.free_pages(pfn, 0).unwrap();
    /// ```
    pub struct Report;
}
