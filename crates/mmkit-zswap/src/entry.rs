//! Swap entries: Linux's `swp_entry_t`, a swap device's type and a slot
//! offset on it, as owned tokens. zswap's tree is keyed by them (Linux: one
//! xarray per swap device, indexed by offset).
//!
//! # Ownership
//!
//! An entry is made only by allocating a slot
//! ([`Zswap::alloc_swap_slot`](crate::Zswap::alloc_swap_slot),
//! [`Zswap::swap_out`](crate::Zswap::swap_out)) and consumed only by freeing
//! it ([`Zswap::swap_free`](crate::Zswap::swap_free),
//! [`Zswap::swap_free_batch`](crate::Zswap::swap_free_batch)); it is neither
//! `Copy` nor `Clone`, and no public call builds one from numbers. So the
//! holder of an entry is the only one who can store to, load, invalidate or
//! free its slot, and a slot is freed at most once. The swap type names the
//! [`Zswap`](crate::Zswap) instance that made the entry: a 64-bit counter
//! that refuses to wrap, so an entry of another instance (alive or dropped)
//! is refused by every call with
//! [`ZswapError::ForeignEntry`](crate::ZswapError::ForeignEntry). Regions
//! sharing one instance keep their entries inside their handler: no user of
//! a region, nor of another region on the same instance, ever holds them.
//!
//! Owns the token type and its printable id only; which slots exist is the
//! swap file's business.
//!
//! ```compile_fail,E0624
//! use mmkit_zswap::SwpEntry;
//! let forged = SwpEntry::new(1, 0); // error[E0624]: associated function `new` is private
//! ```
//!
//! ```compile_fail,E0382
//! # use mmkit::{Backing, HugePages, MemoryMapBuilder};
//! # use mmkit_zswap::{SwapFile, Zswap, ZswapParams};
//! # use std::sync::Arc;
//! # let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
//! let zswap = Zswap::new(mm, SwapFile::create_temp(16).unwrap(), ZswapParams::default()).unwrap();
//! let entry = zswap.swap_out(&[1; 4096]).unwrap();
//! zswap.swap_free(entry).unwrap();
//! zswap.swap_in(&entry, &mut [0; 4096], mmkit_zswap::KeepEntry::Drop).unwrap(); // error[E0382]: borrow of moved value
//! ```

/// A swap entry: the swap device's type and a slot on it, owned by whoever
/// allocated the slot until it is freed (see the module documentation of
/// the crate's entry type).
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "dropping an entry leaks its swap slot; free it with swap_free"]
pub struct SwpEntry {
    id: EntryId,
}

/// What names a swap entry, without owning it: for errors and logs. No
/// call takes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    swap_type: u64,
    offset: u64,
}

impl SwpEntry {
    /// The entry of slot `offset` on swap device `swap_type` (Linux's
    /// `swp_entry`): only for the slot allocation of this crate.
    pub(crate) fn new(swap_type: u64, offset: u64) -> Self {
        Self { id: EntryId { swap_type, offset } }
    }

    /// The swap device's type (Linux's `swp_type`): one per [`Zswap`](crate::Zswap),
    /// never reused.
    pub fn swap_type(&self) -> u64 {
        self.id.swap_type
    }

    /// The slot on the device (Linux's `swp_offset`).
    pub fn offset(&self) -> u64 {
        self.id.offset
    }

    /// What names the entry, to print or key a map with.
    pub fn id(&self) -> EntryId {
        self.id
    }
}

impl EntryId {
    pub(crate) fn new(swap_type: u64, offset: u64) -> Self {
        Self { swap_type, offset }
    }

    /// The swap device's type.
    pub fn swap_type(&self) -> u64 {
        self.swap_type
    }

    /// The slot on the device.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl core::fmt::Display for EntryId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}:{:#x}", self.swap_type, self.offset)
    }
}

impl core::fmt::Display for SwpEntry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.id.fmt(f)
    }
}
