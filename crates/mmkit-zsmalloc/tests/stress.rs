//! Threads hammer one pool: four allocate objects, write a pattern that
//! names the object, verify it and free it (synchronously or deferred)
//! while a fifth thread compacts without pause. Nothing may be lost or read
//! wrong, and afterwards every page is back with the page allocator. And
//! threads race to free the same raw words: exactly one call wins a word.

use mmkit::Cpus;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, Report};
use mmkit_testkit::XorShift64;
use mmkit_zsmalloc::{Handle, ZsConfig, ZsError, ZsPool};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let word = tag.to_le_bytes();
    (0..len).map(|i| word[i % 8] ^ (i / 8) as u8).collect()
}

#[test]
fn four_threads_and_a_compactor() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(128 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    Cpus::new(&mm).drain_all_pages();
    let start = Report::new(&mm).nr_free_pages();
    {
        let pool = ZsPool::zs_create_pool("stress", mm.clone()).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let compactor = s.spawn(|| {
                let mut freed = 0;
                while !stop.load(Ordering::Relaxed) {
                    freed += pool.zs_compact();
                }
                freed
            });
            let workers: Vec<_> = (0..4u64)
                .map(|t| {
                    let pool = &pool;
                    s.spawn(move || {
                        let mut rng = XorShift64::new(0x5eed ^ (t << 32));
                        let mut held: Vec<(Handle, u64, usize)> = Vec::new();
                        let mut out = vec![0; 4096];
                        for round in 0..6000u64 {
                            if held.len() < 400 && (rng.next_u64() % 3 != 0 || held.is_empty()) {
                                let len = 1 + (rng.next_u64() % 4096) as usize;
                                let h = pool.zs_malloc(len, Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE, 0).unwrap();
                                let tag = t << 56 | round;
                                pool.zs_obj_write(&h, &pattern(tag, len)).unwrap();
                                held.push((h, tag, len));
                            } else {
                                let i = (rng.next_u64() % held.len() as u64) as usize;
                                let (h, tag, len) = held.swap_remove(i);
                                let n = pool.zs_obj_read(&h, &mut out).unwrap();
                                assert_eq!(n, len);
                                assert!(out[..n] == pattern(tag, len)[..], "object {h} read wrong");
                                if round % 2 == 0 {
                                    pool.zs_free(h).unwrap();
                                } else {
                                    pool.zs_free_deferred(h).unwrap();
                                }
                            }
                        }
                        for (h, tag, len) in held {
                            let n = pool.zs_obj_read(&h, &mut out).unwrap();
                            assert!(out[..n] == pattern(tag, len)[..]);
                            pool.zs_free(h).unwrap();
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            compactor.join().unwrap();
        });
        pool.zs_free_deferred_flush();
        pool.check_invariants().unwrap();
        assert_eq!(pool.zs_get_total_pages(), 0);
        assert_eq!(pool.deferred_stats().invalid, 0);
    }
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), start);
    Report::new(&mm).check_invariants().unwrap();
}

/// Threads race to free the same raw words (issue 37: a word freed or
/// queued already is refused at the call): four queue every word for a
/// deferred free, a fifth frees every word synchronously and a sixth takes
/// every word back into a handle, each in its own order, while a seventh
/// drains the queue and compacts without pause. For each word exactly one
/// call wins; every other is refused with `InvalidHandle`, and the drain
/// finds nothing invalid.
#[test]
fn racing_frees_of_one_raw_word_exactly_one_wins() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(128 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    Cpus::new(&mm).drain_all_pages();
    let start = Report::new(&mm).nr_free_pages();
    {
        let (pool, key) = ZsPool::with_raw_key("race", mm.clone(), ZsConfig::default()).unwrap();
        let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
        for round in 0..4usize {
            let words: Vec<u64> = (0..3000usize)
                .map(|i| {
                    pool.zs_malloc_copy_raw(&key, &pattern(i as u64, 1 + (i * 37 + round) % 3000), gfp, 0).unwrap()
                })
                .collect();
            let wins: Vec<AtomicU32> = words.iter().map(|_| AtomicU32::new(0)).collect();
            let handles = Mutex::new(Vec::new());
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                let drainer = s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        pool.zs_free_deferred_flush();
                        pool.zs_compact();
                    }
                });
                let racers: Vec<_> = (0..6usize)
                    .map(|t| {
                        let (pool, key, words, wins, handles) = (&pool, &key, &words, &wins, &handles);
                        s.spawn(move || {
                            let n = words.len();
                            for k in 0..n {
                                // Each racer its own order: rotated, every other one reversed.
                                let i = if t % 2 == 0 { (k + t * 500) % n } else { (n - 1 - k + t * 500) % n };
                                let won = match t {
                                    0..=3 => pool.zs_free_deferred_raw(key, words[i]).map(|()| None),
                                    4 => pool.zs_free_raw(key, words[i]).map(|()| None),
                                    _ => pool.zs_handle_from_raw(key, words[i]).map(Some),
                                };
                                match won {
                                    Ok(handle) => {
                                        wins[i].fetch_add(1, Ordering::Relaxed);
                                        if let Some(h) = handle {
                                            handles.lock().unwrap().push((i, h));
                                        }
                                    }
                                    Err(e) => assert!(matches!(e, ZsError::InvalidHandle(_)), "{e:?}"),
                                }
                            }
                        })
                    })
                    .collect();
                for r in racers {
                    r.join().unwrap();
                }
                stop.store(true, Ordering::Relaxed);
                drainer.join().unwrap();
            });
            for (i, w) in wins.iter().enumerate() {
                assert_eq!(w.load(Ordering::Relaxed), 1, "word {i} of round {round}: exactly one call wins");
            }
            let mut out = vec![0; 4096];
            for (i, h) in handles.into_inner().unwrap() {
                let n = pool.zs_obj_read(&h, &mut out).unwrap();
                assert!(out[..n] == pattern(i as u64, 1 + (i * 37 + round) % 3000)[..], "object {i} intact");
                pool.zs_free(h).unwrap();
            }
            pool.zs_free_deferred_flush();
            pool.check_invariants().unwrap();
            assert_eq!(pool.zs_get_total_pages(), 0);
        }
        let stats = pool.deferred_stats();
        assert_eq!(stats.invalid, 0, "every refusal was at the call");
        assert_eq!(stats.queued, stats.drained);
    }
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), start);
    Report::new(&mm).check_invariants().unwrap();
}

/// The seed's release (256 MiB of pages' objects, 65,536 handles) from one
/// to four threads through `zs_free_deferred`: no free falls back to the
/// synchronous path, the worker and a flush free every object exactly once
/// (none is invalid when drained), and every page goes back.
#[test]
fn a_release_of_65536_handles_never_falls_back() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(256 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    for threads in [1usize, 2, 4] {
        let pool = ZsPool::zs_create_pool("release", mm.clone()).unwrap();
        let mut rng = XorShift64::new(threads as u64);
        let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
        let handles: Vec<Handle> =
            (0..65_536).map(|_| pool.zs_malloc(400 + (rng.next_u64() % 2000) as usize, gfp, 0).unwrap()).collect();
        let mut parts: Vec<Vec<Handle>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, h) in handles.into_iter().enumerate() {
            parts[i % threads].push(h);
        }
        std::thread::scope(|s| {
            for part in parts {
                let pool = &pool;
                s.spawn(move || part.into_iter().for_each(|h| pool.zs_free_deferred(h).unwrap()));
            }
        });
        pool.zs_free_deferred_flush();
        let stats = pool.deferred_stats();
        assert_eq!(
            (stats.queued, stats.fallback, stats.drained, stats.invalid),
            (65_536, 0, 65_536, 0),
            "{threads} threads"
        );
        assert_eq!(pool.zs_get_total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}
