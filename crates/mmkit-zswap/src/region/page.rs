//! A region page's state: one atomic word a page, so that any thread may
//! load a page, evict one or mark one dirty, with compare-and-swap
//! transitions between the states
//!
//! - empty or stored (not `RESIDENT`): a touch faults;
//! - `LOADING`: one thread claimed the load ([`try_claim_load`]) and is
//!   placing the page; others wait for it;
//! - `RESIDENT`, clean (write-protected, its stored copy current) or
//!   `DIRTY` (writable, or never stored);
//! - `EVICTING`: one thread picked it as a victim ([`try_evict`]) and is
//!   storing and dropping it;
//! - `FAILED`: its last load failed; where the kernel can, the page is
//!   poisoned, and its stored copy is kept for a retry;
//! - `WAITER`, beside `EVICTING`: a raw access faulted on the page while
//!   it was being evicted, and the handler left the fault to the eviction,
//!   which wakes it when it ends ([`defer_to_eviction`]). An eviction
//!   with no such fault wakes nobody: no `UFFDIO_WAKE` a victim.
//!
//! Where a stored copy lives (zswap or the swap file) is the slot's
//! business (`slots`). Above the flags, a count of pins: a pinned page is
//! never picked for eviction, and a page being evicted is not pinned until
//! the eviction is over ([`try_evict`] and [`pin`] exclude each other with
//! one compare-and-swap), so an accessor that holds a pin on a mapped page
//! touches it without a missing fault, whose load could fail where no
//! error can be returned.

use std::sync::atomic::{AtomicU32, Ordering::AcqRel, Ordering::Acquire};

/// The page is mapped (the handler placed it and has not dropped it).
pub(crate) const RESIDENT: u32 = 1 << 0;
/// The handler picked the page as a victim and has not finished with it.
pub(crate) const EVICTING: u32 = 1 << 1;
/// The page's last load failed; where the kernel can, it is poisoned
/// (`UFFDIO_POISON`), and its entry is kept for a retry.
pub(crate) const FAILED: u32 = 1 << 2;
/// One thread is loading the page.
pub(crate) const LOADING: u32 = 1 << 3;
/// The page differs from its stored copy (or has none) and is writable.
pub(crate) const DIRTY: u32 = 1 << 4;
/// Touched since the CLOCK hand last passed.
pub(crate) const REFERENCED: u32 = 1 << 5;
/// A raw fault waits for the eviction of the page to end
/// ([`defer_to_eviction`]); the eviction clears it and wakes the range.
pub(crate) const WAITER: u32 = 1 << 6;
/// One pin: the count lives above the flags.
const PIN: u32 = 1 << 8;

/// Every page's state word, all zero (empty) at first; `None` when the
/// memory for them cannot be had.
pub(crate) fn new_states(pages: usize) -> Option<Box<[AtomicU32]>> {
    let mut states = Vec::new();
    states.try_reserve_exact(pages).ok()?;
    states.extend((0..pages).map(|_| AtomicU32::new(0)));
    Some(states.into_boxed_slice())
}

/// The most pins a page may hold at once: the count has the bits above
/// the flags, and a pin past it is refused instead of wrapping into them.
pub(crate) const MAX_PINS: u32 = u32::MAX / PIN;

/// Why [`pin`] took no pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PinRefused {
    /// `alive` answered false while the page was being evicted.
    Gone,
    /// The page holds [`MAX_PINS`] already.
    TooMany,
}

/// Pins `state`'s page once no eviction of it is in progress; returns the
/// flags seen when the pin was taken. `alive` is asked between waits: when
/// it answers false (the handler is gone and will never finish the
/// eviction) the page is not pinned. A page at [`MAX_PINS`] is refused.
pub(crate) fn pin(state: &AtomicU32, alive: impl Fn() -> bool) -> Result<u32, PinRefused> {
    let mut spins = 0u32;
    let mut seen = state.load(Acquire);
    loop {
        if seen / PIN >= MAX_PINS {
            return Err(PinRefused::TooMany);
        }
        if seen & EVICTING == 0 {
            match state.compare_exchange_weak(seen, seen + PIN, AcqRel, Acquire) {
                Ok(_) => return Ok(seen & (PIN - 1)),
                Err(now) => seen = now,
            }
            continue;
        }
        spins += 1;
        if spins % 1024 == 0 && !alive() {
            return Err(PinRefused::Gone);
        }
        std::thread::yield_now();
        seen = state.load(Acquire);
    }
}

/// Whether the page holds a pin now.
pub(crate) fn is_pinned(state: &AtomicU32) -> bool {
    state.load(Acquire) >= PIN
}

/// Drops one pin taken by [`pin`].
pub(crate) fn unpin(state: &AtomicU32) {
    state.fetch_sub(PIN, AcqRel);
}

/// Marks a mapped, unpinned page as being evicted; false when it is
/// pinned, not mapped, being loaded or already marked (so one scan never
/// picks a page twice).
pub(crate) fn try_evict(state: &AtomicU32) -> bool {
    let seen = state.load(Acquire);
    seen & (RESIDENT | EVICTING | LOADING) == RESIDENT
        && seen < PIN
        && state.compare_exchange(seen, seen | EVICTING, AcqRel, Acquire).is_ok()
}

/// Claims the load of a page that is not mapped and that no other thread
/// is loading or evicting; false otherwise.
pub(crate) fn try_claim_load(state: &AtomicU32) -> bool {
    let mut seen = state.load(Acquire);
    while seen & (RESIDENT | EVICTING | LOADING) == 0 {
        match state.compare_exchange_weak(seen, seen | LOADING, AcqRel, Acquire) {
            Ok(_) => return true,
            Err(now) => seen = now,
        }
    }
    false
}

/// Pins the page unless it is being evicted or holds [`MAX_PINS`] (no
/// wait); the flags seen.
pub(crate) fn try_pin(state: &AtomicU32) -> Option<u32> {
    let mut seen = state.load(Acquire);
    while seen & EVICTING == 0 && seen / PIN < MAX_PINS {
        match state.compare_exchange_weak(seen, seen + PIN, AcqRel, Acquire) {
            Ok(_) => return Some(seen),
            Err(now) => seen = now,
        }
    }
    None
}

/// Claims the reload of a page marked mapped that is not (the program
/// dropped it with `MADV_DONTNEED`, or unmapped it): from `RESIDENT`,
/// with no eviction or load of it under way, to `LOADING`, clean, pins
/// kept. False when the page is not in that state.
pub(crate) fn try_claim_reload(state: &AtomicU32) -> bool {
    let mut seen = state.load(Acquire);
    while seen & (RESIDENT | EVICTING | LOADING | FAILED) == RESIDENT {
        let next = (seen & !(RESIDENT | DIRTY | REFERENCED)) | LOADING;
        match state.compare_exchange_weak(seen, next, AcqRel, Acquire) {
            Ok(_) => return true,
            Err(now) => seen = now,
        }
    }
    false
}

/// Sets `flags`; returns the flags before.
pub(crate) fn set_old(state: &AtomicU32, flags: u32) -> u32 {
    state.fetch_or(flags, AcqRel) & (PIN - 1)
}

/// Sets `flags` (and keeps the pins).
pub(crate) fn set(state: &AtomicU32, flags: u32) {
    state.fetch_or(flags, AcqRel);
}

/// Clears `flags` (and keeps the pins).
pub(crate) fn clear(state: &AtomicU32, flags: u32) {
    state.fetch_and(!flags, AcqRel);
}

/// Ends an eviction of the page: clears `flags`, which include `EVICTING`,
/// and `WAITER`; true when a raw fault was left to this eviction
/// ([`defer_to_eviction`]), which the caller must then wake once the
/// page's state is final.
pub(crate) fn end_eviction(state: &AtomicU32, flags: u32) -> bool {
    state.fetch_and(!(flags | EVICTING | WAITER), AcqRel) & WAITER != 0
}

/// Leaves a raw fault on the page to its eviction: true when the page was
/// still being evicted as `WAITER` went in, so that [`end_eviction`] sees
/// it and wakes the faulting thread; false when no eviction is under way
/// (it ended, or there was none), and the fault is the caller's to resolve.
/// One atomic word, so the two cannot both miss the other.
pub(crate) fn defer_to_eviction(state: &AtomicU32) -> bool {
    let mut seen = state.load(Acquire);
    while seen & EVICTING != 0 {
        match state.compare_exchange_weak(seen, seen | WAITER, AcqRel, Acquire) {
            Ok(_) => return true,
            Err(now) => seen = now,
        }
    }
    false
}

/// The flags now (pins left out).
pub(crate) fn flags(state: &AtomicU32) -> u32 {
    state.load(Acquire) & (PIN - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_and_evictions_exclude_each_other() {
        let s = AtomicU32::new(0);
        assert!(!try_evict(&s), "an empty page is no victim");
        set(&s, RESIDENT);
        assert_eq!(pin(&s, || true), Ok(RESIDENT));
        assert!(!try_evict(&s), "a pinned page is no victim");
        unpin(&s);
        assert!(try_evict(&s));
        assert!(!try_evict(&s), "a page is picked once");
        assert!(!try_claim_load(&s), "nor loaded while it goes");
        assert_eq!(try_pin(&s), None);
        // A pin waits for the eviction; a dead handler ends the wait.
        assert_eq!(pin(&s, || false), Err(PinRefused::Gone));
        clear(&s, RESIDENT | EVICTING);
        assert_eq!(pin(&s, || true), Ok(0));
        assert_eq!(flags(&s), 0);
        // One loader at a time, and a page being loaded is no victim.
        assert!(try_claim_load(&s));
        assert!(!try_claim_load(&s));
        set(&s, RESIDENT);
        assert!(!try_evict(&s));
        clear(&s, LOADING);
        assert!(!try_claim_load(&s), "a mapped page needs no load");
        unpin(&s);
        assert_eq!(s.load(Acquire), RESIDENT);
    }

    #[test]
    fn pins_past_the_count_are_refused_not_wrapped() {
        // On the base the count wrapped into the flags after 2^24 pins,
        // and the page became a victim with live pins.
        let s = AtomicU32::new(RESIDENT | ((MAX_PINS - 1) * PIN));
        assert_eq!(pin(&s, || true), Ok(RESIDENT), "the last pin fits");
        assert_eq!(pin(&s, || true), Err(PinRefused::TooMany));
        assert_eq!(try_pin(&s), None);
        assert_eq!(flags(&s), RESIDENT, "flags untouched");
        assert!(!try_evict(&s), "still pinned");
        unpin(&s);
        assert_eq!(pin(&s, || true), Ok(RESIDENT));
    }

    #[test]
    fn a_dropped_resident_page_is_claimed_for_a_reload_once() {
        let s = AtomicU32::new(RESIDENT | DIRTY | REFERENCED);
        assert_eq!(pin(&s, || true), Ok(RESIDENT | DIRTY | REFERENCED));
        assert!(try_claim_reload(&s), "pinned pages are reloaded too");
        assert!(!try_claim_reload(&s), "once");
        assert_eq!(flags(&s), LOADING);
        assert!(!try_evict(&s));
        unpin(&s);
        let s = AtomicU32::new(RESIDENT);
        assert!(try_evict(&s));
        assert!(!try_claim_reload(&s), "not while it is evicted");
    }

    #[test]
    fn a_fault_left_to_an_eviction_is_woken_by_it() {
        let s = AtomicU32::new(RESIDENT);
        assert!(!defer_to_eviction(&s), "no eviction: the fault is the handler's");
        assert!(try_evict(&s));
        assert!(!end_eviction(&s, 0), "nobody waited: no wake");
        assert_eq!(flags(&s), RESIDENT, "kept");
        assert!(try_evict(&s));
        assert!(defer_to_eviction(&s));
        assert!(defer_to_eviction(&s), "a second fault on the page waits too");
        assert!(end_eviction(&s, RESIDENT | DIRTY | REFERENCED), "the waiter is woken");
        assert_eq!(flags(&s), 0, "dropped, and the waiter mark gone with the eviction");
        assert!(!defer_to_eviction(&s), "over: the fault finds the page missing");
    }

    #[test]
    fn defer_and_end_race_without_a_lost_wake() {
        // Whichever order the two compare-and-swaps take, either the
        // eviction sees the waiter or the waiter sees the eviction over.
        for _ in 0..2000 {
            let s = AtomicU32::new(RESIDENT);
            assert!(try_evict(&s));
            let (deferred, woken) = std::thread::scope(|t| {
                let waiter = t.spawn(|| defer_to_eviction(&s));
                let woken = end_eviction(&s, RESIDENT);
                (waiter.join().unwrap(), woken)
            });
            assert_eq!(deferred, woken, "deferred {deferred}, woken {woken}");
            assert_eq!(flags(&s), 0);
        }
    }
}
