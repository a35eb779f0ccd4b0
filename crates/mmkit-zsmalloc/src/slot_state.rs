//! Who holds each handle slot's object, as one atomic word per slot that a
//! call may read and change without the class lock.
//!
//! Owns the holder states (free, a [`Handle`](crate::Handle), a raw word,
//! queued for a deferred free), the word that packs a state with the low
//! 28 bits of the slot's generation, and the table of those words. The
//! rest of a slot (where its object is, its full generation) stays in the
//! class state, behind the class lock.
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
//! the 28 bits could repeat), finds another word there and is refused.
//! Handing an object between a handle and a raw word needs no lock either.
//!
//! The class lock still orders everything that touches the object's bytes
//! or the slot's other fields: allocation (a free slot to `HANDLE|g` or
//! `RAW|g`, a store, since nothing races for a free slot), frees (a live
//! or queued word to `FREE`, by compare-and-swap, under the lock; the drain
//! of the deferred queue is one of them), reads, writes and compaction. A
//! call that reads an object under the lock after a lock-free call queued
//! it still reads valid bytes: the free that would reuse them waits for
//! the lock.
//!
//! # The table
//!
//! Slots are added under the class lock while other threads read the
//! table without it, so the table never moves a word: it is a fixed array
//! of chunks, chunk `k` holding `64 << k` words, each allocated once
//! (`OnceLock`) when the class first needs a slot in it. A reader finds
//! the chunk published whole or not at all; a slot in no chunk yet names
//! no object. 23 chunks cover the 2^28 slots a class may have.

use crate::handle::{MAX_SLOTS, RAW_GEN_LIMIT};
use std::sync::OnceLock;

#[cfg(loom)]
use loom::sync::atomic::AtomicU32;
#[cfg(not(loom))]
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

/// One slot's state word.
pub(crate) type StateWord = AtomicU32;

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
/// is `generation` (its low 28 bits, all of it in a raw-keyed pool).
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

/// One class's state words, at addresses that never change.
pub(crate) struct SlotStates {
    chunks: [OnceLock<Box<[AtomicU32]>>; NR_CHUNKS],
}

impl SlotStates {
    pub(crate) fn new() -> Self {
        Self { chunks: std::array::from_fn(|_| OnceLock::new()) }
    }

    /// Slot `slot`'s word, if its chunk was made (one lookup, for a call
    /// that loads the word and then swaps it: [`swap_word`]).
    pub(crate) fn get(&self, slot: usize) -> Option<&AtomicU32> {
        if slot >= MAX_SLOTS {
            return None;
        }
        let (chunk, at) = locate(slot);
        self.chunks[chunk].get()?.get(at)
    }

    /// Makes slot `slot`'s word (free) if its chunk is not there yet.
    /// Called under the class lock, before the slot is handed out.
    pub(crate) fn grow_to(&self, slot: usize) {
        if slot < MAX_SLOTS {
            let (chunk, _) = locate(slot);
            self.chunks[chunk]
                .get_or_init(|| (0..1usize << (chunk + FIRST_SHIFT as usize)).map(|_| AtomicU32::new(FREE)).collect());
        }
    }

    /// Slot `slot`'s state word; `FREE` for a slot never handed out.
    pub(crate) fn load(&self, slot: usize) -> u32 {
        self.get(slot).map_or(FREE, |w| w.load(Acquire))
    }

    /// Sets free slot `slot`'s word (allocation, under the class lock: no
    /// call races for a free slot, every lock-free one expects a live
    /// word).
    pub(crate) fn set_free_slot(&self, slot: usize, word: u32) {
        if let Some(w) = self.get(slot) {
            w.store(word, Release);
        }
    }

    /// Moves slot `slot` from state `from` to `to` if it is in `from` now;
    /// whether it was. Of two calls from one word, exactly one wins.
    pub(crate) fn swap_if(&self, slot: usize, from: u32, to: u32) -> bool {
        self.get(slot).is_some_and(|w| swap_word(w, from, to))
    }
}

/// Slot word `word`'s value, as [`SlotStates::load`] gives it.
pub(crate) fn load_word(word: &AtomicU32) -> u32 {
    word.load(Acquire)
}

/// [`SlotStates::swap_if`] on a word found already.
pub(crate) fn swap_word(word: &AtomicU32, from: u32, to: u32) -> bool {
    word.compare_exchange(from, to, AcqRel, Acquire).is_ok()
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
