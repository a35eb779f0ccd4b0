//! Model check (loom) of the per-CPU order-0 cache's protocol
//! (`sys`'s rseq module, `page_alloc::cache::cpu`): threads pop and push on the
//! stack of the CPU they run on, refill it from the locked lists and
//! flush it there, migrate between CPUs in the middle of an operation, and
//! another thread drains every CPU's stack through the stop protocol.
//!
//! Loom cannot run a restartable sequence, so the model states what the
//! kernel guarantees and checks the protocol built on it:
//! - a sequence is atomic with respect to every other sequence on its CPU
//!   (it commits with one store, and is restarted from the top if its
//!   thread is preempted, migrated or signalled before that): modelled by
//!   running each sequence under its CPU's mutex;
//! - `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)` for a CPU returns
//!   once every sequence running there has finished or been restarted:
//!   modelled by taking and releasing that CPU's mutex;
//! - a thread may run its next sequence on another CPU: each model thread
//!   names the CPU of each step;
//! - x86-64 loads are acquires and its stores releases (TSO): the
//!   sequence's plain load of `stopped` is modelled as an acquire, the
//!   drainer's restart as a release store. (Found by this model: with
//!   both relaxed, a sequence could see the restart and a stale length.)
//!
//! Every interleaving must end with every index in exactly one place: a
//! stack, the lists, or a thread's hands. The `broken_*` models leave out
//! one step of the protocol and must fail, so the model can fail.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p mmkit --release --test loom_cpu_cache`
#![cfg(loom)]

use loom::sync::atomic::AtomicU32;
use loom::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use loom::sync::{Arc, Mutex};
use loom::thread;

const CPUS: usize = 2;
const SLOTS: usize = 3;
const HOME_ANY: u32 = u32::MAX;

/// One CPU's stack, as `sys::stack` lays it out (`len`, `stopped`, items).
struct Stack {
    len: AtomicU32,
    stopped: AtomicU32,
    items: [AtomicU32; SLOTS],
}

/// The model's system: per-CPU stacks, the CPUs (whose mutexes stand for
/// the kernel's guarantees above), the locked lists, one drainer at a time.
struct System {
    stacks: [Stack; CPUS],
    cpus: [Mutex<()>; CPUS],
    lists: Mutex<Vec<u32>>,
    drain_lock: Mutex<()>,
    /// Leave out the fence (the broken model).
    skip_fence: bool,
    /// Leave out the `stopped` check inside sequences (the broken model).
    skip_stop_check: bool,
}

#[derive(Debug, PartialEq)]
enum Push {
    Done,
    Full,
    Unavailable,
    Foreign,
}

impl System {
    fn new(on_stacks: &[(usize, u32)], on_lists: &[u32]) -> Self {
        let stack = || Stack {
            len: AtomicU32::new(0),
            stopped: AtomicU32::new(0),
            items: [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)],
        };
        let system = Self {
            stacks: [stack(), stack()],
            cpus: [Mutex::new(()), Mutex::new(())],
            lists: Mutex::new(on_lists.to_vec()),
            drain_lock: Mutex::new(()),
            skip_fence: false,
            skip_stop_check: false,
        };
        for &(cpu, item) in on_stacks {
            assert_eq!(system.push(cpu, item, HOME_ANY), Push::Done);
        }
        system
    }

    /// A sequence on `cpu`: `None` when the stack is stopped.
    fn sequence<R>(&self, cpu: usize, f: impl FnOnce(&Stack) -> R) -> Option<R> {
        let _on_cpu = self.cpus[cpu].lock().unwrap();
        let stack = &self.stacks[cpu];
        // The sequence's plain x86-64 load of `stopped` is an acquire: a
        // sequence that sees the drainer's restart sees its emptied stack.
        if !self.skip_stop_check && stack.stopped.load(Acquire) != 0 {
            return None;
        }
        Some(f(stack))
    }

    fn pop(&self, cpu: usize) -> Option<u32> {
        self.sequence(cpu, |s| {
            let len = s.len.load(Relaxed);
            if len == 0 {
                return None;
            }
            let item = s.items[len as usize - 1].load(Relaxed);
            s.len.store(len - 1, Relaxed);
            Some(item)
        })
        .flatten()
    }

    /// `page_alloc::cache::cpu`'s push: only on the thread's home CPU.
    fn push(&self, cpu: usize, item: u32, home: u32) -> Push {
        self.sequence(cpu, |s| {
            if home != HOME_ANY && home != cpu as u32 {
                return Push::Foreign;
            }
            let len = s.len.load(Relaxed);
            if len as usize == SLOTS {
                return Push::Full;
            }
            s.items[len as usize].store(item, Relaxed);
            s.len.store(len + 1, Relaxed);
            Push::Done
        })
        .unwrap_or(Push::Unavailable)
    }

    /// A free: onto the stack, else (full, stopped, foreign) to the lists.
    fn free(&self, cpu: usize, item: u32, home: u32) {
        match self.push(cpu, item, home) {
            Push::Done => {}
            Push::Full => {
                // The flush: the top of the stack to the lists, then retry.
                if let Some(top) = self.pop(cpu) {
                    self.lists.lock().unwrap().push(top);
                }
                if self.push(cpu, item, HOME_ANY) != Push::Done {
                    self.lists.lock().unwrap().push(item);
                }
            }
            Push::Unavailable | Push::Foreign => self.lists.lock().unwrap().push(item),
        }
    }

    /// An allocation: from the stack, else a refill from the lists that
    /// keeps one index and pushes the rest (all or none, as `push_many`).
    fn alloc(&self, cpu: usize) -> Option<u32> {
        if let Some(item) = self.pop(cpu) {
            return Some(item);
        }
        let mut lists = self.lists.lock().unwrap();
        let mine = lists.pop()?;
        let rest: Vec<u32> = lists.drain(..).collect();
        let pushed = self
            .sequence(cpu, |s| {
                let len = s.len.load(Relaxed) as usize;
                if len + rest.len() > SLOTS {
                    return false;
                }
                for (i, &item) in rest.iter().enumerate() {
                    s.items[len + i].store(item, Relaxed);
                }
                s.len.store((len + rest.len()) as u32, Relaxed);
                true
            })
            .unwrap_or(false);
        if !pushed {
            lists.extend(rest);
        }
        Some(mine)
    }

    /// `CpuStacks::drain_cpu`: stop, fence, take, restart.
    fn drain(&self, cpu: usize) {
        let _one_drainer = self.drain_lock.lock().unwrap();
        let stack = &self.stacks[cpu];
        stack.stopped.store(1, SeqCst);
        if !self.skip_fence {
            drop(self.cpus[cpu].lock().unwrap());
        }
        let len = stack.len.load(Relaxed) as usize;
        let taken: Vec<u32> = stack.items[..len].iter().map(|i| i.load(Relaxed)).collect();
        stack.len.store(0, Relaxed);
        stack.stopped.store(0, Release);
        self.lists.lock().unwrap().extend(taken);
    }

    /// Every index on a stack or the lists, sorted.
    fn everything(&self) -> Vec<u32> {
        let mut all = self.lists.lock().unwrap().clone();
        for stack in &self.stacks {
            let len = stack.len.load(Relaxed) as usize;
            all.extend(stack.items[..len].iter().map(|i| i.load(Relaxed)));
        }
        all.sort_unstable();
        all
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// A thread allocates on CPU 0, migrates, and frees on CPU 1 (its push is
/// refused there: foreign); another thread recycles on CPU 1 with refills
/// and flushes; a third drains both CPUs.
fn migrate_recycle_drain(skip_fence: bool, skip_stop_check: bool) {
    model(move || {
        let mut system = System::new(&[(0, 0), (1, 1), (1, 2)], &[3]);
        system.skip_fence = skip_fence;
        system.skip_stop_check = skip_stop_check;
        let system = Arc::new(system);
        let migrating = {
            let system = Arc::clone(&system);
            thread::spawn(move || {
                let item = system.alloc(0);
                // Migrated to CPU 1 before the free; its home is still 0.
                if let Some(item) = item {
                    system.free(1, item, 0);
                }
            })
        };
        let recycling = {
            let system = Arc::clone(&system);
            thread::spawn(move || {
                for _ in 0..2 {
                    if let Some(item) = system.alloc(1) {
                        system.free(1, item, 1);
                    }
                }
            })
        };
        system.drain(1);
        system.drain(0);
        migrating.join().unwrap();
        recycling.join().unwrap();
        assert_eq!(system.everything(), vec![0, 1, 2, 3], "an index was lost or duplicated");
    });
}

#[test]
fn migrate_recycle_and_drain_lose_nothing() {
    migrate_recycle_drain(false, false);
}

/// A drainer that does not fence edits a stack while a sequence that
/// read `stopped` before it was set is still running.
#[test]
#[should_panic(expected = "an index was lost or duplicated")]
fn broken_drain_without_the_fence_loses_an_index() {
    migrate_recycle_drain(true, false);
}

/// Sequences that do not check `stopped` run on a stack the drainer is
/// emptying after the fence.
#[test]
#[should_panic(expected = "an index was lost or duplicated")]
fn broken_sequences_without_the_stop_check_lose_an_index() {
    migrate_recycle_drain(false, true);
}

/// A free whose push meets a full stack flushes and retries, while the
/// other CPU's thread refills from the lists the flush fed.
#[test]
fn flush_and_refill_across_cpus() {
    model(|| {
        let system = Arc::new(System::new(&[(0, 0), (0, 1), (0, 2)], &[]));
        let freeing = {
            let system = Arc::clone(&system);
            thread::spawn(move || system.free(0, 3, 0))
        };
        let got = system.alloc(1);
        freeing.join().unwrap();
        let mut all = system.everything();
        all.extend(got);
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3], "an index was lost or duplicated");
    });
}
