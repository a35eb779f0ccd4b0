//! The slot table: one 16-byte entry per 4 KiB page of the device, as in
//! Linux's `struct zram_table_entry` (`drivers/block/zram/zram_drv.h`).
//!
//! Owns the entry layout and its lock. Word 0 is the zsmalloc object's raw
//! word (held under the device's `RawKey`, checked by the pool on every
//! use), or the fill word of a `SAME` slot; word 1 holds the flags, whose low
//! `ZRAM_FLAG_SHIFT` bits store the compressed size, with the lock bit
//! among them (Linux replaced a per-entry spinlock by this bit to keep the
//! table small); word 2 is the last access time in seconds. Knows nothing
//! of compression or the pool.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

/// Bits of the flags word below the flags: the compressed size
/// (`PAGE_SHIFT + 1`, room for 4096).
pub const ZRAM_FLAG_SHIFT: u32 = 13;
pub(crate) const SIZE_MASK: u32 = (1 << ZRAM_FLAG_SHIFT) - 1;

/// Slot flags, Linux's `enum zram_pageflags`.
pub mod flags {
    use super::ZRAM_FLAG_SHIFT;
    /// The slot's lock (held while its contents change or are read).
    pub const LOCK: u32 = 1 << ZRAM_FLAG_SHIFT;
    /// The page is one repeated 8-byte word, kept in the handle word.
    pub const SAME: u32 = 1 << (ZRAM_FLAG_SHIFT + 1);
    /// Written back to the backing device.
    pub const WB: u32 = 1 << (ZRAM_FLAG_SHIFT + 2);
    /// Selected for post-processing (writeback or recompression).
    pub const PP_SLOT: u32 = 1 << (ZRAM_FLAG_SHIFT + 3);
    /// Stored uncompressed: it did not compress below the huge size.
    pub const HUGE: u32 = 1 << (ZRAM_FLAG_SHIFT + 4);
    /// Not accessed since the last idle marking.
    pub const IDLE: u32 = 1 << (ZRAM_FLAG_SHIFT + 5);
    /// No secondary algorithm could shrink it.
    pub const INCOMPRESSIBLE: u32 = 1 << (ZRAM_FLAG_SHIFT + 6);
    /// Low bit of the compression priority (which algorithm produced it).
    pub const COMP_PRIORITY_BIT1: u32 = 1 << (ZRAM_FLAG_SHIFT + 7);
    /// High bit of the compression priority.
    pub const COMP_PRIORITY_BIT2: u32 = 1 << (ZRAM_FLAG_SHIFT + 8);
}

const PRIORITY_SHIFT: u32 = ZRAM_FLAG_SHIFT + 7;
const PRIORITY_MASK: u32 = flags::COMP_PRIORITY_BIT1 | flags::COMP_PRIORITY_BIT2;

/// One page's entry.
#[derive(Default)]
#[repr(C)]
pub(crate) struct Slot {
    /// zsmalloc raw word (0: none), the fill word of a `SAME` page, or a
    /// `WB` page's block.
    handle: AtomicU64,
    flags: AtomicU32,
    /// Seconds since the device started, at the last access.
    ac_time: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 16);

/// A held slot lock; the slot's contents may be read and changed through
/// it. Dropping it unlocks.
pub(crate) struct SlotGuard<'a> {
    slot: &'a Slot,
}

impl Slot {
    /// Takes the slot's lock, spinning (then yielding) while another
    /// thread holds it.
    pub(crate) fn lock(&self) -> SlotGuard<'_> {
        let mut spins = 0u32;
        loop {
            if let Some(guard) = self.try_lock() {
                return guard;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// [`try_lock`](Self::try_lock), with the flags word as the lock found
    /// it (lock bit clear): the free notification reads the slot from the
    /// one atomic step that takes it.
    pub(crate) fn try_lock_word(&self) -> Option<(SlotGuard<'_>, u32)> {
        let old = self.flags.fetch_or(flags::LOCK, Acquire);
        (old & flags::LOCK == 0).then(|| (SlotGuard { slot: self }, old))
    }

    /// Takes the lock if it is free (Linux's `slot_trylock`, for the free
    /// notification that must not sleep).
    pub(crate) fn try_lock(&self) -> Option<SlotGuard<'_>> {
        let old = self.flags.fetch_or(flags::LOCK, Acquire);
        // Lazily: a guard built for a failed try would unlock the holder's
        // lock when dropped.
        (old & flags::LOCK == 0).then(|| SlotGuard { slot: self })
    }
}

impl SlotGuard<'_> {
    pub(crate) fn handle(&self) -> u64 {
        self.slot.handle.load(Relaxed)
    }
    pub(crate) fn set_handle(&self, value: u64) {
        self.slot.handle.store(value, Relaxed);
    }
    /// Flags (lock bit excluded).
    pub(crate) fn flags(&self) -> u32 {
        self.slot.flags.load(Relaxed) & !flags::LOCK & !SIZE_MASK
    }
    pub(crate) fn has(&self, flag: u32) -> bool {
        self.flags() & flag != 0
    }
    /// Clears, then sets, flags in one store (the lock stays held).
    pub(crate) fn update_flags(&self, set: u32, clear: u32) {
        let word = self.slot.flags.load(Relaxed);
        let keep = flags::LOCK | SIZE_MASK;
        self.slot.flags.store((word & !(clear & !keep)) | (set & !keep), Relaxed);
    }
    pub(crate) fn size(&self) -> usize {
        (self.slot.flags.load(Relaxed) & SIZE_MASK) as usize
    }
    pub(crate) fn set_size(&self, size: usize) {
        let word = self.slot.flags.load(Relaxed);
        self.slot.flags.store((word & !SIZE_MASK) | (size as u32 & SIZE_MASK), Relaxed);
    }
    /// Which algorithm produced the slot: 0 the primary, 1..=3 a
    /// secondary (the `COMP_PRIORITY` bits).
    pub(crate) fn priority(&self) -> usize {
        ((self.flags() & PRIORITY_MASK) >> PRIORITY_SHIFT) as usize
    }
    pub(crate) fn set_priority(&self, priority: usize) {
        self.update_flags(((priority as u32) << PRIORITY_SHIFT) & PRIORITY_MASK, PRIORITY_MASK);
    }
    pub(crate) fn touch(&self, now: u32) {
        self.slot.ac_time.store(now, Relaxed);
    }
    pub(crate) fn ac_time(&self) -> u32 {
        self.slot.ac_time.load(Relaxed)
    }
    /// Empties the slot for a free and unlocks it: `clear` flags, the size
    /// and the handle cleared, from `word`, the flags word the lock was
    /// taken with ([`Slot::try_lock_word`]); one store of the flags word
    /// both clears and unlocks.
    pub(crate) fn clear_and_unlock(self, word: u32, clear: u32) {
        self.slot.handle.store(0, Relaxed);
        self.slot.flags.store(word & !(clear | flags::LOCK | SIZE_MASK), Release);
        std::mem::forget(self);
    }

    /// Empties the slot for a free: `clear` flags, the size and the handle
    /// cleared, with one store of the flags word.
    pub(crate) fn clear_on_free(&self, clear: u32) {
        let word = self.slot.flags.load(Relaxed);
        self.slot.flags.store(word & !(clear & !flags::LOCK) & !SIZE_MASK, Relaxed);
        self.slot.handle.store(0, Relaxed);
    }

    /// Whether the slot holds data (a handle, a fill word, or a
    /// written-back page).
    pub(crate) fn allocated(&self) -> bool {
        self.has(flags::SAME | flags::WB) || self.handle() != 0
    }
}

impl Drop for SlotGuard<'_> {
    /// Unlocks with a plain store: while the lock is held only its holder
    /// changes the word (a try of another thread is a `fetch_or` of the
    /// bit that is set already, which changes nothing), so the word the
    /// holder last wrote, less the bit, is the word.
    fn drop(&mut self) {
        let word = self.slot.flags.load(Relaxed);
        self.slot.flags.store(word & !flags::LOCK, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_sixteen_bytes_and_its_lock_excludes() {
        assert_eq!(std::mem::size_of::<Slot>(), 16);
        let slot = Slot::default();
        let held = slot.lock();
        assert!(slot.try_lock().is_none());
        assert!(slot.try_lock().is_none(), "a failed try leaves the holder's lock alone");
        held.set_size(4096);
        held.update_flags(flags::HUGE | flags::IDLE, 0);
        assert_eq!(held.size(), 4096);
        held.update_flags(0, flags::IDLE);
        assert_eq!(held.flags(), flags::HUGE);
        drop(held);
        let again = slot.try_lock().unwrap();
        assert_eq!((again.size(), again.flags()), (4096, flags::HUGE));
        again.set_priority(3);
        assert_eq!(again.priority(), 3);
        again.set_priority(1);
        assert_eq!((again.priority(), again.flags() & !PRIORITY_MASK), (1, flags::HUGE));
    }
}
