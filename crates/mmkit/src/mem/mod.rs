//! The memory layer: page descriptors, the pageblock bitmap, the one
//! index-linked list, locks, zeroed tables and owned blocks' bytes. Beside
//! the OS layer (`sys`) the only layer allowed `unsafe`, and only in
//! `rawmem` (the crate denies it everywhere else).
//!
//! Knows nothing of zones, free-list policy or the allocator; every layer
//! above builds on it.

pub(crate) mod list;
pub(crate) mod map;
pub(crate) mod owned;
pub(crate) mod page;
pub(crate) mod pageblock;
#[allow(unsafe_code)]
pub(crate) mod rawmem;
pub(crate) mod sync;
