//! zsmalloc against a model of its live objects: random malloc, write,
//! read, free, deferred free, replace (store a copy, free the old), flush
//! and compaction; no handle is ever handed out twice. (A stale or doubly
//! freed handle cannot be expressed: handles are consumed by frees.)
//! After every step the pool's own
//! bookkeeping is checked and every live object is read back; at the end
//! the pool is dropped and the page allocator must have every page back.

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, Report};
use mmkit_zsmalloc::{Handle, HandleId, ZsPool};
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
        mm.drain_all_pages();
        let start = mm.nr_free_pages();
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
        mm.drain_all_pages();
        prop_assert_eq!(mm.nr_free_pages(), start);
        Report::new(&mm).check_invariants().map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    }
}
