//! The shape of a view: a `Copy` handle borrowing the allocator, through
//! which a layer above `page_alloc` (contiguous ranges, reports) offers its
//! methods, since only `page_alloc` adds methods to [`PageAllocator`]
//! (`tests/layers.rs`).
//!
//! Owns only the macro that writes a view type's constructor, accessor,
//! `From` and `Debug`; what a view does is its layer's.
//!
//! [`PageAllocator`]: crate::PageAllocator
#![deny(unsafe_code)]

/// Declares `$name<'a>`, a view over `&'a PageAllocator` with `new`,
/// `allocator`, `From<&PageAllocator>` and `Debug`; the attributes given
/// (its docs) go on the type.
macro_rules! allocator_view {
    ($(#[$attr:meta])* $vis:vis struct $name:ident;) => {
        $(#[$attr])*
        #[derive(Clone, Copy)]
        $vis struct $name<'a> {
            mm: &'a $crate::PageAllocator,
        }

        impl<'a> $name<'a> {
            /// The view of `mm`.
            #[inline]
            pub fn new(mm: &'a $crate::PageAllocator) -> Self {
                Self { mm }
            }

            /// The allocator the view borrows.
            #[inline]
            pub fn allocator(&self) -> &'a $crate::PageAllocator {
                self.mm
            }
        }

        impl<'a> From<&'a $crate::PageAllocator> for $name<'a> {
            #[inline]
            fn from(mm: &'a $crate::PageAllocator) -> Self {
                Self::new(mm)
            }
        }

        impl core::fmt::Debug for $name<'_> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use allocator_view;
