//! The one lock type of the crate, swappable for `loom`'s in model tests.
//!
//! Owns nothing but the choice of primitive: a spin lock (yielding to the
//! scheduler under `std`, pure spinning without it, since a kernel or
//! unikernel embedder disables preemption around it) or, when built with
//! `--cfg loom`, loom's mutex so the model checker can explore every
//! interleaving of the pageset and zone locking protocol.
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
    #[inline]
    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        #[cfg(not(loom))]
        return self.inner.lock();
        #[cfg(loom)]
        return self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    }

    /// Takes the lock if it is free (one compare-and-swap).
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<LockGuard<'_, T>> {
        #[cfg(not(loom))]
        return self.inner.try_lock();
        #[cfg(loom)]
        return self.inner.try_lock().ok();
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
