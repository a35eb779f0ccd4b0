//! Handles name their pool: a handle from another pool, or from a pool that
//! was dropped, is refused by every call that takes one, and the refusal
//! changes nothing in either pool (issue 22, finding 3).

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator};
use mmkit_zsmalloc::{Handle, ZsError, ZsPool};
use std::sync::Arc;

fn gfp() -> Gfp {
    Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE
}

fn real_map(bytes: u64) -> Arc<PageAllocator> {
    Arc::new(MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).build().unwrap())
}

fn read(pool: &ZsPool, h: Handle) -> Result<Vec<u8>, ZsError> {
    let mut out = vec![0; 4096];
    let n = pool.zs_obj_read(h, &mut out)?;
    out.truncate(n);
    Ok(out)
}

/// Every call that takes a handle refuses `foreign` on `pool`, and `pool`'s
/// own object `own` (holding `bytes`) is untouched afterwards.
fn refuses_everywhere(pool: &ZsPool, foreign: Handle, own: Handle, bytes: &[u8]) {
    let pages = pool.zs_get_total_pages();
    let invalid = Err(ZsError::InvalidHandle(foreign));
    assert_eq!(pool.zs_free(foreign), invalid);
    assert_eq!(pool.zs_free_deferred(foreign), invalid);
    assert_eq!(pool.zs_obj_read(foreign, &mut [0; 4096]), Err(ZsError::InvalidHandle(foreign)));
    assert_eq!(pool.zs_obj_read_with(foreign, &mut [0; 4096], |b| b.len()), Err(ZsError::InvalidHandle(foreign)));
    assert_eq!(pool.zs_obj_write(foreign, &[0xaa; 8]), invalid);
    pool.zs_free_deferred_flush();
    assert_eq!(pool.deferred_stats().invalid, 0, "nothing foreign was queued");
    assert_eq!(read(pool, own).unwrap(), bytes, "the pool's own object is untouched");
    assert_eq!(pool.zs_get_total_pages(), pages);
    pool.check_invariants().unwrap();
}

#[test]
fn a_handle_from_another_pool_is_refused_by_every_call() {
    let mm = real_map(32 << 20);
    let a = ZsPool::zs_create_pool("a", mm.clone()).unwrap();
    let b = ZsPool::zs_create_pool("b", mm.clone()).unwrap();
    let ha = a.zs_malloc_copy(&[1; 100], gfp(), 0).unwrap();
    let hb = b.zs_malloc_copy(&[2; 100], gfp(), 0).unwrap();
    // Same size, same class, same first slot: only the pool tells them apart.
    assert_ne!(ha, hb, "two pools must not hand out the same handle");
    refuses_everywhere(&b, ha, hb, &[2; 100]);
    refuses_everywhere(&a, hb, ha, &[1; 100]);
    // The raw word round-trips (zram stores it) and keeps naming its pool.
    let raw = Handle::from_raw(ha.to_raw()).unwrap();
    assert_eq!(b.zs_free(raw), Err(ZsError::InvalidHandle(raw)));
    a.zs_free(raw).unwrap();
    b.zs_free(hb).unwrap();
}

#[test]
fn a_handle_from_a_dropped_pool_is_refused() {
    let mm = real_map(32 << 20);
    let old = ZsPool::zs_create_pool("old", mm.clone()).unwrap();
    let stale = old.zs_malloc_copy(&[3; 64], gfp(), 0).unwrap();
    drop(old);
    let new = ZsPool::zs_create_pool("new", mm.clone()).unwrap();
    let own = new.zs_malloc_copy(&[4; 64], gfp(), 0).unwrap();
    refuses_everywhere(&new, stale, own, &[4; 64]);
    new.zs_free(own).unwrap();
}

#[test]
fn many_pools_keep_distinct_handles() {
    let mm = real_map(64 << 20);
    // 15: a map issues one owner key per pool, PageOwner::MAX at once.
    let pools: Vec<ZsPool> = (0..15).map(|i| ZsPool::zs_create_pool(&format!("p{i}"), mm.clone()).unwrap()).collect();
    let handles: Vec<Handle> = pools.iter().map(|p| p.zs_malloc_copy(&[7; 40], gfp(), 0).unwrap()).collect();
    for (i, p) in pools.iter().enumerate() {
        for (j, &h) in handles.iter().enumerate() {
            if i != j {
                assert_eq!(p.zs_obj_write(h, &[0]), Err(ZsError::InvalidHandle(h)));
            }
        }
    }
    for (p, h) in pools.iter().zip(handles) {
        p.zs_free(h).unwrap();
        p.check_invariants().unwrap();
    }
}

/// Found by the `two_pools` fuzz target: once ids had wrapped round to 0,
/// a pool's `zs_free_deferred` took a forged word with clear top bits (its
/// pool field 0) as its own, queued it and answered Ok. Id 0 is never
/// handed out, however many pools come and go.
#[test]
fn a_forged_small_word_names_no_pool_even_after_ids_wrap() {
    let mm = real_map(8 << 20);
    for round in 0..5000 {
        let pool = ZsPool::zs_create_pool("wrap", mm.clone()).unwrap();
        if round % 1000 == 0 || round > 4090 {
            for raw in [1u64, 2, 0xffff, 1 << 40, (1 << 52) - 1] {
                let forged = Handle::from_raw(raw).unwrap();
                assert_eq!(pool.zs_free_deferred(forged), Err(ZsError::InvalidHandle(forged)), "round {round}");
                assert_eq!(pool.zs_free(forged), Err(ZsError::InvalidHandle(forged)), "round {round}");
            }
        }
    }
}

mod crossing {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        Malloc { pool: usize, size: usize, seed: u8 },
        Free { pool: usize, pick: usize },
        Deferred { pool: usize, pick: usize },
        Write { pool: usize, pick: usize, seed: u8 },
        Compact { pool: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..2usize, 1..4096usize, any::<u8>()).prop_map(|(pool, size, seed)| Op::Malloc { pool, size, seed }),
            2 => (0..2usize, any::<usize>()).prop_map(|(pool, pick)| Op::Free { pool, pick }),
            1 => (0..2usize, any::<usize>()).prop_map(|(pool, pick)| Op::Deferred { pool, pick }),
            2 => (0..2usize, any::<usize>(), any::<u8>()).prop_map(|(pool, pick, seed)| Op::Write { pool, pick, seed }),
            1 => (0..2usize).prop_map(|pool| Op::Compact { pool }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Handles of both pools used on either: a call succeeds exactly
        /// when the pool it is made on handed the handle out and has not
        /// freed it, and every live object keeps its bytes.
        #[test]
        fn handles_crossing_pools_match_a_model(ops in proptest::collection::vec(op(), 1..80)) {
            let mm = real_map(32 << 20);
            let pools = [ZsPool::zs_create_pool("a", mm.clone()).unwrap(), ZsPool::zs_create_pool("b", mm.clone()).unwrap()];
            let mut live: [HashMap<Handle, Vec<u8>>; 2] = [HashMap::new(), HashMap::new()];
            let gfp = gfp();
            for op in ops {
                let all: Vec<Handle> = {
                    let mut v: Vec<Handle> = live.iter().flat_map(|m| m.keys().copied()).collect();
                    v.sort_unstable();
                    v
                };
                let pick = |i: usize| (!all.is_empty()).then(|| all[i % all.len()]);
                match op {
                    Op::Malloc { pool, size, seed } => {
                        let data = vec![seed; size];
                        let h = pools[pool].zs_malloc_copy(&data, gfp, 0).unwrap();
                        prop_assert!(!live[0].contains_key(&h) && !live[1].contains_key(&h));
                        live[pool].insert(h, data);
                    }
                    Op::Free { pool, pick: i } | Op::Deferred { pool, pick: i } => {
                        let Some(h) = pick(i) else { continue };
                        let got = if matches!(op, Op::Free { .. }) {
                            pools[pool].zs_free(h)
                        } else {
                            pools[pool].zs_free_deferred(h)
                        };
                        if live[pool].remove(&h).is_some() {
                            prop_assert_eq!(got, Ok(()));
                        } else {
                            prop_assert_eq!(got, Err(ZsError::InvalidHandle(h)));
                        }
                    }
                    Op::Write { pool, pick: i, seed } => {
                        let Some(h) = pick(i) else { continue };
                        match live[pool].get_mut(&h) {
                            Some(obj) => {
                                let data = vec![seed; obj.len()];
                                pools[pool].zs_obj_write(h, &data).unwrap();
                                *obj = data;
                            }
                            None => prop_assert_eq!(pools[pool].zs_obj_write(h, &[seed]), Err(ZsError::InvalidHandle(h))),
                        }
                    }
                    Op::Compact { pool } => {
                        pools[pool].zs_compact();
                    }
                }
                for (pool, objs) in pools.iter().zip(&live) {
                    pool.check_invariants().map_err(TestCaseError::fail)?;
                    for (&h, want) in objs {
                        prop_assert_eq!(&read(pool, h).unwrap(), want);
                    }
                }
            }
            for pool in &pools {
                pool.zs_free_deferred_flush();
                prop_assert_eq!(pool.deferred_stats().invalid, 0);
            }
        }
    }
}
