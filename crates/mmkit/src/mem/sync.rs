//! The one lock type of the crate, swappable for `loom`'s in model tests.
//!
//! Owns nothing but the choice of primitive: a spin lock (yielding to the
//! scheduler under `std`, pure spinning without it, since a kernel or
//! unikernel embedder disables preemption around it) or, when built with
//! `--cfg loom`, loom's mutex so the model checker can explore every
//! interleaving of the pageset and zone locking protocol.
//!
//! It also owns the one guard against a self-deadlock the crate can see:
//! a lock held across calls on purpose (a zone a pinned CPU holds for a
//! burst, `page_alloc::locked_zone`) is recorded per thread, and a second
//! `lock` of it from the same thread panics with what went wrong instead
//! of spinning forever. Only the wait path looks: taking a free lock costs
//! what it did.
#![deny(unsafe_code)]

#[cfg(all(not(loom), feature = "std"))]
type Inner<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;
#[cfg(all(not(loom), not(feature = "std")))]
type Inner<T> = spin::mutex::SpinMutex<T, spin::relax::Spin>;
#[cfg(loom)]
type Inner<T> = loom::sync::Mutex<T>;

/// Guard of a [`Lock`]; unlocks on drop.
#[cfg(not(loom))]
pub(crate) type LockGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;
/// Guard of a [`Lock`]; unlocks on drop.
#[cfg(loom)]
pub(crate) type LockGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

/// A mutual-exclusion lock with a non-blocking `try_lock`.
pub(crate) struct Lock<T> {
    inner: Inner<T>,
}

impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self { inner: Inner::new(value) }
    }

    /// Waits for the lock.
    ///
    /// # Panics
    /// When this thread holds the lock for a burst (see [`HeldForBurst`]):
    /// waiting would never end.
    #[inline]
    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        #[cfg(not(loom))]
        if let Some(guard) = self.inner.try_lock() {
            return guard;
        }
        #[cfg(all(not(loom), feature = "std"))]
        held::refuse_self_deadlock(self.id());
        #[cfg(not(loom))]
        return self.inner.lock();
        #[cfg(loom)]
        return self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    }

    /// [`lock`](Self::lock) for a caller that holds prepared pages
    /// `[idx, idx + count)` to put under the lock. When this thread holds
    /// the lock for a burst, the pages are parked for the burst's holder,
    /// which releases them when the burst ends
    /// ([`take_parked`](Self::take_parked)), and then it panics as `lock`
    /// does: so a panic here leaves no page neither allocated nor free.
    ///
    /// # Panics
    /// As [`lock`](Self::lock).
    #[inline]
    pub(crate) fn lock_or_park(&self, idx: u32, count: u32) -> LockGuard<'_, T> {
        #[cfg(not(loom))]
        if let Some(guard) = self.inner.try_lock() {
            return guard;
        }
        #[cfg(all(not(loom), feature = "std"))]
        held::park_and_refuse(self.id(), idx, count);
        #[cfg(not(all(not(loom), feature = "std")))]
        let _ = (idx, count);
        #[cfg(not(loom))]
        return self.inner.lock();
        #[cfg(loom)]
        return self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    }

    /// The page runs parked by [`lock_or_park`](Self::lock_or_park) on this
    /// thread for this lock, taken out: for the burst that holds the lock
    /// to release before it unlocks. Empty without `std`.
    pub(crate) fn take_parked(&self) -> alloc::vec::Vec<(u32, u32)> {
        #[cfg(all(not(loom), feature = "std"))]
        return held::take_parked(self.id());
        #[allow(unreachable_code)]
        alloc::vec::Vec::new()
    }

    /// Takes the lock if it is free (one compare-and-swap).
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<LockGuard<'_, T>> {
        #[cfg(not(loom))]
        return self.inner.try_lock();
        #[cfg(loom)]
        return self.inner.try_lock().ok();
    }

    /// What identifies this lock to [`HeldForBurst`]: its address.
    #[cfg(all(not(loom), feature = "std"))]
    fn id(&self) -> usize {
        core::ptr::from_ref(self) as usize
    }

    /// The protected value, by ownership.
    #[cfg(test)]
    pub(crate) fn into_inner(self) -> T {
        #[cfg(not(loom))]
        return self.inner.into_inner();
        #[cfg(loom)]
        return self.inner.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}

/// Pause inside a wait loop: lets loom switch threads, hints the CPU otherwise.
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Records, for as long as it lives, that the current thread holds `lock`
/// across calls (a burst): a `lock` of it from this thread meanwhile
/// panics instead of waiting for itself. Without `std` (no thread-local
/// storage) it records nothing.
pub(crate) struct HeldForBurst {
    #[cfg(all(not(loom), feature = "std"))]
    id: usize,
}

impl HeldForBurst {
    /// Call right after taking `lock`.
    pub(crate) fn new<T>(lock: &Lock<T>) -> Self {
        #[cfg(all(not(loom), feature = "std"))]
        {
            let id = lock.id();
            held::enter(id);
            Self { id }
        }
        #[cfg(not(all(not(loom), feature = "std")))]
        {
            let _ = lock;
            Self {}
        }
    }
}

impl Drop for HeldForBurst {
    fn drop(&mut self) {
        #[cfg(all(not(loom), feature = "std"))]
        held::leave(self.id);
    }
}

/// The locks this thread holds for a burst: a few slots, since a thread
/// holds one zone per pinned handle and rarely several handles at once
/// (past the slots, a burst is not recorded and only loses the check).
#[cfg(all(not(loom), feature = "std"))]
mod held {
    use core::cell::Cell;

    const SLOTS: usize = 4;

    std::thread_local! {
        static HELD: [Cell<usize>; SLOTS] = const { [const { Cell::new(0) }; SLOTS] };
        /// Page runs `(lock, first, count)` a refused call had prepared.
        static PARKED: core::cell::RefCell<Vec<(usize, u32, u32)>> = const { core::cell::RefCell::new(Vec::new()) };
    }

    /// Parks `[idx, idx + count)` for lock `id` if this thread holds it for
    /// a burst, then refuses (panics); returns when it does not hold it.
    #[cold]
    pub(super) fn park_and_refuse(id: usize, idx: u32, count: u32) {
        let mine = HELD.try_with(|held| held.iter().any(|slot| slot.get() == id)).unwrap_or(false);
        if mine {
            let _ = PARKED.try_with(|parked| parked.borrow_mut().push((id, idx, count)));
        }
        refuse_self_deadlock(id);
    }

    /// The runs parked for lock `id`, removed.
    pub(super) fn take_parked(id: usize) -> Vec<(u32, u32)> {
        PARKED
            .try_with(|parked| {
                let mut parked = parked.borrow_mut();
                if parked.is_empty() {
                    return Vec::new();
                }
                let mine = parked.iter().filter(|p| p.0 == id).map(|p| (p.1, p.2)).collect();
                parked.retain(|p| p.0 != id);
                mine
            })
            .unwrap_or_default()
    }

    pub(super) fn enter(id: usize) {
        HELD.with(|held| {
            if let Some(slot) = held.iter().find(|slot| slot.get() == 0) {
                slot.set(id);
            }
        });
    }

    pub(super) fn leave(id: usize) {
        HELD.with(|held| {
            if let Some(slot) = held.iter().find(|slot| slot.get() == id) {
                slot.set(0);
            }
        });
    }

    #[cold]
    pub(super) fn refuse_self_deadlock(id: usize) {
        let mine = HELD.try_with(|held| held.iter().any(|slot| slot.get() == id)).unwrap_or(false);
        assert!(
            !mine,
            "self-deadlock: this thread holds the zone locked for a burst (PinnedCpu::lock_zone or \
             PinnedCpu::burst) and called the allocator on a path that needs that zone's lock; \
             make the call through the LockedZone, or after the burst"
        );
    }
}
