//! Handles: what `zs_malloc` returns and every other call takes.
//!
//! A handle names a slot in its class's handle table, and carries the class
//! index and the slot's generation: `[generation:24 | class:8 | slot:32]`.
//! The slot holds where the object is (zspage and index) and is rewritten
//! when compaction moves the object, so the handle stays valid. The class
//! index in the handle is Linux's June 2026 change ("encode class_idx in
//! obj"): `zs_free` locks the object's class straight away, with no
//! pool-wide lock. The generation makes a freed handle (or a forged one)
//! fail the lookup instead of reaching another object.
//!
//! Owns the encoding only.

/// An object of a [`ZsPool`](crate::ZsPool). Never 0, so `Option<Handle>`
/// and a zero word can mean "none".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(u64);

const SLOT_BITS: u32 = 32;
const CLASS_BITS: u32 = 8;
const GEN_SHIFT: u32 = SLOT_BITS + CLASS_BITS;
/// Generations wrap within 24 bits and skip 0.
pub(crate) const GEN_MASK: u32 = (1 << (64 - GEN_SHIFT)) - 1;

impl Handle {
    pub(crate) fn new(slot: u32, class: usize, generation: u32) -> Self {
        Self(u64::from(slot) | (class as u64) << SLOT_BITS | u64::from(generation & GEN_MASK) << GEN_SHIFT)
    }

    /// The handle as a word (for a slot table that stores handles, such as
    /// zram's).
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// A handle from a word made by [`to_raw`](Self::to_raw); `None` for 0.
    /// Any other word is accepted here and checked by the pool on use.
    pub fn from_raw(raw: u64) -> Option<Self> {
        (raw != 0).then_some(Self(raw))
    }

    pub(crate) fn slot(self) -> usize {
        (self.0 & ((1 << SLOT_BITS) - 1)) as usize
    }

    pub(crate) fn class(self) -> usize {
        ((self.0 >> SLOT_BITS) & ((1 << CLASS_BITS) - 1)) as usize
    }

    pub(crate) fn generation(self) -> u32 {
        (self.0 >> GEN_SHIFT) as u32
    }
}

impl core::fmt::Display for Handle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The next generation of a slot: wraps in 24 bits, never 0.
pub(crate) fn next_generation(generation: u32) -> u32 {
    let next = generation.wrapping_add(1) & GEN_MASK;
    if next == 0 {
        1
    } else {
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_the_word_is_never_zero() {
        let h = Handle::new(0xdead_beef, 254, 0x12_3456);
        assert_eq!((h.slot(), h.class(), h.generation()), (0xdead_beef, 254, 0x12_3456));
        assert_eq!(Handle::from_raw(h.to_raw()), Some(h));
        assert_eq!(Handle::from_raw(0), None);
        assert_eq!(next_generation(GEN_MASK), 1);
        assert_ne!(Handle::new(0, 0, 1).to_raw(), 0);
    }
}
