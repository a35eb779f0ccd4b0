//! zsmalloc against a model of its live objects: random malloc, write,
//! read, free, deferred free, replace (store a copy, free the old), flush
//! and compaction; no handle is ever handed out twice. (A stale or doubly
//! freed handle cannot be expressed: handles are consumed by frees.)
//! After every step the pool's own
//! bookkeeping is checked and every live object is read back; at the end
//! the pool is dropped and the page allocator must have every page back.
//!
//! The same with objects held as raw words, which can be stale or spent:
//! the model keeps every word it spent (freed, queued for a deferred free,
//! replaced), and a step may try one again with every raw call, each of
//! which must refuse it at the call and change nothing.

use mmkit::Cpus;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, Report};
use mmkit_zsmalloc::{Handle, HandleId, ZsConfig, ZsError, ZsPool};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Op {
    Malloc { size: usize },
    Write { pick: usize, seed: u8 },
    Free { pick: usize },
    FreeDeferred { pick: usize },
    Replace { pick: usize, size: usize, seed: u8 },
    Flush,
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop_oneof![1usize..64, 64usize..1024, 1024usize..4097].prop_map(|size| Op::Malloc { size }),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(pick, seed)| Op::Write { pick, seed }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => any::<usize>().prop_map(|pick| Op::FreeDeferred { pick }),
        3 => (any::<usize>(), prop_oneof![1usize..64, 64usize..1024, 1024usize..4097], any::<u8>())
            .prop_map(|(pick, size, seed)| Op::Replace { pick, size, seed }),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
    ]
}

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 13) as u8)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn zsmalloc_matches_a_map(ops in proptest::collection::vec(op(), 1..120), chain in 4usize..=16) {
        let mm = Arc::new(MemoryMapBuilder::with_memory(32 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
        Cpus::new(&mm).drain_all_pages();
        let start = Report::new(&mm).nr_free_pages();
        {
            let pool = ZsPool::with_chain_size("model", mm.clone(), chain).unwrap();
            // Live objects: handle and contents (unwritten objects are zero-length in the model's eyes).
            let mut live: Vec<(Handle, Vec<u8>)> = Vec::new();
            let mut seen: HashSet<HandleId> = HashSet::new();
            let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
            for op in ops {
                match op {
                    Op::Malloc { size } => {
                        let h = pool.zs_malloc(size, gfp, 0).unwrap();
                        prop_assert!(seen.insert(h.id()), "a handle is never handed out twice");
                        pool.zs_obj_write(&h, &vec![0; size]).unwrap();
                        live.push((h, vec![0; size]));
                    }
                    Op::Write { pick, seed } if !live.is_empty() => {
                        let at = pick % live.len();
                        let data = bytes(seed, live[at].1.len());
                        pool.zs_obj_write(&live[at].0, &data).unwrap();
                        live[at].1 = data;
                    }
                    Op::Free { pick } | Op::FreeDeferred { pick } if !live.is_empty() => {
                        let (h, _) = live.swap_remove(pick % live.len());
                        if matches!(op, Op::Free { .. }) {
                            pool.zs_free(h).unwrap();
                        } else {
                            pool.zs_free_deferred(h).unwrap();
                        }
                    }
                    Op::Replace { pick, size, seed } if !live.is_empty() => {
                        let at = pick % live.len();
                        let (old, _) = live.swap_remove(at);
                        let data = bytes(seed, size);
                        let h = pool.zs_replace(old, &data, gfp, 0).map_err(|(e, _)| e).unwrap();
                        prop_assert!(seen.insert(h.id()), "a handle is never handed out twice");
                        live.push((h, data));
                    }
                    Op::Flush => pool.zs_free_deferred_flush(),
                    Op::Compact => {
                        pool.zs_compact();
                    }
                    _ => {}
                }
                pool.check_invariants().map_err(TestCaseError::fail)?;
                let mut out = vec![0; 4096];
                for (h, want) in &live {
                    let n = pool.zs_obj_read(h, &mut out).unwrap();
                    prop_assert_eq!(&out[..n], &want[..]);
                }
            }
            for (h, _) in live {
                pool.zs_free(h).unwrap();
            }
            pool.zs_free_deferred_flush();
            pool.check_invariants().map_err(TestCaseError::fail)?;
            let stats = pool.deferred_stats();
            prop_assert_eq!(stats.invalid, 0);
            prop_assert_eq!(stats.queued, stats.drained);
        }
        Cpus::new(&mm).drain_all_pages();
        prop_assert_eq!(Report::new(&mm).nr_free_pages(), start);
        Report::new(&mm).check_invariants().map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    }
}

#[derive(Clone, Debug)]
enum RawOp {
    Malloc {
        size: usize,
        seed: u8,
    },
    Write {
        pick: usize,
        seed: u8,
    },
    Free {
        pick: usize,
    },
    FreeDeferred {
        pick: usize,
    },
    /// The word to a handle and back (the same word again).
    RoundTrip {
        pick: usize,
    },
    Replace {
        pick: usize,
        size: usize,
        seed: u8,
    },
    /// A spent word, tried again with every raw call.
    Spent {
        pick: usize,
    },
    Flush,
    Compact,
}

fn raw_op() -> impl Strategy<Value = RawOp> {
    let size = || prop_oneof![1usize..64, 64usize..1024, 1024usize..4097];
    prop_oneof![
        6 => (size(), any::<u8>()).prop_map(|(size, seed)| RawOp::Malloc { size, seed }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(pick, seed)| RawOp::Write { pick, seed }),
        2 => any::<usize>().prop_map(|pick| RawOp::Free { pick }),
        3 => any::<usize>().prop_map(|pick| RawOp::FreeDeferred { pick }),
        1 => any::<usize>().prop_map(|pick| RawOp::RoundTrip { pick }),
        2 => (any::<usize>(), size(), any::<u8>()).prop_map(|(pick, size, seed)| RawOp::Replace { pick, size, seed }),
        3 => any::<usize>().prop_map(|pick| RawOp::Spent { pick }),
        1 => Just(RawOp::Flush),
        1 => Just(RawOp::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn raw_words_match_a_map(ops in proptest::collection::vec(raw_op(), 1..120)) {
        let mm = Arc::new(MemoryMapBuilder::with_memory(32 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
        Cpus::new(&mm).drain_all_pages();
        let start = Report::new(&mm).nr_free_pages();
        {
            let (pool, key) = ZsPool::with_raw_key("model", mm.clone(), ZsConfig::default()).unwrap();
            let mut live: Vec<(u64, Vec<u8>)> = Vec::new();
            let mut spent: Vec<u64> = Vec::new();
            let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
            let refused = |r: Result<(), ZsError>| matches!(r, Err(ZsError::InvalidHandle(_)));
            for op in ops {
                let queued_before = pool.deferred_stats();
                match op {
                    RawOp::Malloc { size, seed } => {
                        let data = bytes(seed, size);
                        let w = pool.zs_malloc_copy_raw(&key, &data, gfp, 0).unwrap();
                        prop_assert!(!spent.contains(&w), "a word is never handed out twice");
                        live.push((w, data));
                    }
                    RawOp::Write { pick, seed } if !live.is_empty() => {
                        let at = pick % live.len();
                        let data = bytes(seed, live[at].1.len());
                        pool.zs_obj_write_raw(&key, live[at].0, &data).unwrap();
                        live[at].1 = data;
                    }
                    RawOp::Free { pick } if !live.is_empty() => {
                        let (w, _) = live.swap_remove(pick % live.len());
                        pool.zs_free_raw(&key, w).unwrap();
                        spent.push(w);
                    }
                    RawOp::FreeDeferred { pick } if !live.is_empty() => {
                        let (w, _) = live.swap_remove(pick % live.len());
                        pool.zs_free_deferred_raw(&key, w).unwrap();
                        prop_assert!(refused(pool.zs_free_deferred_raw(&key, w)), "queued twice");
                        spent.push(w);
                    }
                    RawOp::RoundTrip { pick } if !live.is_empty() => {
                        let at = pick % live.len();
                        let w = live[at].0;
                        let h = pool.zs_handle_from_raw(&key, w).unwrap();
                        prop_assert!(pool.zs_handle_from_raw(&key, w).is_err(), "taken back twice");
                        prop_assert!(refused(pool.zs_free_deferred_raw(&key, w)), "queued while a handle holds it");
                        let back = pool.zs_handle_into_raw(&key, h).map_err(|(e, _)| e).unwrap();
                        prop_assert_eq!(back, w);
                    }
                    RawOp::Replace { pick, size, seed } if !live.is_empty() => {
                        let (old, _) = live.swap_remove(pick % live.len());
                        let data = bytes(seed, size);
                        let w = pool.zs_replace_raw(&key, old, &data, gfp, 0).unwrap();
                        prop_assert!(!spent.contains(&w) && w != old);
                        spent.push(old);
                        live.push((w, data));
                    }
                    RawOp::Spent { pick } if !spent.is_empty() => {
                        let w = spent[pick % spent.len()];
                        let pages = pool.zs_get_total_pages();
                        prop_assert!(refused(pool.zs_free_deferred_raw(&key, w)));
                        prop_assert!(refused(pool.zs_free_raw(&key, w)));
                        prop_assert!(pool.zs_handle_from_raw(&key, w).is_err());
                        prop_assert!(refused(pool.zs_obj_write_raw(&key, w, &[0xee])));
                        prop_assert!(pool.zs_obj_read_raw(&key, w, &mut [0; 4096]).is_err());
                        prop_assert!(pool.zs_replace_raw(&key, w, &[1; 100], gfp, 0).is_err());
                        prop_assert_eq!(pool.zs_get_total_pages(), pages, "a refusal changes nothing");
                        let stats = pool.deferred_stats();
                        prop_assert_eq!(stats.queued + stats.fallback, queued_before.queued + queued_before.fallback);
                    }
                    RawOp::Flush => pool.zs_free_deferred_flush(),
                    RawOp::Compact => {
                        pool.zs_compact();
                    }
                    _ => {}
                }
                pool.check_invariants().map_err(TestCaseError::fail)?;
                let mut out = vec![0; 4096];
                for (w, want) in &live {
                    let n = pool.zs_obj_read_raw(&key, *w, &mut out).unwrap();
                    prop_assert_eq!(&out[..n], &want[..]);
                }
            }
            for (w, _) in live {
                pool.zs_free_deferred_raw(&key, w).unwrap();
            }
            pool.zs_free_deferred_flush();
            pool.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(pool.zs_get_total_pages(), 0);
            let stats = pool.deferred_stats();
            prop_assert_eq!(stats.invalid, 0);
            prop_assert_eq!(stats.queued, stats.drained);
        }
        Cpus::new(&mm).drain_all_pages();
        prop_assert_eq!(Report::new(&mm).nr_free_pages(), start);
        Report::new(&mm).check_invariants().map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    }
}
