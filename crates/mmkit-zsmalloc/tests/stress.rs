//! Threads hammer one pool: four allocate objects, write a pattern that
//! names the object, verify it and free it (synchronously or deferred)
//! while a fifth thread compacts without pause. Nothing may be lost or read
//! wrong, and afterwards every page is back with the page allocator.

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, Report};
use mmkit_testkit::XorShift64;
use mmkit_zsmalloc::{Handle, ZsPool};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let word = tag.to_le_bytes();
    (0..len).map(|i| word[i % 8] ^ (i / 8) as u8).collect()
}

#[test]
fn four_threads_and_a_compactor() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(128 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    mm.drain_all_pages();
    let start = mm.nr_free_pages();
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
    mm.drain_all_pages();
    assert_eq!(mm.nr_free_pages(), start);
    Report::new(&mm).check_invariants().unwrap();
}
