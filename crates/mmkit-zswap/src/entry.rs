//! Swap entries: Linux's `swp_entry_t`, a swap device's type and a slot
//! offset on it. zswap's tree is keyed by them (Linux: one xarray per swap
//! device, indexed by offset).
//!
//! Owns the type only; which slots exist is the swap file's business.

/// A swap entry: the swap device's type and a slot on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwpEntry {
    swap_type: u32,
    offset: u64,
}

impl SwpEntry {
    /// The entry of slot `offset` on swap device `swap_type` (Linux's
    /// `swp_entry`). Any pair is accepted here and checked on use.
    pub fn new(swap_type: u32, offset: u64) -> Self {
        Self { swap_type, offset }
    }

    /// The swap device's type (Linux's `swp_type`): one per [`Zswap`](crate::Zswap).
    pub fn swap_type(self) -> u32 {
        self.swap_type
    }

    /// The slot on the device (Linux's `swp_offset`).
    pub fn offset(self) -> u64 {
        self.offset
    }
}

impl core::fmt::Display for SwpEntry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}:{:#x}", self.swap_type, self.offset)
    }
}
