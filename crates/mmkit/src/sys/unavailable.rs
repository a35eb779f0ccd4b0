//! Every other target (no `std`, another OS or CPU, a loom model): the
//! answers of `sys` that say "not available".
//!
//! The types exist and have the native implementation's methods, so the
//! rest of the crate compiles the same everywhere; none can be made
//! ([`CpuStacks::new`] is `None`, [`RealMemory::map`] an error), so their
//! methods are never reached. A port adds a native module beside
//! `linux_x86_64/` and names it in `sys/mod.rs`; nothing else changes.
#![allow(dead_code, reason = "the native API, whole; a build without std calls less of it")]

use crate::sys::{HugePages, Pop, Push};
use crate::types::error::RealMemoryError;
use core::ptr::NonNull;

/// Methods of a type no value of which exists: each body is an empty
/// `match`, so a call can never be reached (nor written wrongly).
macro_rules! never {
    ($($vis:vis fn $name:ident(&self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?;)*) => {
        $($vis fn $name(&self $(, $arg: $ty)*) $(-> $ret)? { match *self {} })*
    };
}

/// No restartable sequences here: never made.
pub(crate) enum CpuStacks {}

impl CpuStacks {
    /// `None`: no restartable sequences on this target.
    pub(crate) fn new(_caps: &[u32]) -> Option<Self> {
        None
    }
    never! {
        pub(crate) fn nr_cpus(&self) -> usize;
        pub(crate) fn current_cpu(&self) -> Option<usize>;
        pub(crate) fn pop(&self, _slot: usize) -> Pop;
        pub(crate) fn push(&self, _slot: usize, _item: u32, _home: u32) -> Push;
        pub(crate) fn pop_many(&self, _slot: usize, _out: &mut [u32]) -> Option<usize>;
        pub(crate) fn push_many(&self, _slot: usize, _items: &[u32]) -> bool;
        pub(crate) fn len(&self, _cpu: usize, _slot: usize) -> usize;
        pub(crate) fn set_pinned(&self, _cpu: usize, _pinned: bool);
    }
    pub(crate) fn drain_cpu(&self, _cpu: usize, _take: impl FnMut(usize, &[u32])) -> bool {
        match *self {}
    }
}

/// No home CPU: there are no per-CPU stacks to push on.
#[inline(always)]
pub(crate) fn home_cpu() -> u32 {
    u32::MAX
}

/// Nothing to remember without per-CPU stacks.
#[inline(always)]
pub(crate) fn set_home_cpu(_cpu: u32) {}

/// CPU 0: this target cannot say where a thread runs.
#[inline]
pub(crate) fn cpu_id() -> usize {
    0
}

/// Nothing cached to forget.
#[inline]
pub(crate) fn forget_cpu_id() {}

/// Unknown on this target.
pub(crate) fn machine_memory() -> Option<u64> {
    None
}

/// No mapping on this target: never made.
pub enum RealMemory {}

impl RealMemory {
    /// Refused: `errno` 0 says the target has no mapping to offer.
    pub fn map(pages: usize, page_size: usize, _huge: HugePages) -> Result<Self, RealMemoryError> {
        Err(RealMemoryError { errno: 0, bytes: pages.saturating_mul(page_size) })
    }
    never! {
        pub fn page_ptr(&self, _index: usize) -> Option<NonNull<u8>>;
        pub(crate) fn block_span(&self, _index: usize, _order: u32) -> Option<(NonNull<u8>, usize)>;
        pub fn index_of(&self, _addr: *const u8) -> Option<usize>;
        pub(crate) fn zero_pages(&self, _index: usize, _count: usize);
        pub(crate) fn discard_pages(&self, _index: usize, _count: usize) -> usize;
        pub(crate) fn copy_pages(&self, _from: usize, _to: usize, _count: usize);
    }
}
