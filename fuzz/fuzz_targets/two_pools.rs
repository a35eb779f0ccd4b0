//! Fuzz target for two zsmalloc pools over one page allocator: objects are
//! allocated, written, read, freed (at once or deferred) and compacted,
//! with handles crossing from one pool to the other and forged handles
//! mixed in. A model of each pool's live objects and their bytes predicts
//! every result: a handle is valid on a pool exactly when that pool handed
//! it out and has not freed it. After every operation both pools keep
//! their invariants and every live object its bytes. The pools are kept
//! from one input to the next (see `mmkit_fuzz`): each input starts on
//! empty pools and frees what it left.
//!
//! Run with `cargo +nightly fuzz run two_pools` from `fuzz/`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, Report};
use mmkit_fuzz::Persistent;
use mmkit_zsmalloc::{Handle, ZsError, ZsPool};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

#[derive(Arbitrary, Debug)]
enum Op {
    Malloc { pool: bool, size: u16, seed: u8 },
    Free { pool: bool, pick: u16 },
    FreeDeferred { pool: bool, pick: u16 },
    Read { pool: bool, pick: u16 },
    Write { pool: bool, pick: u16, seed: u8, extra: u8 },
    Forged { pool: bool, raw: u64 },
    Compact { pool: bool },
    Flush,
}

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 7) as u8)).collect()
}

/// One map for every run: building a real-memory map per input would
/// dominate the run.
fn map() -> Arc<mmkit::PageAllocator> {
    static MM: OnceLock<Arc<mmkit::PageAllocator>> = OnceLock::new();
    MM.get_or_init(|| {
        Arc::new(
            MemoryMapBuilder::with_memory(32 << 20)
                .backing(Backing::RealMemory(HugePages::None))
                .nr_cpus(1)
                .cpu_id_fn(|| 0)
                .build()
                .unwrap(),
        )
    })
    .clone()
}

/// A handle from either pool's live objects (crossing half the time), or
/// a raw word.
fn pick(models: &[HashMap<Handle, Vec<u8>>; 2], queued: &HashSet<Handle>, pick: u16) -> Option<Handle> {
    let mut all: Vec<Handle> = models.iter().flat_map(|m| m.keys().copied()).collect();
    all.sort_unstable();
    let h = if all.is_empty() || pick % 8 == 7 {
        Handle::from_raw(u64::from(pick) | 1).unwrap()
    } else {
        all[usize::from(pick) % all.len()]
    };
    (!queued.contains(&h)).then_some(h)
}

/// Every live object of both pools still holds its bytes, and the pools
/// named in `checked` keep their invariants (a full check walks every size
/// class, so after one operation only the pool it called is walked: the
/// other was not called, and its objects' bytes are read all the same).
fn check(pools: &[ZsPool; 2], models: &[HashMap<Handle, Vec<u8>>; 2], checked: &[usize]) {
    let mut out = vec![0u8; 4096];
    for (p, (pool, model)) in pools.iter().zip(models).enumerate() {
        if checked.contains(&p) {
            pool.check_invariants().unwrap();
        }
        for (&h, want) in model {
            let n = pool.zs_obj_read(h, &mut out).unwrap();
            assert_eq!(&out[..n], &want[..], "object {h} lost its bytes");
        }
    }
}

/// What a call with handle `h` on a pool must return: Ok exactly when the
/// pool's model holds `h`.
fn expect<T: std::fmt::Debug>(valid: bool, h: Handle, got: Result<T, ZsError>) -> Option<T> {
    if valid {
        Some(got.unwrap())
    } else {
        assert_eq!(got.unwrap_err(), ZsError::InvalidHandle(h));
        None
    }
}

/// The two pools, kept from one input to the next (see `mmkit_fuzz`).
static POOLS: Persistent<[ZsPool; 2]> = Persistent::new();

fn fresh_pools() -> [ZsPool; 2] {
    let mm = map();
    [ZsPool::zs_create_pool("a", mm.clone()).unwrap(), ZsPool::zs_create_pool("b", mm).unwrap()]
}

fuzz_target!(|ops: Vec<Op>| POOLS.with(fresh_pools, |pools| run(pools, ops)));

/// Runs one input on pools that hold nothing, and frees what it left.
fn run(pools: &[ZsPool; 2], ops: Vec<Op>) {
    for pool in pools {
        assert_eq!(pool.zs_get_total_pages(), 0, "pool {} kept pages from the last input", pool.name());
    }
    let mut models: [HashMap<Handle, Vec<u8>>; 2] = [HashMap::new(), HashMap::new()];
    let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
    let mut buf = vec![0u8; 4096];
    // Handles queued by zs_free_deferred and not flushed yet: whether the
    // pool's worker has freed them is not the model's to know, so they are
    // left alone until the next flush.
    let mut queued: HashSet<Handle> = HashSet::new();
    for op in ops.into_iter().take(96) {
        let called = match op {
            Op::Malloc { pool, .. }
            | Op::Free { pool, .. }
            | Op::FreeDeferred { pool, .. }
            | Op::Read { pool, .. }
            | Op::Write { pool, .. }
            | Op::Forged { pool, .. }
            | Op::Compact { pool } => vec![usize::from(pool)],
            Op::Flush => vec![0, 1],
        };
        match op {
            Op::Malloc { pool, size, seed } => {
                let p = pool as usize;
                if models[p].len() >= 48 {
                    continue;
                }
                let size = usize::from(size % 4096) + 1;
                let data = bytes(seed, size);
                let h = pools[p].zs_malloc_copy(&data, gfp, 0).unwrap();
                assert!(!models[0].contains_key(&h) && !models[1].contains_key(&h), "handle {h} given twice");
                models[p].insert(h, data);
            }
            Op::Free { pool, pick: k } => {
                let Some(h) = pick(&models, &queued, k) else { continue };
                let p = pool as usize;
                let valid = models[p].contains_key(&h);
                expect(valid, h, pools[p].zs_free(h));
                models[p].remove(&h);
            }
            Op::FreeDeferred { pool, pick: k } => {
                let Some(h) = pick(&models, &queued, k) else { continue };
                let p = pool as usize;
                let valid = models[p].contains_key(&h);
                expect(valid, h, pools[p].zs_free_deferred(h));
                if models[p].remove(&h).is_some() {
                    queued.insert(h);
                }
            }
            Op::Read { pool, pick: k } => {
                let Some(h) = pick(&models, &queued, k) else { continue };
                let p = pool as usize;
                if let Some(n) = expect(models[p].contains_key(&h), h, pools[p].zs_obj_read(h, &mut buf)) {
                    assert_eq!(&buf[..n], &models[p][&h][..]);
                }
            }
            Op::Write { pool, pick: k, seed, extra } => {
                let Some(h) = pick(&models, &queued, k) else { continue };
                let p = pool as usize;
                match models[p].get_mut(&h) {
                    Some(obj) => {
                        // Too long: refused, nothing written.
                        let too_long = bytes(seed, obj.len() + 1 + usize::from(extra % 8));
                        assert!(matches!(pools[p].zs_obj_write(h, &too_long), Err(ZsError::TooLong { .. })));
                        let data = bytes(seed, obj.len());
                        pools[p].zs_obj_write(h, &data).unwrap();
                        *obj = data;
                    }
                    None => assert_eq!(pools[p].zs_obj_write(h, &[seed]), Err(ZsError::InvalidHandle(h))),
                }
            }
            Op::Forged { pool, raw } => {
                let Some(h) = Handle::from_raw(raw) else { continue };
                if queued.contains(&h) {
                    continue;
                }
                let p = pool as usize;
                let valid = models[p].contains_key(&h);
                expect(valid, h, pools[p].zs_obj_read(h, &mut buf));
                expect(valid, h, pools[p].zs_free(h));
                models[p].remove(&h);
            }
            Op::Compact { pool } => {
                pools[pool as usize].zs_compact();
            }
            Op::Flush => {
                for pool in pools {
                    pool.zs_free_deferred_flush();
                }
                queued.clear();
            }
        }
        check(pools, &models, &called);
    }
    for pool in pools {
        pool.zs_free_deferred_flush();
        assert_eq!(pool.deferred_stats().invalid, 0, "an invalid handle reached the deferred queue");
    }
    check(pools, &models, &[0, 1]);
    // Back to empty for the next input: every object freed, every zspage
    // with it.
    for (pool, model) in pools.iter().zip(&models) {
        for &h in model.keys() {
            pool.zs_free(h).unwrap();
        }
    }
    check(pools, &[HashMap::new(), HashMap::new()], &[0, 1]);
    Report::new(&map()).check_invariants().unwrap();
}
