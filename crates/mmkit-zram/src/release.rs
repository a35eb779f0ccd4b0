//! The release path: the slot-free notification of a swap-like user
//! (Linux's `zram_slot_free_notify`, called for every slot of a range the
//! swap layer frees: `swap_range_free`, a process exit, Android's
//! low-memory killer) and the clearing of a slot it shares with the other
//! frees (`slot_free_extract`).
//!
//! Owns the notification, its range form and the counting of freed
//! slots. A slot is taken with one atomic step (its try-lock) and given
//! back with a plain store; the counters a free changes are summed over
//! the call and applied once, so a range of slots costs the per-CPU
//! counters and the device's notification count one update each instead
//! of one per slot. The object goes to zsmalloc's deferred free (or, for
//! the `_sync` forms that measure the series against, its free) once the
//! slot lock is dropped. The range form walks the table a chunk's run of
//! slots at a time and hands its words to zsmalloc's queue to be checked
//! when drained (`zs_free_deferred_raw_many_drain_checked`): the words
//! come out of slots this call cleared under their locks, so no other
//! path frees them, and the caller touches nothing of zsmalloc but its
//! queue (`release/256MiB` of `mmkit bench zram`). Must not wait: a slot whose lock is held is
//! counted as `miss_free` and left alone, as the kernel's trylock does.

use crate::counters::Counters;
use crate::device::Device;
use crate::slot::{flags, SlotGuard, SIZE_MASK};
use std::sync::atomic::Ordering::Relaxed;

/// Flags a freed slot loses at once: one mask, as the 2026 series merged
/// the separate clears of `slot_free`.
const CLEARED_ON_FREE: u32 = flags::SAME
    | flags::HUGE
    | flags::IDLE
    | flags::INCOMPRESSIBLE
    | flags::PP_SLOT
    | flags::WB
    | flags::COMP_PRIORITY_BIT1
    | flags::COMP_PRIORITY_BIT2;

/// The counter changes of one call's frees, applied together.
#[derive(Default)]
pub(crate) struct FreeTally {
    compr_data_size: i64,
    pages_stored: i64,
    same_pages: i64,
    huge_pages: i64,
    notify_free: u64,
    miss_free: u64,
    invalid_io: u64,
}

impl FreeTally {
    /// Applies the changes: each counter that moved, once.
    pub(crate) fn apply(&self, counters: &Counters) {
        if self.pages_stored != 0 {
            let hot = counters.hot();
            hot.pages_stored.fetch_sub(self.pages_stored, Relaxed);
            if self.compr_data_size != 0 {
                hot.compr_data_size.fetch_sub(self.compr_data_size, Relaxed);
            }
            if self.same_pages != 0 {
                hot.same_pages.fetch_sub(self.same_pages, Relaxed);
            }
            if self.huge_pages != 0 {
                hot.huge_pages.fetch_sub(self.huge_pages, Relaxed);
            }
        }
        for (counter, n) in [
            (&counters.notify_free, self.notify_free),
            (&counters.miss_free, self.miss_free),
            (&counters.invalid_io, self.invalid_io),
        ] {
            if n != 0 {
                counter.fetch_add(n, Relaxed);
            }
        }
    }
}

impl Device {
    /// The free notification of a swap-like user (Linux's
    /// `zram_slot_free_notify`): must not wait, so it only tries the slot
    /// lock (counting `miss_free` when it cannot take it) and hands the
    /// object to zsmalloc's deferred free.
    pub fn slot_free_notify(&self, index: usize) {
        self.notify_one(index, true);
    }

    /// [`slot_free_notify`](Self::slot_free_notify) as Linux had it before
    /// its 2026 series: the object is freed at once (`zs_free`).
    pub fn slot_free_notify_sync(&self, index: usize) {
        self.notify_one(index, false);
    }

    fn notify_one(&self, index: usize, deferred: bool) {
        let mut tally = FreeTally::default();
        match self.slots.get(index) {
            _ if index >= self.slots.len() => tally.invalid_io = 1,
            // A chunk never written holds no page.
            None => {}
            Some(slot) => {
                // The handle came from the slot, so the free can only fail
                // on a corrupted table: counted by the pool's deferred
                // statistics.
                if let Some(handle) = self.release(slot, &mut tally) {
                    let _ = if deferred {
                        self.pool.zs_free_deferred_raw(&self.key, handle)
                    } else {
                        self.pool.zs_free_raw(&self.key, handle)
                    };
                }
            }
        }
        tally.apply(&self.counters);
    }

    /// Takes slot `slot` for the notification, clears it and unlocks it;
    /// returns the object to free. One atomic step takes the slot (its
    /// try-lock, which also reads its flags) and one store gives it back
    /// cleared; a written-back page (rare) goes the general way.
    #[inline]
    fn release(&self, slot: &crate::slot::Slot, tally: &mut FreeTally) -> Option<u64> {
        let Some((guard, word)) = slot.try_lock_word() else {
            tally.miss_free += 1;
            return None;
        };
        tally.notify_free += 1;
        let handle = guard.handle();
        if word & flags::WB != 0 || (word & flags::SAME == 0 && handle == 0) {
            // Written back, or nothing stored.
            return self.slot_free_take(&guard, tally);
        }
        tally.pages_stored += 1;
        let object = if word & flags::SAME != 0 {
            tally.same_pages += 1;
            None
        } else {
            tally.huge_pages += i64::from(word & flags::HUGE != 0);
            tally.compr_data_size += i64::from(word & SIZE_MASK);
            Some(handle)
        };
        guard.clear_and_unlock(word, CLEARED_ON_FREE);
        object
    }

    /// [`slot_free_notify`](Self::slot_free_notify) of every slot in
    /// `first .. first + count`, as the swap layer sends it for a range it
    /// frees; the counters are updated once for the call.
    pub(crate) fn slot_free_notify_range(&self, first: usize, count: usize, deferred: bool) {
        self.notify_range(first, count, deferred);
    }

    fn notify_range(&self, first: usize, count: usize, deferred: bool) {
        let mut tally = FreeTally::default();
        let end = first.saturating_add(count);
        let valid_end = end.min(self.slots.len());
        // Past the device: each index is an invalid request, as one call
        // for it would count.
        tally.invalid_io = end.saturating_sub(first.max(valid_end)) as u64;
        // Objects for the deferred free, handed to the pool a run at a
        // time (one reservation of its queue for the run).
        let mut queued = [0u64; 64];
        let mut n = 0;
        let mut index = first;
        while index < valid_end {
            // One chunk's run of slots at a time (a chunk never written
            // holds no page: skipped whole).
            let run = match self.slots.run(index, valid_end) {
                Ok(run) if !run.is_empty() => run,
                Ok(_) => break,
                Err(next) => {
                    index = next;
                    continue;
                }
            };
            index += run.len();
            for slot in run {
                match self.release(slot, &mut tally) {
                    Some(handle) if deferred => {
                        queued[n] = handle;
                        n += 1;
                        if n == queued.len() {
                            self.pool.zs_free_deferred_raw_many_drain_checked(&self.key, &queued);
                            n = 0;
                        }
                    }
                    Some(handle) => {
                        let _ = self.pool.zs_free_raw(&self.key, handle);
                    }
                    None => {}
                }
            }
        }
        if n > 0 {
            self.pool.zs_free_deferred_raw_many_drain_checked(&self.key, &queued[..n]);
        }
        tally.apply(&self.counters);
    }

    /// Clears a slot under its lock (Linux's `slot_free_extract`: flags,
    /// statistics, size and handle at once) and returns the object to free
    /// once the lock is dropped.
    pub(crate) fn slot_free_extract(&self, slot: &SlotGuard<'_>) -> Option<u64> {
        let mut tally = FreeTally::default();
        let handle = self.slot_free_take(slot, &mut tally);
        tally.apply(&self.counters);
        handle
    }

    /// [`slot_free_extract`](Self::slot_free_extract) with the counter
    /// changes left in `tally`.
    #[inline]
    fn slot_free_take(&self, slot: &SlotGuard<'_>, tally: &mut FreeTally) -> Option<u64> {
        if !slot.allocated() {
            return None;
        }
        let slot_flags = slot.flags();
        let handle = if slot_flags & flags::SAME != 0 {
            tally.same_pages += 1;
            None
        } else if slot_flags & flags::WB != 0 {
            if let Some(backing) = &self.wb.backing {
                backing.free_block(slot.handle());
            }
            self.wb.bd_count.fetch_sub(1, Relaxed);
            None
        } else {
            if slot_flags & flags::HUGE != 0 {
                tally.huge_pages += 1;
            }
            tally.compr_data_size += slot.size() as i64;
            Some(slot.handle()).filter(|&word| word != 0)
        };
        tally.pages_stored += 1;
        slot.clear_on_free(CLEARED_ON_FREE);
        handle
    }
}
