//! zsmalloc against a `HashMap` model: random malloc, write, read, free,
//! deferred free, replace (store a copy, free the old), flush and compaction. After every step the pool's own
//! bookkeeping is checked and every live object is read back; at the end
//! the pool is dropped and the page allocator must have every page back.

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, Report};
use mmkit_zsmalloc::{Handle, ZsError, ZsPool};
use proptest::prelude::*;
use std::collections::HashMap;
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
    FreeStale,
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
        1 => Just(Op::FreeStale),
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
            // Live objects: handle → contents (unwritten objects are zero-length in the model's eyes).
            let mut model: HashMap<Handle, Vec<u8>> = HashMap::new();
            let mut order: Vec<Handle> = Vec::new();
            let mut freed: Vec<Handle> = Vec::new();
            let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
            for op in ops {
                match op {
                    Op::Malloc { size } => {
                        let h = pool.zs_malloc(size, gfp, 0).unwrap();
                        prop_assert!(!model.contains_key(&h));
                        pool.zs_obj_write(h, &vec![0; size]).unwrap();
                        model.insert(h, vec![0; size]);
                        order.push(h);
                    }
                    Op::Write { pick, seed } if !order.is_empty() => {
                        let h = order[pick % order.len()];
                        let len = model[&h].len();
                        let data = bytes(seed, len);
                        pool.zs_obj_write(h, &data).unwrap();
                        model.insert(h, data);
                    }
                    Op::Free { pick } | Op::FreeDeferred { pick } if !order.is_empty() => {
                        let h = order.swap_remove(pick % order.len());
                        model.remove(&h);
                        if matches!(op, Op::Free { .. }) {
                            pool.zs_free(h).unwrap();
                        } else {
                            pool.zs_free_deferred(h).unwrap();
                        }
                        freed.push(h);
                    }
                    Op::Replace { pick, size, seed } if !order.is_empty() => {
                        let at = pick % order.len();
                        let old = order[at];
                        let data = bytes(seed, size);
                        let (h, freed_old) = pool.zs_replace(old, &data, gfp, 0).unwrap();
                        prop_assert_eq!(freed_old, Ok(()));
                        model.remove(&old);
                        prop_assert!(!model.contains_key(&h));
                        model.insert(h, data);
                        order[at] = h;
                        freed.push(old);
                        // The old handle is gone; a second replace of it
                        // stores nothing new in its place and says so.
                        let again = pool.zs_replace(old, &[seed; 8], gfp, 0).unwrap();
                        prop_assert_eq!(again.1, Err(ZsError::InvalidHandle(old)));
                        pool.zs_free(again.0).unwrap();
                    }
                    Op::Flush => pool.zs_free_deferred_flush(),
                    Op::Compact => {
                        pool.zs_compact();
                    }
                    Op::FreeStale if !freed.is_empty() => {
                        pool.zs_free_deferred_flush();
                        let h = freed[freed.len() - 1];
                        prop_assert_eq!(pool.zs_free(h), Err(ZsError::InvalidHandle(h)));
                    }
                    _ => {}
                }
                pool.check_invariants().map_err(TestCaseError::fail)?;
                let mut out = vec![0; 4096];
                for (h, want) in &model {
                    let n = pool.zs_obj_read(*h, &mut out).unwrap();
                    prop_assert_eq!(&out[..n], &want[..]);
                }
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
