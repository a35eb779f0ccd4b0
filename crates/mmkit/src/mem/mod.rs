//! The memory layer: page descriptors, the pageblock bitmap, locks and raw
//! page memory. The only layer allowed `unsafe` (in `rawmem`).
//!
//! Knows nothing of zones, free-list policy or the allocator; every layer
//! above builds on it.
#![allow(unsafe_code)]

pub(crate) mod list;
pub(crate) mod map;
pub(crate) mod owned;
pub(crate) mod page;
pub(crate) mod pageblock;
pub(crate) mod rawmem;
pub(crate) mod sync;
