//! Unit tests of the deferred-free queue, without the pool.

use super::*;
use std::sync::atomic::Ordering::Release;

/// Drains everything, as the pool's flush does.
fn drain(q: &BatchQueue) -> Vec<u64> {
    q.seal_partial();
    let (mut ids, mut words) = (Vec::new(), Vec::new());
    q.take_full(&mut ids);
    for &id in &ids {
        q.read(id, &mut words);
        q.recycle(id);
    }
    words
}

#[test]
fn table_ids_map_to_distinct_places() {
    assert_eq!(BatchTable::locate(0), (0, 0));
    assert_eq!(BatchTable::locate(1), (1, 0));
    assert_eq!(BatchTable::locate(2), (1, 1));
    assert_eq!(BatchTable::locate(3), (2, 0));
    assert_eq!(BatchTable::locate(NONE - 1), (31, (1 << 31) - 1));
}

#[test]
fn words_come_back_in_push_order_and_batches_are_reused() {
    let q = BatchQueue::new(1, 4);
    for w in 0..10 {
        assert!(matches!(q.push(0, w, || 100), Pushed::Queued { .. }));
    }
    assert_eq!((q.batches_made(), q.pending()), (3, 2), "two full batches, one partial");
    assert_eq!(drain(&q), (0..10).collect::<Vec<_>>());
    for w in 10..22 {
        assert!(matches!(q.push(0, w, || 100), Pushed::Queued { .. }));
    }
    assert_eq!(q.batches_made(), 3, "the drained batches are used again");
    assert_eq!(drain(&q), (10..22).collect::<Vec<_>>());
}

#[test]
fn the_cap_is_respected_and_only_past_it_a_push_falls_back() {
    let q = BatchQueue::new(2, 4);
    let mut fell = Vec::new();
    for w in 0..20 {
        if let Pushed::Fallback(w) = q.push(w as usize % 2, w, || 3) {
            fell.push(w);
        }
    }
    // Three batches of four words: twelve queued, the rest refused.
    assert_eq!(q.batches_made(), 3);
    assert_eq!(fell.len(), 8);
    assert_eq!(q.counts(), (12, 8));
    let mut all = drain(&q);
    all.extend(&fell);
    all.sort_unstable();
    assert_eq!(all, (0..20).collect::<Vec<_>>());
    // Drained, the batches take words again within the same cap.
    assert!(matches!(q.push(0, 99, || 3), Pushed::Queued { .. }));
    assert_eq!(drain(&q), vec![99]);
}

#[test]
fn a_run_pushed_at_once_spans_batches_in_order_and_stops_at_the_cap() {
    let q = BatchQueue::new(1, 4);
    let mut sealed = false;
    assert_eq!(q.push_many(0, &[1, 2, 3], || 100, &mut sealed), 3);
    assert!(!sealed);
    assert_eq!(q.push_many(0, &[4, 5, 6, 7, 8, 9, 10], || 100, &mut sealed), 7);
    assert!(sealed, "the run filled the first batch and a second");
    assert_eq!((q.batches_made(), q.pending()), (3, 2));
    assert_eq!(drain(&q), (1..=10).collect::<Vec<_>>());
    // A cap of two batches: the run stops where they are full.
    let q = BatchQueue::new(2, 4);
    assert_eq!(q.push_many(1, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], || 2, &mut sealed), 8);
    assert_eq!(q.counts(), (8, 2));
    assert_eq!(drain(&q), (1..=8).collect::<Vec<_>>());
    // Drained, the batches take a run again; one push then a run that
    // shares the partial batch.
    assert!(matches!(q.push(1, 11, || 2), Pushed::Queued { .. }));
    assert_eq!(q.push_many(1, &[12, 13, 14, 15, 16], || 2, &mut sealed), 5);
    assert_eq!(drain(&q), (11..=16).collect::<Vec<_>>());
}

#[test]
fn a_cap_that_grows_lets_the_queue_grow() {
    let q = BatchQueue::new(1, 2);
    let mut cap = 1;
    for w in 0..8 {
        let pushed = q.push(0, w, || cap);
        if w < 2 {
            assert!(matches!(pushed, Pushed::Queued { .. }));
        } else if w == 2 {
            assert_eq!(pushed, Pushed::Fallback(2));
            cap = 4;
        }
    }
    assert_eq!(q.batches_made(), 4);
}

/// Threads push while a drainer drains: no word is lost or drained
/// twice, nothing falls back under a cap that holds them all, and the
/// queue never makes more batches than its cap.
#[test]
fn threads_lose_no_word_and_drain_none_twice() {
    let q = BatchQueue::new(2, 16);
    let per_thread = 20_000u64;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let drained = std::thread::scope(|s| {
        let drainer = s.spawn(|| {
            let (mut ids, mut words) = (Vec::new(), Vec::new());
            while !stop.load(Acquire) {
                q.take_full(&mut ids);
                for &id in &ids {
                    q.read(id, &mut words);
                    q.recycle(id);
                }
                std::thread::yield_now();
            }
            words
        });
        let pushers: Vec<_> = (0..4u64)
            .map(|t| {
                let q = &q;
                s.spawn(move || {
                    if t < 2 {
                        for i in 0..per_thread {
                            let pushed = q.push((t % 2) as usize, t << 32 | i, || 1 << 20);
                            assert!(matches!(pushed, Pushed::Queued { .. }));
                        }
                    } else {
                        // Runs of 1 to 37 words, across batch ends.
                        let words: Vec<u64> = (0..per_thread).map(|i| t << 32 | i).collect();
                        let mut sealed = false;
                        for run in words.chunks(1 + (t as usize * 13) % 37) {
                            assert_eq!(q.push_many((t % 2) as usize, run, || 1 << 20, &mut sealed), run.len());
                        }
                    }
                })
            })
            .collect();
        pushers.into_iter().for_each(|p| p.join().unwrap());
        stop.store(true, Release);
        let mut words = drainer.join().unwrap();
        words.extend(drain(&q));
        words
    });
    let mut sorted = drained.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), drained.len(), "a word drained twice");
    assert_eq!(drained.len() as u64, 4 * per_thread, "a word lost");
    // Each thread's words leave a shard in the order it pushed them
    // when it had the shard to itself: check every thread's words
    // appear, per thread, in increasing order within each batch read.
    assert_eq!(q.counts(), (4 * per_thread, 0));
}
