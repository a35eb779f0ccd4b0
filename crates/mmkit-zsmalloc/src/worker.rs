//! The deferred free's drain thread: it sleeps until kicked (or for its
//! idle period), then drains what its pool queued, through the [`Drain`]
//! trait the pool implements, so that the thread knows nothing of pools.
//!
//! Owns the thread, its wake-up protocol and its idle period. Holds its
//! pool weakly: a pool is dropped even while its worker sleeps.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a worker drains: a pool's deferred-free queue.
pub(crate) trait Drain: Send + Sync + 'static {
    /// The name the thread is given.
    fn drain_name(&self) -> &str;
    /// Frees every full batch, and with `seal` every partial one too;
    /// returns how many batches it drained.
    fn drain(&self, seal: bool) -> usize;
    /// Full batches waiting.
    fn pending(&self) -> usize;
}

/// The pool's drain thread.
pub(crate) struct Worker {
    shared: Arc<WorkerShared>,
    thread: Option<JoinHandle<()>>,
}

struct WorkerShared {
    stop: AtomicBool,
    /// Whether the worker is asleep (or about to be): a push that seals a
    /// batch past the wake-up threshold wakes it only then.
    asleep: AtomicBool,
    kicked: Mutex<bool>,
    wake: Condvar,
}

/// How long the worker sleeps with nothing sealed before it seals and
/// drains the partial batches itself.
const IDLE_PERIOD: Duration = Duration::from_millis(100);

impl Worker {
    /// Starts the drain thread of pool `inner` (it holds the pool weakly,
    /// so a pool is dropped even while its worker sleeps).
    pub(crate) fn start<P: Drain>(inner: &Arc<P>) -> Self {
        let shared = Arc::new(WorkerShared {
            stop: AtomicBool::new(false),
            asleep: AtomicBool::new(true),
            kicked: Mutex::new(false),
            wake: Condvar::new(),
        });
        let (pool, me): (Weak<P>, _) = (Arc::downgrade(inner), shared.clone());
        let thread = std::thread::Builder::new()
            .name(format!("zs-free:{}", inner.drain_name()))
            .spawn(move || loop {
                let woken = {
                    let kicked = me.kicked.lock().unwrap_or_else(|p| p.into_inner());
                    let (mut kicked, _) = me
                        .wake
                        .wait_timeout_while(kicked, IDLE_PERIOD, |k| !*k && !me.stop.load(Relaxed))
                        .unwrap_or_else(|p| p.into_inner());
                    std::mem::replace(&mut *kicked, false)
                };
                me.asleep.store(false, SeqCst);
                if me.stop.load(Relaxed) {
                    return;
                }
                let Some(inner) = pool.upgrade() else { return };
                // Until no full batch is left; a period without one also
                // seals and drains the partial batches.
                while inner.drain(!woken) > 0 && !me.stop.load(Relaxed) {}
                me.asleep.store(true, SeqCst);
                // A batch sealed after the last take but before `asleep`
                // was set did not kick: look once more.
                if inner.pending() > 0 {
                    me.asleep.store(false, SeqCst);
                    *me.kicked.lock().unwrap_or_else(|p| p.into_inner()) = true;
                }
            })
            .ok();
        Self { shared, thread }
    }

    /// Wakes the worker if it sleeps.
    pub(crate) fn kick(&self) {
        if self.shared.asleep.swap(false, SeqCst) {
            *self.shared.kicked.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.shared.wake.notify_one();
        }
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(mut self) {
        self.shared.stop.store(true, Relaxed);
        *self.shared.kicked.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
