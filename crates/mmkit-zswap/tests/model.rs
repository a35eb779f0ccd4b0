//! zswap against a model: random swap-outs, stores, loads (keeping and
//! exclusive), invalidations, writebacks, shrinks, parameter changes and
//! foreign entries, checked against a model of what each slot must read
//! back, with `check_invariants` after every step. Entries are owned
//! tokens: the model holds them, and a freed one is gone from it.
//!
//! Properties: a slot reads back the last page stored or swapped out to
//! it, whether it sits in zswap or was written back or rejected to the
//! file; a bad call (foreign entry, wrong page size)
//! changes no statistic and no slot; the counters agree with the tree.

use mmkit::{Backing, HugePages, MemoryMapBuilder};
use mmkit_zswap::{KeepEntry, SwapFile, SwpEntry, Zswap, ZswapError, ZswapParams, PAGE_SIZE};
use proptest::prelude::*;
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Op {
    SwapOut(u8, u64),
    Store(usize, u8, u64),
    LoadKeep(usize),
    LoadExclusive(usize),
    Free(usize),
    Writeback(usize),
    Shrink(usize),
    MaxPool(u32),
    Compressor(bool),
    Foreign(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, any::<u64>()).prop_map(|(k, s)| Op::SwapOut(k, s)),
        2 => (any::<usize>(), 0u8..4, any::<u64>()).prop_map(|(i, k, s)| Op::Store(i, k, s)),
        2 => any::<usize>().prop_map(Op::LoadKeep),
        1 => any::<usize>().prop_map(Op::LoadExclusive),
        2 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::Writeback),
        1 => (1usize..20).prop_map(Op::Shrink),
        1 => prop_oneof![Just(1u32), Just(20), Just(100)].prop_map(Op::MaxPool),
        1 => any::<bool>().prop_map(Op::Compressor),
        1 => any::<usize>().prop_map(Op::Foreign),
    ]
}

/// A page of kind `kind`: compressible text-like, same-filled, random, or
/// half random.
fn page(kind: u8, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match kind {
        0 => (0..PAGE_SIZE).map(|i| b"zswap stores pages "[(i + seed as usize) % 19]).collect(),
        1 => (seed % 7).to_ne_bytes().repeat(PAGE_SIZE / 8),
        2 => (0..PAGE_SIZE).map(|_| next() as u8).collect(),
        _ => (0..PAGE_SIZE).map(|i| if i < PAGE_SIZE / 2 { next() as u8 } else { (i / 64) as u8 }).collect(),
    }
}

fn zswap() -> Zswap {
    let mm = MemoryMapBuilder::with_memory(8 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
    Zswap::new(Arc::new(mm), SwapFile::create_temp(256).unwrap(), ZswapParams::default()).unwrap()
}

fn pick(slots: &[(SwpEntry, Vec<u8>)], i: usize) -> Option<usize> {
    (!slots.is_empty()).then(|| i % slots.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn zswap_matches_the_model(ops in prop::collection::vec(op(), 1..120)) {
        let z = zswap();
        let other = zswap();
        // Every entry held, with what its slot must read back.
        let mut slots: Vec<(SwpEntry, Vec<u8>)> = Vec::new();
        let mut buf = vec![0u8; PAGE_SIZE];
        for op in ops {
            match op {
                Op::SwapOut(kind, seed) => {
                    let data = page(kind, seed);
                    match z.swap_out(&data) {
                        Ok(e) => slots.push((e, data)),
                        Err(ZswapError::SwapFull) => prop_assert_eq!(slots.len(), 256),
                        Err(e) => prop_assert!(false, "swap_out: {e}"),
                    }
                }
                Op::Store(i, kind, seed) => if let Some(at) = pick(&slots, i) {
                    let data = page(kind, seed);
                    let e = &slots[at].0;
                    match z.zswap_store(e, &data) {
                        Ok(()) => {}
                        Err(ZswapError::Rejected(_)) => {
                            prop_assert!(!z.contains(e), "a reject drops the stale entry");
                            z.swap_writepage(e, &data).unwrap();
                        }
                        Err(e) => prop_assert!(false, "store: {e}"),
                    }
                    slots[at].1 = data;
                },
                Op::LoadKeep(i) => if let Some(at) = pick(&slots, i) {
                    z.swap_in(&slots[at].0, &mut buf, KeepEntry::Keep).unwrap();
                    prop_assert_eq!(&buf, &slots[at].1);
                },
                Op::LoadExclusive(i) => if let Some(at) = pick(&slots, i) {
                    // The page's owner now holds the only copy: it frees the slot.
                    let (e, want) = slots.swap_remove(at);
                    z.swap_in(&e, &mut buf, KeepEntry::Drop).unwrap();
                    prop_assert_eq!(&buf, &want);
                    prop_assert!(!z.contains(&e));
                    z.swap_free(e).map_err(|(e, _)| e).unwrap();
                },
                Op::Free(i) => if let Some(at) = pick(&slots, i) {
                    // A second free of the entry does not compile: it is consumed.
                    let (e, _) = slots.swap_remove(at);
                    z.swap_free(e).map_err(|(e, _)| e).unwrap();
                },
                Op::Writeback(i) => if let Some(at) = pick(&slots, i) {
                    let e = &slots[at].0;
                    let was = z.contains(e);
                    match z.zswap_writeback_entry(e) {
                        Ok(()) => prop_assert!(was && !z.contains(e)),
                        Err(ZswapError::NoEntry(_)) => prop_assert!(!was),
                        Err(e) => prop_assert!(false, "writeback: {e}"),
                    }
                },
                Op::Shrink(n) => { z.zswap_shrink(n); }
                Op::MaxPool(p) => z.param_set("max_pool_percent", &p.to_string()).unwrap(),
                Op::Compressor(zstd) => z.param_set("compressor", if zstd { "zstd" } else { "lz4" }).unwrap(),
                Op::Foreign(i) => {
                    let before = z.stats();
                    let foreign = other.alloc_swap_slot().unwrap();
                    prop_assert!(matches!(z.zswap_store(&foreign, &page(0, 1)), Err(ZswapError::ForeignEntry(_))));
                    prop_assert!(matches!(z.zswap_load(&foreign, &mut buf), Err(ZswapError::ForeignEntry(_))));
                    prop_assert!(matches!(z.zswap_load_keep(&foreign, &mut buf), Err(ZswapError::ForeignEntry(_))));
                    prop_assert!(matches!(z.zswap_invalidate(&foreign), Err(ZswapError::ForeignEntry(_))));
                    let Err((ZswapError::ForeignEntry(_), foreign)) = z.swap_free(foreign) else {
                        panic!("a foreign entry is refused and given back");
                    };
                    if let Some(at) = pick(&slots, i) {
                        let e = &slots[at].0;
                        prop_assert!(matches!(z.zswap_store(e, &[0u8; 100]), Err(ZswapError::BadPageSize(100))));
                        prop_assert!(matches!(z.zswap_load(e, &mut [0u8; 4097]), Err(ZswapError::BadPageSize(4097))));
                    }
                    prop_assert_eq!(z.stats(), before);
                    other.swap_free(foreign).map_err(|(e, _)| e).unwrap();
                }
            }
            if let Err(why) = z.check_invariants() {
                prop_assert!(false, "invariant: {why}");
            }
        }
        for (e, want) in &slots {
            z.swap_in(e, &mut buf, KeepEntry::Keep).unwrap();
            prop_assert_eq!(&buf, want);
        }
        let n = slots.len();
        let entries: Vec<SwpEntry> = slots.into_iter().map(|(e, _)| e).collect();
        let (freed, foreign) = z.swap_free_batch(entries, mmkit_zswap::ReleaseMode::Deferred);
        prop_assert_eq!((freed, foreign.len()), (n, 0));
        z.flush_deferred();
        prop_assert_eq!(z.stats().stored_pages, 0);
        prop_assert_eq!(z.pool().zs_get_total_pages(), 0);
        prop_assert_eq!(z.swap_file().used_slots(), 0);
    }
}
