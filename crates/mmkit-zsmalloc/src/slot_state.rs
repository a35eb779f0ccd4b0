//! The class's handle slots: one entry per slot, holding who holds the
//! slot's object (an atomic state word that a call may read and change
//! without the class lock) and where the object is (its zspage, index,
//! length and full generation, which only the class lock's holder reads
//! or writes).
//!
//! Owns the holder states (free, a [`Handle`](crate::Handle), a raw word,
//! queued for a deferred free), the word that packs a state with the low
//! 27 bits of the slot's generation, and the table of entries. Keeping
//! the location beside the state word means a free finds both with one
//! lookup and one cache line (the release path frees objects in an order
//! unrelated to their slots, so each lookup is a likely cache miss).
//!
//! # The protocol
//!
//! Every change of holder away from a live state is one compare-and-swap
//! from the exact word the caller expects (holder and generation) to the
//! next: of two calls that race for an object, exactly one sees its word
//! and wins, the other is refused. So a raw word is checked and taken for
//! a deferred free (`RAW|g` to `QUEUED|g`) at the call, without the class
//! lock, and a word freed, queued or taken back already, or stale (its
//! slot's generation moved on, and a raw-keyed pool retires a slot before
//! the 27 bits could repeat), finds another word there and is refused.
//! Handing an object between a handle and a raw word needs no lock either.
//!
//! The class lock still orders everything that touches the object's bytes
//! or the entry's other fields: allocation (a free slot to `HANDLE|g` or
//! `RAW|g`, a store, since nothing races for a free slot), frees (a live
//! or queued word to `FREE`, by compare-and-swap, under the lock; the drain
//! of the deferred queue is one of them), reads, writes and compaction. A
//! call that reads an object under the lock after a lock-free call queued
//! it still reads valid bytes: the free that would reuse them waits for
//! the lock. The location fields are atomics only so that the table can
//! be shared without `unsafe`; the lock's holder is their only reader and
//! writer, so relaxed loads and stores (plain moves) suffice.
//!
//! # The table
//!
//! Slots are added under the class lock while other threads read the
//! table without it, so the table never moves an entry: it is a fixed
//! array of chunks, chunk `k` holding `64 << k` entries, each allocated
//! once (`OnceLock`) when the class first needs a slot in it. A reader
//! finds the chunk published whole or not at all; a slot in no chunk yet
//! names no object. 23 chunks cover the 2^28 slots a class may have.

use crate::handle::{MAX_SLOTS, RAW_GEN_LIMIT};
use std::sync::OnceLock;

#[cfg(loom)]
use loom::sync::atomic::AtomicU32;
#[cfg(not(loom))]
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// Free slot (or one not handed out yet: a new chunk is zeroed).
pub(crate) const FREE: u32 = 0;
/// The object is owned by a [`Handle`](crate::Handle).
pub(crate) const HANDLE: u32 = 1;
/// The object is owned by a raw word under the pool's raw key.
pub(crate) const RAW: u32 = 2;
/// The object was queued for a deferred free: only the drain (or the
/// caller's synchronous fallback) frees it, and nothing else reaches it.
pub(crate) const QUEUED: u32 = 3;
const HOLDER_BITS: u32 = 2;

/// The state word of a slot whose holder is `holder` and whose generation
/// is `generation` (its low 27 bits, all of it in a raw-keyed pool).
pub(crate) fn state(holder: u32, generation: u64) -> u32 {
    ((generation & (RAW_GEN_LIMIT - 1)) as u32) << HOLDER_BITS | holder
}

/// The holder of state word `word`.
pub(crate) fn holder(word: u32) -> u32 {
    word & ((1 << HOLDER_BITS) - 1)
}

/// Words in chunk 0; chunk `k` has `FIRST << k`.
const FIRST_SHIFT: u32 = 6;
/// Chunks enough for `MAX_SLOTS` slots.
const NR_CHUNKS: usize = locate(MAX_SLOTS - 1).0 + 1;
const _: () = assert!(NR_CHUNKS == 23);

/// Chunk and index in it of slot `slot`.
const fn locate(slot: usize) -> (usize, usize) {
    let v = slot + (1 << FIRST_SHIFT);
    let top = (usize::BITS - 1 - v.leading_zeros()) as usize;
    (top - FIRST_SHIFT as usize, v - (1 << top))
}

/// One slot: its state word and, behind the class lock, its object's
/// place and its full generation.
pub(crate) struct SlotEntry {
    /// Holder and generation's low bits ([`state`]); changed lock-free by
    /// compare-and-swap.
    state: AtomicU32,
    /// The object's zspage (class lock).
    zspage: std::sync::atomic::AtomicU32,
    /// The object's index in its zspage (class lock).
    obj: std::sync::atomic::AtomicU32,
    /// Bytes the caller asked for (class lock).
    len: std::sync::atomic::AtomicU32,
    /// Objects the slot held before this one (class lock): 64 bits, and
    /// the slot is retired before it reaches the pool's limit.
    generation: std::sync::atomic::AtomicU64,
}

impl SlotEntry {
    fn new() -> Self {
        Self {
            state: AtomicU32::new(FREE),
            zspage: std::sync::atomic::AtomicU32::new(0),
            obj: std::sync::atomic::AtomicU32::new(0),
            len: std::sync::atomic::AtomicU32::new(0),
            // Generations start at 1: a raw word is never 0.
            generation: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// The state word (a lock-free call's view).
    #[inline]
    pub(crate) fn state(&self) -> u32 {
        self.state.load(Acquire)
    }

    /// Moves the state word from `from` to `to` if it is `from` now;
    /// whether it was. Of two calls from one word, exactly one wins.
    #[inline]
    pub(crate) fn swap(&self, from: u32, to: u32) -> bool {
        self.state.compare_exchange(from, to, AcqRel, Acquire).is_ok()
    }

    /// Hands the free slot to a new object of `zspage`, index `obj`,
    /// `len` bytes, held as `holder` (allocation, under the class lock: no
    /// call races for a free slot, every lock-free one expects a live
    /// word). Returns the object's generation.
    #[inline]
    pub(crate) fn fill(&self, zspage: u32, obj: u32, len: u32, holder: u32) -> u64 {
        self.zspage.store(zspage, Relaxed);
        self.obj.store(obj, Relaxed);
        self.len.store(len, Relaxed);
        let generation = self.generation.load(Relaxed);
        self.state.store(state(holder, generation), Release);
        generation
    }

    /// Where the object is: zspage and index (class lock).
    #[inline]
    pub(crate) fn place(&self) -> (usize, u16) {
        (self.zspage.load(Relaxed) as usize, self.obj.load(Relaxed) as u16)
    }

    /// The object's length (class lock).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Relaxed) as usize
    }

    /// The full generation (class lock).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// Points the entry at its object's new place (compaction).
    pub(crate) fn relocate(&self, zspage: usize, obj: u16) {
        self.zspage.store(zspage as u32, Relaxed);
        self.obj.store(u32::from(obj), Relaxed);
    }

    /// Bumps the generation of a slot just freed (its state word `FREE`)
    /// and returns the new one.
    #[inline]
    pub(crate) fn next_generation(&self) -> u64 {
        let next = self.generation.load(Relaxed) + 1;
        self.generation.store(next, Relaxed);
        next
    }

    /// Test hook: the generation of a free slot set to `generation`.
    #[cfg(test)]
    pub(crate) fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Relaxed);
    }
}

/// One class's slots, at addresses that never change.
pub(crate) struct SlotStates {
    chunks: [OnceLock<Box<[SlotEntry]>>; NR_CHUNKS],
}

impl SlotStates {
    pub(crate) fn new() -> Self {
        Self { chunks: std::array::from_fn(|_| OnceLock::new()) }
    }

    /// Slot `slot`'s entry, if its chunk was made.
    #[inline]
    pub(crate) fn get(&self, slot: usize) -> Option<&SlotEntry> {
        if slot >= MAX_SLOTS {
            return None;
        }
        let (chunk, at) = locate(slot);
        self.chunks[chunk].get()?.get(at)
    }

    /// Makes slot `slot`'s entry (free) if its chunk is not there yet, and
    /// returns it. Called under the class lock, before the slot is handed
    /// out.
    pub(crate) fn grow_to(&self, slot: usize) -> Option<&SlotEntry> {
        if slot >= MAX_SLOTS {
            return None;
        }
        let (chunk, at) = locate(slot);
        self.chunks[chunk]
            .get_or_init(|| (0..1usize << (chunk + FIRST_SHIFT as usize)).map(|_| SlotEntry::new()).collect())
            .get(at)
    }

    /// Slot `slot`'s state word; `FREE` for a slot never handed out.
    #[cfg(any(test, loom))]
    pub(crate) fn load(&self, slot: usize) -> u32 {
        self.get(slot).map_or(FREE, SlotEntry::state)
    }

    /// Moves slot `slot` from state `from` to `to` if it is in `from` now;
    /// whether it was. Of two calls from one word, exactly one wins.
    pub(crate) fn swap_if(&self, slot: usize, from: u32, to: u32) -> bool {
        self.get(slot).is_some_and(|e| e.swap(from, to))
    }

    /// Test and model hook: sets free slot `slot`'s word.
    #[cfg(any(test, loom))]
    pub(crate) fn set_free_slot(&self, slot: usize, word: u32) {
        if let Some(e) = self.get(slot) {
            e.state.store(word, Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_slot_once() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        let (last, at) = locate(MAX_SLOTS - 1);
        assert_eq!(last, NR_CHUNKS - 1);
        assert!(at < 1 << (last + FIRST_SHIFT as usize));
    }

    #[test]
    fn a_word_is_taken_once_and_a_stale_one_never() {
        let states = SlotStates::new();
        assert_eq!(states.load(70), FREE, "no chunk yet: free");
        assert!(!states.swap_if(70, state(RAW, 1), state(QUEUED, 1)), "no chunk yet: refused");
        states.grow_to(70);
        states.set_free_slot(70, state(RAW, 1));
        assert!(states.swap_if(70, state(RAW, 1), state(QUEUED, 1)));
        assert!(!states.swap_if(70, state(RAW, 1), state(QUEUED, 1)), "queued already");
        assert!(states.swap_if(70, state(QUEUED, 1), state(FREE, 2)));
        states.set_free_slot(70, state(RAW, 2));
        assert!(!states.swap_if(70, state(RAW, 1), state(QUEUED, 1)), "stale");
        assert_eq!(holder(states.load(70)), RAW);
        assert!(!states.swap_if(MAX_SLOTS, FREE, FREE));
    }
}

#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::sync::{Arc, Mutex};

    /// Two deferred frees of one raw word race with each other, and with
    /// the drain freeing and reallocating the slot under the class lock:
    /// exactly one of them queues the object, the other is refused at the
    /// call, and a word of the old generation never takes the new object.
    #[test]
    fn one_of_two_deferred_frees_of_a_word_wins() {
        loom::model(|| {
            let states = Arc::new(SlotStates::new());
            states.grow_to(0);
            states.set_free_slot(0, state(RAW, 1));
            let class_lock = Arc::new(Mutex::new(()));
            let callers: Vec<_> = (0..2)
                .map(|_| {
                    let states = states.clone();
                    loom::thread::spawn(move || states.swap_if(0, state(RAW, 1), state(QUEUED, 1)))
                })
                .collect();
            let drain = {
                let (states, class_lock) = (states.clone(), class_lock.clone());
                loom::thread::spawn(move || {
                    let _locked = class_lock.lock().unwrap();
                    // The drain frees a queued object, and the slot is
                    // handed out again at the next generation.
                    if states.swap_if(0, state(QUEUED, 1), state(FREE, 2)) {
                        states.set_free_slot(0, state(RAW, 2));
                        true
                    } else {
                        false
                    }
                })
            };
            let won = callers.into_iter().map(|c| c.join().unwrap()).filter(|&w| w).count();
            let drained = drain.join().unwrap();
            assert_eq!(won, 1, "exactly one deferred free of the word is accepted");
            let now = states.load(0);
            assert_eq!(now, if drained { state(RAW, 2) } else { state(QUEUED, 1) });
        });
    }
}
