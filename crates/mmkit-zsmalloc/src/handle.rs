//! Handles: what `zs_malloc` returns and every other call takes.
//!
//! A handle names a slot in its class's handle table, and carries the
//! class index, the slot's generation and the id of the pool that made it:
//! `[pool:12 | generation:16 | class:8 | slot:28]`.
//! The slot holds where the object is (zspage and index) and is rewritten
//! when compaction moves the object, so the handle stays valid. The class
//! index in the handle is Linux's June 2026 change ("encode class_idx in
//! obj"): `zs_free` locks the object's class straight away, with no
//! pool-wide lock. The generation makes a freed handle (or a forged one)
//! fail the lookup instead of reaching another object. The pool id makes a
//! handle of another pool (or of a dropped one) fail before any lookup:
//! Linux's handles are addresses, unique machine-wide, and a word that
//! names a slot index needs the pool beside it to be as unique.
//!
//! Pool ids come from a registry of 4095 ids (1 to 4095) handed out
//! round-robin: two live pools never share one, and a dropped pool's id
//! comes back only after every other id has been handed out since. Id 0 is
//! never handed out, so a forged word with clear top bits (any value below
//! 2^52) names no pool and is refused by every call, `zs_free_deferred`'s
//! cheap check included.
//!
//! Owns the encoding and the pool-id registry only.

/// An object of a [`ZsPool`](crate::ZsPool). Never 0, so `Option<Handle>`
/// and a zero word can mean "none".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(u64);

const SLOT_BITS: u32 = 28;
const CLASS_BITS: u32 = 8;
const GEN_BITS: u32 = 16;
const POOL_BITS: u32 = 12;
const GEN_SHIFT: u32 = SLOT_BITS + CLASS_BITS;
const POOL_SHIFT: u32 = GEN_SHIFT + GEN_BITS;
/// Generations wrap within 16 bits and skip 0.
pub(crate) const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
/// Slots a class may have: indices `0..MAX_SLOTS`.
pub(crate) const MAX_SLOTS: usize = 1 << SLOT_BITS;
/// Pool ids (0 is never handed out, so `MAX_POOLS - 1` pools can be alive
/// at once).
pub(crate) const MAX_POOLS: usize = 1 << POOL_BITS;

const _: () = assert!(POOL_SHIFT + POOL_BITS == 64, "the fields fill the word");

/// The id a pool stamps on its handles (see [`PoolId::register`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PoolId(u16);

impl PoolId {
    /// A fresh id, unique among live pools; `None` when `MAX_POOLS` pools
    /// are alive.
    pub(crate) fn register() -> Option<Self> {
        let mut registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        let id = registry.take()?;
        Some(Self(id))
    }

    /// The id as the handle carries it.
    pub(crate) fn get(&self) -> u16 {
        self.0
    }
}

impl Drop for PoolId {
    fn drop(&mut self) {
        REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).release(self.0);
    }
}

/// Which ids are in use, and where the round-robin search starts.
struct Registry {
    live: [u64; MAX_POOLS / 64],
    next: usize,
}

static REGISTRY: std::sync::Mutex<Registry> = std::sync::Mutex::new(Registry { live: [0; MAX_POOLS / 64], next: 1 });

impl Registry {
    fn take(&mut self) -> Option<u16> {
        for step in 0..MAX_POOLS - 1 {
            // Ids 1 ..= MAX_POOLS - 1, round-robin; 0 stays unused.
            let id = (self.next - 1 + step) % (MAX_POOLS - 1) + 1;
            let (word, bit) = (id / 64, 1u64 << (id % 64));
            if self.live[word] & bit == 0 {
                self.live[word] |= bit;
                self.next = id % (MAX_POOLS - 1) + 1;
                return Some(id as u16);
            }
        }
        None
    }

    fn release(&mut self, id: u16) {
        let id = usize::from(id);
        self.live[id / 64] &= !(1u64 << (id % 64));
    }
}

impl Handle {
    pub(crate) fn new(pool: u16, slot: u32, class: usize, generation: u32) -> Self {
        debug_assert!((slot as usize) < MAX_SLOTS && usize::from(pool) < MAX_POOLS);
        Self(
            u64::from(slot)
                | (class as u64) << SLOT_BITS
                | u64::from(generation & GEN_MASK) << GEN_SHIFT
                | u64::from(pool) << POOL_SHIFT,
        )
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
        ((self.0 >> GEN_SHIFT) as u32) & GEN_MASK
    }

    /// The id of the pool that made the handle.
    pub(crate) fn pool(self) -> u16 {
        (self.0 >> POOL_SHIFT) as u16
    }
}

impl core::fmt::Display for Handle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The next generation of a slot: wraps in 16 bits, never 0.
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
        let h = Handle::new(0xabc, 0xead_beef, 254, 0x3456);
        assert_eq!((h.pool(), h.slot(), h.class(), h.generation()), (0xabc, 0xead_beef, 254, 0x3456));
        assert_eq!(Handle::from_raw(h.to_raw()), Some(h));
        assert_eq!(Handle::from_raw(0), None);
        assert_eq!(next_generation(GEN_MASK), 1);
        assert_ne!(Handle::new(0, 0, 0, 1).to_raw(), 0);
        let top = Handle::new((MAX_POOLS - 1) as u16, (MAX_SLOTS - 1) as u32, 255, GEN_MASK);
        assert_eq!(top.to_raw(), u64::MAX);
    }

    #[test]
    fn live_pools_never_share_an_id_and_ids_come_back_round_robin() {
        let mut r = Registry { live: [0; MAX_POOLS / 64], next: 1 };
        let ids: Vec<u16> = (1..MAX_POOLS).map(|_| r.take().unwrap()).collect();
        assert_eq!(r.take(), None, "every id is live");
        assert_eq!(ids.iter().copied().collect::<std::collections::BTreeSet<_>>().len(), MAX_POOLS - 1);
        assert!(!ids.contains(&0), "id 0 is never handed out");
        r.release(5);
        r.release(3);
        assert_eq!(r.take(), Some(3));
        assert_eq!(r.take(), Some(5));
        let mut r = Registry { live: [0; MAX_POOLS / 64], next: 1 };
        let a = r.take().unwrap();
        r.release(a);
        assert_ne!(r.take(), Some(a), "a released id is not handed out next");
    }
}
