//! Handles: what `zs_malloc` returns and every other call takes.
//!
//! # Ownership
//!
//! A [`Handle`] is an owned token, as a `Box` is: it is neither `Copy` nor
//! `Clone`, reads and writes borrow it, and `zs_free`, `zs_free_deferred`
//! and `zs_replace` consume it. Safe code therefore cannot free an object
//! twice, nor use it after freeing it: both are compile errors (the
//! `compile_fail` examples on [`Handle`]). What the type cannot rule out
//! the pool checks on every call, with 64-bit identities that are never
//! handed out twice:
//!
//! - **Pool ids** come from one process-wide 64-bit counter that refuses to
//!   wrap (as `std::thread::ThreadId`): a pool made after 2^64 - 1 others
//!   is refused with [`ZsError::TooManyPools`](crate::ZsError::TooManyPools)
//!   instead of reusing an id. A handle of another pool, or of a dropped
//!   one, names an id no live pool of this process has ever had since, so
//!   it is refused before any lookup.
//! - **Generations** are 64-bit, one counter per handle slot of a class,
//!   bumped on every free. A slot whose counter would reach the pool's
//!   limit is retired (never handed out again) instead of wrapping, so a
//!   `(class, slot, generation)` triple names at most one object in a
//!   pool's life.
//!
//! A handle carries its pool id, its class index (Linux's June 2026 change
//! "encode class_idx in obj": `zs_free` locks the object's class straight
//! away, with no pool-wide lock), its slot and its generation. The slot
//! holds where the object is (zspage and index) and is rewritten when
//! compaction moves the object, so the handle stays valid.
//!
//! # Raw words
//!
//! A slot table that keeps one word per object (zram's) cannot hold a
//! 24-byte handle, and the crate forbids `unsafe`, so Linux's unchecked
//! `unsigned long` handle and the `into_raw` / `unsafe from_raw` pair of
//! `Box` are not available. Instead a pool made with
//! [`ZsPool::with_raw_key`](crate::ZsPool::with_raw_key) hands its creator
//! a [`RawKey`], and an object can be held as a raw word under that key
//! (`zs_handle_into_raw`, `zs_malloc_copy_raw`, …) instead of as a
//! `Handle`. The conversion back, `zs_handle_from_raw`, is safe because it
//! is checked, in three ways:
//!
//! 1. the key names the pool: another pool's key is refused;
//! 2. each object records whether it is held by a `Handle` or by a raw
//!    word (or queued for a deferred free), and a raw call accepts only
//!    raw-held objects, a `Handle` call only handle-held ones — so a word
//!    can never reach an object some `Handle` owns, and a word turned back
//!    into a `Handle` (or freed, or queued for a deferred free) is refused
//!    the second time. The record is the slot's atomic state word, with
//!    the generation's low bits beside the holder, and every change of
//!    holder is one compare-and-swap of it: of two calls with one word,
//!    even two at once on two threads, exactly one wins;
//! 3. a raw word carries its generation's low 27 bits
//!    (`[generation:27 | class:9 | slot:28]`), and a pool with a raw key
//!    retires a slot before its generation needs a 28th bit: a stale word
//!    never matches a later object of its slot, however many cycles later.
//!
//! What the key holder can still do is mix up its own words (use the word
//! of one of its objects for another of its objects), as a caller can mix
//! up indices into its own `Vec`: every raw-held object belongs to the key
//! holder, so no word reaches an object someone else owns. The cost is a
//! slot retired after 2^27 frees of it: a few bytes of metadata lost per
//! 2^27 allocations, and no slot retirement at all before that.
//!
//! The class field has 9 bits because Linux's size-class arithmetic gives
//! 257 classes on 16 and 64 KiB pages (`(PAGE_SIZE - 32)` in steps of
//! `PAGE_SIZE >> 8`, plus one), and at most 257 on any page size: with 8
//! bits the top class (every huge object) would name class 0's slots. The
//! bit comes from the generation, not the slot: a slot retires after 2^27
//! of its objects instead of 2^28 (bytes of metadata), where a slot bit
//! would halve the objects a class can hold. A pool whose table would
//! not fit is refused at creation ([`ZsError::UnsupportedPageSize`](crate::ZsError::UnsupportedPageSize)).
//!
//! Owns the handle type, its raw encoding and the pool-id counter.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Slot bits in a raw word (and the slots a class may have).
const SLOT_BITS: u32 = 28;
/// Class bits in a raw word: Linux's 257 classes of 16 and 64 KiB pages
/// need a ninth.
const CLASS_BITS: u32 = 9;
/// Generation bits in a raw word.
const RAW_GEN_BITS: u32 = 27;
const CLASS_SHIFT: u32 = SLOT_BITS;
const GEN_SHIFT: u32 = SLOT_BITS + CLASS_BITS;
const _: () = assert!(GEN_SHIFT + RAW_GEN_BITS == 64, "the fields fill the word");

/// Class indices a handle or a raw word can name: `0..MAX_CLASSES`.
pub(crate) const MAX_CLASSES: usize = 1 << CLASS_BITS;
/// Slots a class may have: indices `0..MAX_SLOTS`.
pub(crate) const MAX_SLOTS: usize = 1 << SLOT_BITS;
/// The generation at which a slot of a pool with a raw key is retired: its
/// raw words could not tell it from generation 0.
pub(crate) const RAW_GEN_LIMIT: u64 = 1 << RAW_GEN_BITS;

/// An object of a [`ZsPool`](crate::ZsPool), owned: made by `zs_malloc`,
/// borrowed by reads and writes, consumed by `zs_free`,
/// `zs_free_deferred` and `zs_replace`. It names its pool, class, slot and
/// 64-bit generation; see the module documentation of the crate's handle
/// type for why none of them is ever handed out twice.
///
/// A handle cannot be freed twice:
///
/// ```compile_fail,E0382
/// # use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// # use mmkit_zsmalloc::ZsPool;
/// # use std::sync::Arc;
/// # let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
/// let pool = ZsPool::zs_create_pool("p", mm).unwrap();
/// let h = pool.zs_malloc(100, Gfp::NOIO, 0).unwrap();
/// pool.zs_free(h).unwrap();
/// pool.zs_free(h).unwrap(); // error[E0382]: use of moved value: `h`
/// ```
///
/// nor used after it was freed:
///
/// ```compile_fail,E0382
/// # use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// # use mmkit_zsmalloc::ZsPool;
/// # use std::sync::Arc;
/// # let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
/// let pool = ZsPool::zs_create_pool("p", mm).unwrap();
/// let h = pool.zs_malloc(100, Gfp::NOIO, 0).unwrap();
/// pool.zs_free_deferred(h).unwrap();
/// pool.zs_obj_read(&h, &mut [0; 4096]).unwrap(); // error[E0382]: borrow of moved value: `h`
/// ```
///
/// nor queued for a deferred free twice:
///
/// ```compile_fail,E0382
/// # use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// # use mmkit_zsmalloc::ZsPool;
/// # use std::sync::Arc;
/// # let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
/// let pool = ZsPool::zs_create_pool("p", mm).unwrap();
/// let h = pool.zs_malloc(100, Gfp::NOIO, 0).unwrap();
/// pool.zs_free_deferred(h).unwrap();
/// pool.zs_free_deferred(h).unwrap(); // error[E0382]: use of moved value: `h`
/// ```
///
/// nor copied:
///
/// ```compile_fail,E0599
/// # use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// # use mmkit_zsmalloc::ZsPool;
/// # use std::sync::Arc;
/// # let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
/// let pool = ZsPool::zs_create_pool("p", mm).unwrap();
/// let h = pool.zs_malloc(100, Gfp::NOIO, 0).unwrap();
/// let twin = h.clone(); // error[E0599]: no method named `clone`
/// ```
///
/// Dropping a handle without freeing it leaks the object until the pool is
/// dropped (as `Box::leak`); it never frees it behind the owner's back.
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "dropping a handle leaks its object until the pool goes; free it with zs_free"]
pub struct Handle {
    id: HandleId,
}

/// What names an object, without owning it: for error messages, logs and
/// maps of a caller's handles. No call of the pool takes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandleId {
    pool: u64,
    generation: u64,
    class: u16,
    slot: u32,
}

/// The right to hold a pool's objects as raw words (one word each, for a
/// slot table such as zram's); see [`ZsPool::with_raw_key`](crate::ZsPool::with_raw_key).
/// Not `Clone`: whoever holds it owns every object of the pool held as a
/// raw word.
#[derive(Debug)]
pub struct RawKey {
    pub(crate) pool: u64,
}

/// Pool ids handed out so far; 0 is never one.
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// A pool id no pool of this process has had; `None` once 2^64 - 1 ids
/// were handed out (refused rather than wrapped, as `ThreadId::new`).
pub(crate) fn new_pool_id() -> Option<u64> {
    NEXT_POOL_ID.fetch_update(Relaxed, Relaxed, |id| id.checked_add(1)).ok()
}

impl Handle {
    pub(crate) fn new(pool: u64, slot: u32, class: usize, generation: u64) -> Self {
        debug_assert!((slot as usize) < MAX_SLOTS && class < MAX_CLASSES);
        Self { id: HandleId { pool, generation, class: class as u16, slot } }
    }

    /// What names the object (its pool, class, slot and generation), to
    /// print or to key a map with; it gives no access to the object.
    pub fn id(&self) -> HandleId {
        self.id
    }

    pub(crate) fn slot(&self) -> usize {
        self.id.slot as usize
    }

    pub(crate) fn class(&self) -> usize {
        usize::from(self.id.class)
    }

    pub(crate) fn generation(&self) -> u64 {
        self.id.generation
    }

    /// The id of the pool that made the handle.
    pub(crate) fn pool(&self) -> u64 {
        self.id.pool
    }

    /// The handle as the deferred-free queue keeps it, one word
    /// (`[generation's low 27 bits | class:9 | slot:28]`): the queue took
    /// the handle by value, so no other call can reach the object before
    /// the drain; the generation bits are a check on that, not its proof.
    pub(crate) fn queued_word(&self) -> u64 {
        self.id.slot as u64
            | u64::from(self.id.class) << CLASS_SHIFT
            | (self.id.generation & (RAW_GEN_LIMIT - 1)) << GEN_SHIFT
    }
}

impl HandleId {
    /// The id of the pool that made the object.
    pub fn pool(&self) -> u64 {
        self.pool
    }

    /// The object's generation: how many objects its slot held before.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl core::fmt::Display for HandleId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "pool {} class {} slot {} gen {}", self.pool, self.class, self.slot, self.generation)
    }
}

impl core::fmt::Display for Handle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.id.fmt(f)
    }
}

/// A raw word: `[generation:27 | class:9 | slot:28]`, never 0 (generations
/// start at 1 and a raw-keyed pool retires a slot before 2^27).
pub(crate) fn raw_word(slot: usize, class: usize, generation: u64) -> u64 {
    debug_assert!(generation != 0 && generation < RAW_GEN_LIMIT);
    slot as u64 | (class as u64) << CLASS_SHIFT | generation << GEN_SHIFT
}

/// The fields of a raw word: slot, class, generation's low bits.
pub(crate) fn raw_fields(word: u64) -> (usize, usize, u64) {
    (
        (word & ((1 << SLOT_BITS) - 1)) as usize,
        ((word >> CLASS_SHIFT) & ((1 << CLASS_BITS) - 1)) as usize,
        word >> GEN_SHIFT,
    )
}

/// What a raw word of a pool names, for [`ZsError::InvalidHandle`](crate::ZsError::InvalidHandle).
pub(crate) fn raw_id(pool: u64, word: u64) -> HandleId {
    let (slot, class, generation) = raw_fields(word);
    HandleId { pool, generation, class: class as u16, slot: slot as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_fields_round_trip_and_the_word_is_never_zero() {
        let w = raw_word(0xead_beef, 256, 0x345_6789);
        assert_eq!(raw_fields(w), (0xead_beef, 256, 0x345_6789));
        assert_ne!(raw_fields(w).1, 0, "class 256 is not class 0");
        assert_ne!(raw_word(0, 0, 1), 0);
        assert_eq!(raw_word(MAX_SLOTS - 1, MAX_CLASSES - 1, RAW_GEN_LIMIT - 1), u64::MAX);
        let h = Handle::new(7, 3, 256, 5);
        assert_eq!(h.class(), 256);
        assert_eq!(raw_fields(h.queued_word()), (3, 256, 5));
        let h = Handle::new(7, 3, 2, u64::MAX - 1);
        assert_eq!((h.pool(), h.slot(), h.class(), h.generation()), (7, 3, 2, u64::MAX - 1));
    }

    #[test]
    fn pool_ids_are_never_handed_out_twice() {
        let a = new_pool_id().unwrap();
        let b = new_pool_id().unwrap();
        assert!(b > a && a != 0);
    }
}
