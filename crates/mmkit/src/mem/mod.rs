//! The memory layer: page descriptors, the pageblock bitmap, the one
//! index-linked list, locks, raw page memory and the per-CPU stacks of
//! restartable sequences. The only layer allowed `unsafe`, and only in
//! `rawmem` and `rseq` (the crate denies it everywhere else).
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
#[cfg(all(feature = "std", target_os = "linux", target_arch = "x86_64", not(loom)))]
#[allow(unsafe_code)]
pub(crate) mod rseq;
pub(crate) mod stack;
pub(crate) mod sync;
