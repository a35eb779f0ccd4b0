//! Fuzz target for two zsmalloc pools over one page allocator: objects are
//! allocated (held by owned handles or by raw words under each pool's
//! key), written, read, freed (at once or deferred), converted between
//! handles and words, and compacted, with handles, words and keys crossing
//! from one pool to the other, and stale and forged words mixed in. A
//! model of each pool's live objects and their bytes predicts every
//! result: a handle or word is valid on a pool exactly when that pool
//! handed it out, still holds it the way it is named, and (for a word) the
//! key is the pool's. After every operation both pools keep their
//! invariants and every live object its bytes. Consuming calls are tried
//! across pools only where a refusal hands the handle back (`zs_replace`,
//! `zs_handle_into_raw`): a consumed handle cannot be named again, which
//! the type system enforces. The pools are kept from one input to the next
//! (see `mmkit_fuzz`): each input starts on empty pools and frees what it
//! left.
//!
//! Run with `cargo +nightly fuzz run two_pools` from `fuzz/`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, Report};
use mmkit_fuzz::Persistent;
use mmkit_zsmalloc::{Handle, RawKey, ZsConfig, ZsError, ZsPool};
use std::sync::{Arc, OnceLock};

#[derive(Arbitrary, Debug)]
enum Op {
    Malloc { pool: bool, size: u16, seed: u8, raw: bool },
    Free { pool: bool, pick: u16 },
    FreeDeferred { pool: bool, pick: u16 },
    Read { pool: bool, pick: u16 },
    Write { pool: bool, pick: u16, seed: u8, extra: u8 },
    Convert { pool: bool, pick: u16 },
    RawCall { pool: bool, key: bool, word: u64, stale: bool },
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

/// How the caller holds an object.
enum Held {
    Handle(Handle),
    Raw(u64),
}

/// One pool's live objects, as its caller holds them, with their bytes.
#[derive(Default)]
struct Model {
    objects: Vec<(Held, Vec<u8>)>,
    /// Words freed or queued: every raw call must refuse them.
    spent: Vec<u64>,
}

/// The two pools and their keys, kept from one input to the next.
struct Pools {
    pools: [ZsPool; 2],
    keys: [RawKey; 2],
}

static POOLS: Persistent<Pools> = Persistent::new();

fn fresh_pools() -> Pools {
    let mm = map();
    let (a, ka) = ZsPool::with_raw_key("a", mm.clone(), ZsConfig::default()).unwrap();
    let (b, kb) = ZsPool::with_raw_key("b", mm, ZsConfig::default()).unwrap();
    Pools { pools: [a, b], keys: [ka, kb] }
}

fuzz_target!(|ops: Vec<Op>| POOLS.with(fresh_pools, |pools| run(pools, ops)));

/// Reads `held` on pool `p` with key `k` (a word is read with it).
fn read(pools: &Pools, p: usize, k: usize, held: &Held, out: &mut [u8]) -> Result<usize, ZsError> {
    match held {
        Held::Handle(h) => pools.pools[p].zs_obj_read(h, out),
        Held::Raw(w) => pools.pools[p].zs_obj_read_raw(&pools.keys[k], *w, out),
    }
}

/// Every live object of both pools still holds its bytes, and the pools
/// named in `checked` keep their invariants.
fn check(pools: &Pools, models: &[Model; 2], checked: &[usize]) {
    let mut out = vec![0u8; 4096];
    for (p, model) in models.iter().enumerate() {
        if checked.contains(&p) {
            pools.pools[p].check_invariants().unwrap();
        }
        for (held, want) in &model.objects {
            let n = read(pools, p, p, held, &mut out).unwrap();
            assert_eq!(&out[..n], &want[..], "an object lost its bytes");
        }
    }
}

/// Pool and index of a live object of either pool: crossing half the time.
fn pick(models: &[Model; 2], pool: bool, k: u16) -> Option<(usize, usize)> {
    let first = usize::from(pool ^ (k & 1 == 1));
    for p in [first, 1 - first] {
        if !models[p].objects.is_empty() {
            return Some((p, usize::from(k >> 1) % models[p].objects.len()));
        }
    }
    None
}

fn invalid<T: std::fmt::Debug>(got: Result<T, ZsError>) {
    assert!(matches!(got, Err(ZsError::InvalidHandle(_))), "{got:?}");
}

/// Runs one input on pools that hold nothing, and frees what it left.
fn run(pools: &Pools, ops: Vec<Op>) {
    for pool in &pools.pools {
        assert_eq!(pool.zs_get_total_pages(), 0, "pool {} kept pages from the last input", pool.name());
    }
    let mut models: [Model; 2] = Default::default();
    let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
    let mut buf = vec![0u8; 4096];
    for op in ops.into_iter().take(96) {
        match op {
            Op::Malloc { pool, size, seed, raw } => {
                let p = usize::from(pool);
                if models[p].objects.len() >= 48 {
                    continue;
                }
                let data = bytes(seed, usize::from(size % 4096) + 1);
                let held = if raw {
                    Held::Raw(pools.pools[p].zs_malloc_copy_raw(&pools.keys[p], &data, gfp, 0).unwrap())
                } else {
                    Held::Handle(pools.pools[p].zs_malloc_copy(&data, gfp, 0).unwrap())
                };
                models[p].objects.push((held, data));
            }
            Op::Free { pool, pick: k } | Op::FreeDeferred { pool, pick: k } => {
                let Some((owner, at)) = pick(&models, pool, k) else { continue };
                let q = usize::from(pool);
                let deferred = matches!(op, Op::FreeDeferred { .. });
                let (held, data) = models[owner].objects.swap_remove(at);
                match held {
                    Held::Handle(h) if q == owner => {
                        if deferred {
                            pools.pools[q].zs_free_deferred(h).unwrap();
                        } else {
                            pools.pools[q].zs_free(h).unwrap();
                        }
                    }
                    Held::Handle(h) => {
                        // Across pools: refused, and the handle comes back.
                        let (e, h) = pools.pools[q].zs_replace(h, &[1], gfp, 0).unwrap_err();
                        assert!(matches!(e, ZsError::InvalidHandle(_)));
                        models[owner].objects.push((Held::Handle(h), data));
                    }
                    Held::Raw(w) => {
                        // The word on pool q with q's key: valid only on its owner.
                        let got = if deferred {
                            pools.pools[q].zs_free_deferred_raw(&pools.keys[q], w)
                        } else {
                            pools.pools[q].zs_free_raw(&pools.keys[q], w)
                        };
                        if q == owner {
                            got.unwrap();
                            models[owner].spent.push(w);
                            // Freed or queued: a second free is refused at the call.
                            invalid(pools.pools[q].zs_free_deferred_raw(&pools.keys[q], w));
                        } else {
                            // Another pool's word under that pool's key may
                            // name one of that pool's raw-held objects: then
                            // it is the key holder's own, and freed.
                            let hit = models[q].objects.iter().position(|(h, _)| matches!(h, Held::Raw(v) if *v == w));
                            match hit {
                                Some(i) => {
                                    got.unwrap();
                                    models[q].objects.swap_remove(i);
                                    models[q].spent.push(w);
                                }
                                None => invalid(got),
                            }
                            models[owner].objects.push((Held::Raw(w), data));
                        }
                    }
                }
            }
            Op::Read { pool, pick: k } => {
                let Some((owner, at)) = pick(&models, pool, k) else { continue };
                let q = usize::from(pool);
                let (held, want) = &models[owner].objects[at];
                // The owner's key on the other pool: refused whatever the word.
                let got = read(pools, q, owner, held, &mut buf);
                if q == owner {
                    assert_eq!(&buf[..got.unwrap()], &want[..]);
                } else {
                    invalid(got);
                }
            }
            Op::Write { pool, pick: k, seed, extra } => {
                let Some((owner, at)) = pick(&models, pool, k) else { continue };
                let q = usize::from(pool);
                let len = models[owner].objects[at].1.len();
                let data = bytes(seed, len);
                let too_long = bytes(seed, len + 1 + usize::from(extra % 8));
                let write = |d: &[u8]| match &models[owner].objects[at].0 {
                    Held::Handle(h) => pools.pools[q].zs_obj_write(h, d),
                    Held::Raw(w) => pools.pools[q].zs_obj_write_raw(&pools.keys[owner], *w, d),
                };
                if q == owner {
                    assert!(matches!(write(&too_long), Err(ZsError::TooLong { .. })));
                    write(&data).unwrap();
                    models[owner].objects[at].1 = data;
                } else {
                    invalid(write(&data));
                }
            }
            Op::Convert { pool, pick: k } => {
                let Some((owner, at)) = pick(&models, pool, k) else { continue };
                let q = usize::from(pool);
                let (held, data) = models[owner].objects.swap_remove(at);
                let held = match held {
                    Held::Handle(h) => match pools.pools[q].zs_handle_into_raw(&pools.keys[q], h) {
                        Ok(w) => {
                            assert_eq!(q, owner);
                            Held::Raw(w)
                        }
                        Err((e, h)) => {
                            assert!(q != owner && matches!(e, ZsError::InvalidHandle(_)));
                            Held::Handle(h)
                        }
                    },
                    Held::Raw(w) => match pools.pools[q].zs_handle_from_raw(&pools.keys[owner], w) {
                        Ok(h) => {
                            assert_eq!(q, owner);
                            models[owner].spent.push(w);
                            invalid(pools.pools[q].zs_handle_from_raw(&pools.keys[q], w));
                            Held::Handle(h)
                        }
                        Err(e) => {
                            assert!(q != owner && matches!(e, ZsError::InvalidHandle(_)));
                            Held::Raw(w)
                        }
                    },
                };
                models[owner].objects.push((held, data));
            }
            Op::RawCall { pool, key, word, stale } => {
                let (p, k) = (usize::from(pool), usize::from(key));
                let word = match (stale, models[p].spent.last()) {
                    (true, Some(&w)) => w,
                    _ => word,
                };
                // Valid exactly when the key is the pool's and the word
                // names one of its raw-held objects now.
                let live = k == p && models[p].objects.iter().any(|(h, _)| matches!(h, Held::Raw(v) if *v == word));
                let got = pools.pools[p].zs_obj_read_raw(&pools.keys[k], word, &mut buf);
                if live {
                    got.unwrap();
                } else {
                    invalid(got);
                    invalid(pools.pools[p].zs_free_raw(&pools.keys[k], word));
                    invalid(pools.pools[p].zs_obj_write_raw(&pools.keys[k], word, &[0]));
                }
            }
            Op::Compact { pool } => {
                pools.pools[usize::from(pool)].zs_compact();
            }
            Op::Flush => {
                for pool in &pools.pools {
                    pool.zs_free_deferred_flush();
                }
            }
        }
        // Ops cross pools: both are checked.
        check(pools, &models, &[0, 1]);
    }
    for pool in &pools.pools {
        pool.zs_free_deferred_flush();
        assert_eq!(pool.deferred_stats().invalid, 0, "an invalid handle reached the deferred queue");
    }
    check(pools, &models, &[0, 1]);
    // Back to empty for the next input: every object freed, every zspage
    // with it.
    for (p, model) in models.iter_mut().enumerate() {
        for (held, _) in model.objects.drain(..) {
            match held {
                Held::Handle(h) => pools.pools[p].zs_free(h).unwrap(),
                Held::Raw(w) => pools.pools[p].zs_free_raw(&pools.keys[p], w).unwrap(),
            }
        }
    }
    check(pools, &models, &[0, 1]);
    Report::new(&map()).check_invariants().unwrap();
}
