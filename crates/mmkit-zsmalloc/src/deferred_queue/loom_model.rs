//! Loom models of the deferred-free queue's protocol, each with the broken
//! variants loom must catch.

use super::*;
use loom::sync::Arc;
use std::sync::atomic::Ordering::Release;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// The drain as the pool runs it: take, wait, read, recycle.
fn drain_full(q: &BatchQueue, out: &mut Vec<u64>) {
    let mut ids = Vec::new();
    q.take_full(&mut ids);
    for &id in &ids {
        q.read(id, out);
        q.recycle(id);
    }
}

/// Two pushers share one shard (batches of three words, so a batch is
/// sealed while the other pusher may still be writing into it) while
/// a drainer takes full batches and recycles them: every word is
/// drained exactly once or handed back for a synchronous free, and a
/// flush after the pushers returned finds every word they queued.
fn every_word_is_drained_exactly_once(broken: Broken) {
    model(move || {
        let q = Arc::new(BatchQueue::broken(1, 3, broken));
        let pushers: Vec<_> = (0..2u64)
            .map(|t| {
                let q = q.clone();
                loom::thread::spawn(move || {
                    let mut fell = Vec::new();
                    for i in 0..2u64 {
                        if let Pushed::Fallback(w) = q.push(0, 1 + t * 2 + i, || 2) {
                            fell.push(w);
                        }
                    }
                    fell
                })
            })
            .collect();
        let drainer = {
            let q = q.clone();
            loom::thread::spawn(move || {
                let mut out = Vec::new();
                drain_full(&q, &mut out);
                out
            })
        };
        let mut seen = drainer.join().unwrap();
        for p in pushers {
            seen.extend(p.join().unwrap());
        }
        q.seal_partial();
        drain_full(&q, &mut seen);
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3, 4], "a word lost, drained twice or read unwritten");
    });
}

/// A run pushed at once (three words, batches of three, a cap of two
/// batches) races a single push and a drainer: every word is drained
/// exactly once or handed back for a synchronous free, never read
/// before it is written (the run can seal a batch in which the push
/// reserved a word it has yet to write).
fn a_run_and_a_push_are_drained_exactly_once(broken: Broken) {
    model(move || {
        let q = Arc::new(BatchQueue::broken(1, 3, broken));
        let runner = {
            let q = q.clone();
            loom::thread::spawn(move || {
                let words = [1, 2, 3];
                let mut sealed = false;
                let queued = q.push_many(0, &words, || 2, &mut sealed);
                words[queued..].to_vec()
            })
        };
        let pusher = {
            let q = q.clone();
            loom::thread::spawn(move || match q.push(0, 4, || 2) {
                Pushed::Fallback(w) => vec![w],
                Pushed::Queued { .. } => Vec::new(),
            })
        };
        let mut seen = Vec::new();
        drain_full(&q, &mut seen);
        seen.extend(runner.join().unwrap());
        seen.extend(pusher.join().unwrap());
        q.seal_partial();
        drain_full(&q, &mut seen);
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3, 4], "a word lost, drained twice or read unwritten");
    });
}

#[test]
fn loom_a_run_and_a_push_are_drained_exactly_once() {
    a_run_and_a_push_are_drained_exactly_once(Broken::Nothing);
}

#[test]
#[should_panic]
fn loom_broken_a_drain_that_does_not_wait_for_a_run_reads_unwritten_words() {
    a_run_and_a_push_are_drained_exactly_once(Broken::ReadBeforeWritten);
}

#[test]
fn loom_every_word_is_drained_exactly_once() {
    every_word_is_drained_exactly_once(Broken::Nothing);
}

#[test]
#[should_panic]
fn loom_broken_a_drain_that_does_not_wait_for_writers_reads_unwritten_words() {
    every_word_is_drained_exactly_once(Broken::ReadBeforeWritten);
}

/// A flush racing a push that seals a batch: the flush drains every
/// word whose push returned before the flush began (the pusher's
/// first, which returns before it raises the flag), and never reads a
/// word before it is written.
fn a_flush_drains_every_word_pushed_before_it(broken: Broken) {
    model(move || {
        let q = Arc::new(BatchQueue::broken(2, 2, broken));
        let first_done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let pusher = {
            let (q, first_done) = (q.clone(), first_done.clone());
            loom::thread::spawn(move || {
                assert!(matches!(q.push(0, 10, || 4), Pushed::Queued { .. }));
                first_done.store(true, Release);
                assert!(matches!(q.push(0, 11, || 4), Pushed::Queued { .. }));
            })
        };
        let mut out = Vec::new();
        let flushed_after_first = first_done.load(Acquire);
        q.seal_partial();
        drain_full(&q, &mut out);
        if flushed_after_first {
            assert!(out.contains(&10), "a word pushed before the flush was missed: {out:?}");
        }
        pusher.join().unwrap();
        q.seal_partial();
        drain_full(&q, &mut out);
        out.sort_unstable();
        assert_eq!(out, vec![10, 11]);
    });
}

#[test]
fn loom_a_flush_drains_every_word_pushed_before_it() {
    a_flush_drains_every_word_pushed_before_it(Broken::Nothing);
}

#[test]
#[should_panic]
fn loom_broken_a_flush_that_ignores_sealers_misses_words() {
    a_flush_drains_every_word_pushed_before_it(Broken::FlushIgnoresSealers);
}
