//! Handles and raw words name their pool and their object for good: a
//! handle from another pool, or from a pool that was dropped, is refused
//! by every call that takes one, however many pools came and went since;
//! a raw word that is stale, spent, forged or of another key is refused by
//! every raw call, however many cycles its slot went through since (issue
//! 22, finding 3; issue 37, zsmalloc). Each refusal changes nothing.
//!
//! On the code before issue 37 (16-bit generations, 12-bit pool ids handed
//! out round-robin, `Handle: Copy`), the stale word after 65,536 cycles
//! and the handle of a pool dropped 4095 pools ago both reached a live
//! object, and a second `zs_free_deferred` of one handle returned `Ok`.

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator};
use mmkit_zsmalloc::{Handle, RawKey, ZsConfig, ZsError, ZsPool};
use std::sync::Arc;

fn gfp() -> Gfp {
    Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE
}

fn real_map(bytes: u64) -> Arc<PageAllocator> {
    Arc::new(MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).build().unwrap())
}

fn read(pool: &ZsPool, h: &Handle) -> Result<Vec<u8>, ZsError> {
    let mut out = vec![0; 4096];
    let n = pool.zs_obj_read(h, &mut out)?;
    out.truncate(n);
    Ok(out)
}

fn raw_pool(mm: &Arc<PageAllocator>, name: &str) -> (ZsPool, RawKey) {
    ZsPool::with_raw_key(name, mm.clone(), ZsConfig::default()).unwrap()
}

/// Every borrowing call refuses `foreign` on `pool`, and `pool`'s own
/// object `own` (holding `bytes`) is untouched afterwards; then the
/// consuming calls refuse it too and hand it back, which this returns.
fn refuses_everywhere(pool: &ZsPool, foreign: Handle, own: &Handle, bytes: &[u8]) -> Handle {
    let pages = pool.zs_get_total_pages();
    let invalid = ZsError::InvalidHandle(foreign.id());
    assert_eq!(pool.zs_obj_read(&foreign, &mut [0; 4096]), Err(invalid));
    assert_eq!(pool.zs_obj_read_with(&foreign, &mut [0; 4096], |b| b.len()), Err(invalid));
    assert_eq!(pool.zs_obj_write(&foreign, &[0xaa; 8]), Err(invalid));
    let (err, foreign) = pool.zs_replace(foreign, &[1; 8], gfp(), 0).unwrap_err();
    assert_eq!(err, invalid, "a replace of a foreign handle stores nothing");
    let (err, foreign) = pool.zs_free_deferred(foreign).unwrap_err();
    assert_eq!(err, invalid, "a deferred free of a foreign handle queues nothing");
    let (err, foreign) = pool.zs_free(foreign).unwrap_err();
    assert_eq!(err, invalid, "a free of a foreign handle frees nothing");
    pool.zs_free_deferred_flush();
    assert_eq!(pool.deferred_stats().invalid, 0, "nothing foreign was queued");
    assert_eq!(read(pool, own).unwrap(), bytes, "the pool's own object is untouched");
    assert_eq!(pool.zs_get_total_pages(), pages);
    pool.check_invariants().unwrap();
    foreign
}

#[test]
fn a_handle_from_another_pool_is_refused_by_every_call() {
    let mm = real_map(32 << 20);
    let a = ZsPool::zs_create_pool("a", mm.clone()).unwrap();
    let b = ZsPool::zs_create_pool("b", mm.clone()).unwrap();
    // Same size, same class, same first slot: only the pool tells them apart.
    let ha = a.zs_malloc_copy(&[1; 100], gfp(), 0).unwrap();
    let hb = b.zs_malloc_copy(&[2; 100], gfp(), 0).unwrap();
    assert_ne!(ha.id(), hb.id(), "two pools must not hand out the same handle");
    let ha2 = a.zs_malloc_copy(&[1; 100], gfp(), 0).unwrap();
    let ha2 = refuses_everywhere(&b, ha2, &hb, &[2; 100]);
    let id = ha.id();
    let (err, ha) = b.zs_free(ha).unwrap_err();
    assert_eq!(err, ZsError::InvalidHandle(id));
    assert_eq!(a.check_invariants(), Ok(()));
    b.zs_free(hb).unwrap();
    // Handed back, not dropped: their own pool frees them, and nothing of
    // it is left (a refusal that ate the handle leaked the object until
    // the pool went).
    a.zs_free(ha).unwrap();
    a.zs_free(ha2).unwrap();
    assert_eq!(a.zs_get_total_pages(), 0);
}

#[test]
fn a_handle_of_a_dropped_pool_is_refused_by_every_newer_pool() {
    let mm = real_map(32 << 20);
    let old = ZsPool::zs_create_pool("old", mm.clone()).unwrap();
    let stale = old.zs_malloc_copy(&[3; 64], gfp(), 0).unwrap();
    let stale2 = old.zs_malloc_copy(&[3; 64], gfp(), 0).unwrap();
    drop(old);
    // More pools than the old 12-bit id space held: the old id came back
    // to a new pool after 4095 of them, and the stale handle freed its
    // object. Pool ids are never reused now.
    for round in 0..4100 {
        let new = ZsPool::zs_create_pool("new", mm.clone()).unwrap();
        let own = new.zs_malloc_copy(&[4; 64], gfp(), 0).unwrap();
        assert_ne!(new.id(), stale.id().pool());
        assert_eq!(new.zs_obj_read(&stale, &mut [0; 4096]), Err(ZsError::InvalidHandle(stale.id())), "round {round}");
        assert_eq!(read(&new, &own).unwrap(), vec![4; 64]);
        new.zs_free(own).unwrap();
    }
    let new = ZsPool::zs_create_pool("new", mm.clone()).unwrap();
    let own = new.zs_malloc_copy(&[4; 64], gfp(), 0).unwrap();
    drop(refuses_everywhere(&new, stale2, &own, &[4; 64]));
    let id = stale.id();
    assert_eq!(new.zs_free(stale).unwrap_err().0, ZsError::InvalidHandle(id));
    new.zs_free(own).unwrap();
}

#[test]
fn a_stale_raw_word_is_refused_after_65536_cycles_of_its_slot() {
    let mm = real_map(16 << 20);
    let (pool, key) = raw_pool(&mm, "raw");
    let stale = pool.zs_malloc_copy_raw(&key, &[1; 100], gfp(), 0).unwrap();
    pool.zs_free_raw(&key, stale).unwrap();
    // The slot goes round 65,536 times: a 16-bit generation is back where
    // it started, and the next object would carry the stale word's value.
    for _ in 0..65_536 {
        let w = pool.zs_malloc_copy_raw(&key, &[2; 100], gfp(), 0).unwrap();
        pool.zs_free_raw(&key, w).unwrap();
    }
    let live = pool.zs_malloc_copy_raw(&key, &[7; 100], gfp(), 0).unwrap();
    assert_ne!(live, stale, "the slot's generation went on, it did not wrap");
    assert!(matches!(pool.zs_free_raw(&key, stale), Err(ZsError::InvalidHandle(_))));
    assert!(matches!(pool.zs_free_deferred_raw(&key, stale), Err(ZsError::InvalidHandle(_))));
    assert!(matches!(pool.zs_obj_write_raw(&key, stale, &[0; 8]), Err(ZsError::InvalidHandle(_))));
    assert!(matches!(pool.zs_handle_from_raw(&key, stale), Err(ZsError::InvalidHandle(_))));
    let mut out = [0; 4096];
    assert_eq!(pool.zs_obj_read_raw(&key, live, &mut out), Ok(100));
    assert_eq!(out[..100], [7; 100], "the live object is untouched");
    pool.zs_free_raw(&key, live).unwrap();
    pool.check_invariants().unwrap();
}

#[test]
fn a_deferred_free_of_a_word_freed_or_queued_already_is_refused_at_the_call() {
    let mm = real_map(16 << 20);
    let (pool, key) = raw_pool(&mm, "raw");
    let w = pool.zs_malloc_copy_raw(&key, &[1; 300], gfp(), 0).unwrap();
    pool.zs_free_deferred_raw(&key, w).unwrap();
    assert!(matches!(pool.zs_free_deferred_raw(&key, w), Err(ZsError::InvalidHandle(_))), "queued already");
    assert!(matches!(pool.zs_free_raw(&key, w), Err(ZsError::InvalidHandle(_))), "queued already");
    let v = pool.zs_malloc_copy_raw(&key, &[2; 300], gfp(), 0).unwrap();
    pool.zs_free_raw(&key, v).unwrap();
    assert!(matches!(pool.zs_free_deferred_raw(&key, v), Err(ZsError::InvalidHandle(_))), "freed already");
    pool.zs_free_deferred_flush();
    let stats = pool.deferred_stats();
    assert_eq!((stats.queued + stats.fallback, stats.invalid), (1, 0));
    assert_eq!(pool.zs_get_total_pages(), 0);
    pool.check_invariants().unwrap();
}

/// The refusals of a deferred free happen at the call, not at the drain:
/// every refused call returns the error itself, queues nothing (the
/// queue's counters do not move) and leaves the object as it was; the
/// drain then finds nothing invalid. A word of a slot that was freed and
/// handed out again (same slot, next generation) is refused too, and the
/// slot's new object is untouched.
#[test]
fn a_deferred_free_is_refused_at_the_call_for_a_word_queued_freed_or_stale() {
    let mm = real_map(16 << 20);
    let (pool, key) = raw_pool(&mm, "raw");
    let queued_so_far = |pool: &ZsPool| {
        let s = pool.deferred_stats();
        s.queued + s.fallback
    };
    // Twice the same word: the second is refused before anything is queued.
    let w = pool.zs_malloc_copy_raw(&key, &[1; 300], gfp(), 0).unwrap();
    pool.zs_free_deferred_raw(&key, w).unwrap();
    assert_eq!(queued_so_far(&pool), 1);
    assert!(matches!(pool.zs_free_deferred_raw(&key, w), Err(ZsError::InvalidHandle(_))), "queued already");
    assert!(matches!(pool.zs_handle_from_raw(&key, w), Err(ZsError::InvalidHandle(_))), "queued already");
    assert!(matches!(pool.zs_obj_read_raw(&key, w, &mut [0; 4096]), Err(ZsError::InvalidHandle(_))), "queued");
    assert_eq!(queued_so_far(&pool), 1, "nothing queued by a refused call");
    // After zs_free_raw.
    let v = pool.zs_malloc_copy_raw(&key, &[2; 300], gfp(), 0).unwrap();
    pool.zs_free_raw(&key, v).unwrap();
    assert!(matches!(pool.zs_free_deferred_raw(&key, v), Err(ZsError::InvalidHandle(_))), "freed already");
    assert_eq!(queued_so_far(&pool), 1);
    // After the word went back to a handle: the handle still owns the object.
    let u = pool.zs_malloc_copy_raw(&key, &[3; 300], gfp(), 0).unwrap();
    let h = pool.zs_handle_from_raw(&key, u).unwrap();
    assert!(matches!(pool.zs_free_deferred_raw(&key, u), Err(ZsError::InvalidHandle(_))), "taken back");
    assert_eq!(read(&pool, &h).unwrap(), vec![3; 300]);
    pool.zs_free(h).unwrap();
    // Stale: the queued object is drained, its slot handed out again.
    pool.zs_free_deferred_flush();
    let slot_of = |word: u64| word & ((1 << 28) - 1);
    let mut fresh = Vec::new();
    let reused = loop {
        let x = pool.zs_malloc_copy_raw(&key, &[4; 300], gfp(), 0).unwrap();
        if slot_of(x) == slot_of(w) {
            break x;
        }
        fresh.push(x);
        assert!(fresh.len() < 64, "the freed slot is handed out again");
    };
    assert_ne!(reused, w, "same slot, next generation");
    assert!(matches!(pool.zs_free_deferred_raw(&key, w), Err(ZsError::InvalidHandle(_))), "stale");
    assert!(matches!(pool.zs_free_raw(&key, w), Err(ZsError::InvalidHandle(_))), "stale");
    let mut out = [0; 4096];
    assert_eq!(pool.zs_obj_read_raw(&key, reused, &mut out), Ok(300));
    assert_eq!(out[..300], [4; 300]);
    assert_eq!(queued_so_far(&pool), 1);
    for x in fresh.into_iter().chain([reused]) {
        pool.zs_free_deferred_raw(&key, x).unwrap();
    }
    pool.zs_free_deferred_flush();
    let stats = pool.deferred_stats();
    assert_eq!(stats.invalid, 0, "nothing refused at the drain");
    assert_eq!(stats.queued, stats.drained);
    assert_eq!(pool.zs_get_total_pages(), 0);
    pool.check_invariants().unwrap();
}

/// A run of deferred frees refuses each bad word at the call as one call
/// would (queued or freed already, twice in the run, stale, of another
/// pool, forged) and queues every other one, across more words than one
/// reservation takes; another pool's key is refused for the whole run.
#[test]
fn a_run_of_deferred_frees_refuses_each_bad_word_and_queues_the_rest() {
    let mm = real_map(16 << 20);
    let (pool, key) = raw_pool(&mm, "raw");
    let (other, other_key) = raw_pool(&mm, "other");
    let mut words: Vec<u64> =
        (0..200).map(|i| pool.zs_malloc_copy_raw(&key, &[i as u8; 300], gfp(), 0).unwrap()).collect();
    let queued = words.pop().unwrap();
    pool.zs_free_deferred_raw(&key, queued).unwrap();
    let freed = words.pop().unwrap();
    pool.zs_free_raw(&key, freed).unwrap();
    let foreign = other.zs_malloc_copy_raw(&other_key, &[9; 300], gfp(), 0).unwrap();
    // Another pool's key: nothing is taken, every word still reads.
    assert_eq!(pool.zs_free_deferred_raw_many(&other_key, &words), words.len());
    assert_eq!(pool.zs_obj_read_raw(&key, words[7], &mut [0; 4096]), Ok(300));
    let mut run = words.clone();
    run.extend([queued, freed, words[3], foreign, 0, u64::MAX]);
    let before = pool.deferred_stats().queued;
    assert_eq!(pool.zs_free_deferred_raw_many(&key, &run), 6);
    assert_eq!(pool.deferred_stats().queued - before, words.len() as u64);
    for &w in &words {
        assert!(matches!(pool.zs_obj_read_raw(&key, w, &mut [0; 4096]), Err(ZsError::InvalidHandle(_))), "queued");
    }
    assert_eq!(other.zs_obj_read_raw(&other_key, foreign, &mut [0; 4096]), Ok(300));
    pool.zs_free_deferred_flush();
    let stats = pool.deferred_stats();
    assert_eq!((stats.invalid, stats.drained), (0, words.len() as u64 + 1));
    assert_eq!(pool.zs_get_total_pages(), 0);
    pool.check_invariants().unwrap();
    other.zs_free_raw(&other_key, foreign).unwrap();
}

/// A run queued to be checked when drained (`_drain_checked`, zram's
/// release path): the call touches no object, and the drain frees exactly
/// the objects the words still name as raw-held, refusing (counting
/// `invalid`) a word freed or replaced since, queued twice, stale, or
/// taken back into a handle (which keeps its object); another pool's key
/// and words that cannot name an object are refused at the call.
#[test]
fn a_run_checked_at_the_drain_frees_exactly_the_words_that_still_name_their_objects() {
    let mm = real_map(16 << 20);
    let (pool, key) = raw_pool(&mm, "raw");
    let (other, other_key) = raw_pool(&mm, "other");
    let mut words: Vec<u64> =
        (0..1200).map(|i| pool.zs_malloc_copy_raw(&key, &[i as u8; 300], gfp(), 0).unwrap()).collect();
    let foreign = other.zs_malloc_copy_raw(&other_key, &[9; 300], gfp(), 0).unwrap();
    assert_eq!(pool.zs_free_deferred_raw_many_drain_checked(&other_key, &words), words.len());
    assert_eq!(pool.zs_free_deferred_raw_many_drain_checked(&key, &[0, u64::MAX]), 2);
    assert_eq!(pool.deferred_stats().queued, 0, "nothing queued by the refusals");
    // Words that will name nothing by the drain, each queued in the run.
    let freed = words.pop().unwrap();
    let replaced = words.pop().unwrap();
    let taken_back = words.pop().unwrap();
    let twice = words[5];
    let mut run = words.clone();
    run.extend([freed, replaced, taken_back, twice, foreign]);
    assert_eq!(pool.zs_free_deferred_raw_many_drain_checked(&key, &run), 0, "the call looks at no object");
    // Until the drain the objects are still the words'.
    assert_eq!(pool.zs_obj_read_raw(&key, words[7], &mut [0; 4096]), Ok(300));
    pool.zs_free_raw(&key, freed).unwrap();
    let new = pool.zs_replace_raw(&key, replaced, &[7; 310], gfp(), 0).unwrap();
    let handle = pool.zs_handle_from_raw(&key, taken_back).unwrap();
    pool.zs_free_deferred_flush();
    let stats = pool.deferred_stats();
    assert_eq!(stats.drained, words.len() as u64);
    assert_eq!(stats.invalid, 5, "freed, replaced, taken back, queued twice, another pool's");
    assert_eq!(read(&pool, &handle).unwrap(), vec![(1200 - 3) as u8; 300], "the handle keeps its object");
    assert_eq!(pool.zs_obj_read_raw(&key, new, &mut [0; 4096]), Ok(310));
    assert_eq!(other.zs_obj_read_raw(&other_key, foreign, &mut [0; 4096]), Ok(300), "another pool is untouched");
    for &w in &words {
        assert!(matches!(pool.zs_obj_read_raw(&key, w, &mut [0; 4096]), Err(ZsError::InvalidHandle(_))), "drained");
    }
    // A handle queued in a raw-keyed pool leaves its handle at the call.
    pool.zs_free_deferred(handle).unwrap();
    pool.zs_free_raw(&key, new).unwrap();
    pool.zs_free_deferred_flush();
    assert_eq!(pool.deferred_stats().invalid, 5);
    assert_eq!(pool.zs_get_total_pages(), 0);
    pool.check_invariants().unwrap();
    other.zs_free_raw(&other_key, foreign).unwrap();
}

#[test]
fn a_word_reaches_only_objects_held_as_words_under_the_pools_key() {
    let mm = real_map(16 << 20);
    let (a, key_a) = raw_pool(&mm, "a");
    let (b, key_b) = raw_pool(&mm, "b");
    let wa = a.zs_malloc_copy_raw(&key_a, &[1; 100], gfp(), 0).unwrap();
    let wb = b.zs_malloc_copy_raw(&key_b, &[2; 100], gfp(), 0).unwrap();
    // Another pool's key is refused, even with a word that names a live
    // raw-held object of this pool.
    assert!(matches!(b.zs_free_raw(&key_a, wb), Err(ZsError::InvalidHandle(_))));
    assert!(matches!(b.zs_obj_read_raw(&key_a, wb, &mut [0; 4096]), Err(ZsError::InvalidHandle(_))));
    assert!(matches!(b.zs_malloc_copy_raw(&key_a, &[0; 8], gfp(), 0), Err(ZsError::InvalidHandle(_))));
    // An object held by a handle is out of every word's reach: the word
    // that would name it (same class, slot and generation as a raw-held
    // object of its slot) is refused.
    let h = a.zs_handle_from_raw(&key_a, wa).unwrap();
    assert!(matches!(a.zs_obj_write_raw(&key_a, wa, &[9; 8]), Err(ZsError::InvalidHandle(_))));
    assert!(matches!(a.zs_free_raw(&key_a, wa), Err(ZsError::InvalidHandle(_))));
    assert_eq!(read(&a, &h).unwrap(), vec![1; 100]);
    // A handle goes to a word and back; the spent word is refused.
    let w2 = a.zs_handle_into_raw(&key_a, h).unwrap();
    let h = a.zs_handle_from_raw(&key_a, w2).unwrap();
    assert!(matches!(a.zs_handle_from_raw(&key_a, w2), Err(ZsError::InvalidHandle(_))), "spent");
    // A pool without a key takes no word, and its handles cannot become one.
    let plain = ZsPool::zs_create_pool("plain", mm.clone()).unwrap();
    let hp = plain.zs_malloc_copy(&[3; 100], gfp(), 0).unwrap();
    let (_, hp) = plain.zs_handle_into_raw(&key_a, hp).unwrap_err();
    let (_, h) = b.zs_handle_into_raw(&key_b, h).unwrap_err();
    // Forged words: every bit pattern near a live one.
    for forged in [0, 1, u64::MAX, wb ^ 1, wb ^ (1 << 30), wb ^ (1 << 40), wb ^ (1 << 63)] {
        assert!(matches!(b.zs_free_raw(&key_b, forged), Err(ZsError::InvalidHandle(_))), "{forged:#x}");
    }
    let mut out = [0; 4096];
    assert_eq!(b.zs_obj_read_raw(&key_b, wb, &mut out), Ok(100));
    assert_eq!(out[..100], [2; 100]);
    a.zs_free(h).unwrap();
    b.zs_free_raw(&key_b, wb).unwrap();
    plain.zs_free(hp).unwrap();
    for pool in [&a, &b, &plain] {
        assert_eq!(pool.zs_get_total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn many_pools_keep_distinct_handles() {
    let mm = real_map(64 << 20);
    // 15: a map issues one owner key per pool, PageOwner::MAX at once.
    let pools: Vec<ZsPool> = (0..15).map(|i| ZsPool::zs_create_pool(&format!("p{i}"), mm.clone()).unwrap()).collect();
    let handles: Vec<Handle> = pools.iter().map(|p| p.zs_malloc_copy(&[7; 40], gfp(), 0).unwrap()).collect();
    for (i, p) in pools.iter().enumerate() {
        for (j, h) in handles.iter().enumerate() {
            if i != j {
                assert_eq!(p.zs_obj_write(h, &[0]), Err(ZsError::InvalidHandle(h.id())));
            }
        }
    }
    for (p, h) in pools.iter().zip(handles) {
        p.zs_free(h).unwrap();
        p.check_invariants().unwrap();
    }
}

#[test]
fn a_replace_of_a_word_that_names_nothing_stores_nothing() {
    let mm = real_map(16 << 20);
    let (pool, key) = raw_pool(&mm, "raw");
    let w = pool.zs_malloc_copy_raw(&key, &[1; 100], gfp(), 0).unwrap();
    let keep = pool.zs_malloc_copy_raw(&key, &[2; 100], gfp(), 0).unwrap();
    pool.zs_free_raw(&key, w).unwrap();
    let pages = pool.zs_get_total_pages();
    // Same class and another class for the new object: both refused.
    for len in [100, 3000] {
        assert!(matches!(pool.zs_replace_raw(&key, w, &vec![3; len], gfp(), 0), Err(ZsError::InvalidHandle(_))));
        assert_eq!(pool.zs_get_total_pages(), pages, "the store was undone");
        pool.check_invariants().unwrap();
    }
    let mut out = [0; 4096];
    assert_eq!(pool.zs_obj_read_raw(&key, keep, &mut out), Ok(100));
    let moved = pool.zs_replace_raw(&key, keep, &[4; 3000], gfp(), 0).unwrap();
    assert!(matches!(pool.zs_obj_read_raw(&key, keep, &mut out), Err(ZsError::InvalidHandle(_))), "spent");
    assert_eq!(pool.zs_obj_read_raw(&key, moved, &mut out), Ok(3000));
    pool.zs_free_raw(&key, moved).unwrap();
    assert_eq!(pool.zs_get_total_pages(), 0);
}
