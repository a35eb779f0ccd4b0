//! zsmalloc's behaviour case by case: objects of every kind of size, the
//! bad inputs (each a typed error that changes nothing), compaction keeping
//! contents and handles, deferred free, teardown returning every page.

use mmkit::Cpus;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Report};
use mmkit_zsmalloc::{Handle, ZsError, ZsPool};
use std::sync::Arc;

fn gfp() -> Gfp {
    Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE
}

fn real_map(bytes: u64) -> Arc<PageAllocator> {
    Arc::new(MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).build().unwrap())
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) >> 3) as u8).collect()
}

fn read(pool: &ZsPool, h: &Handle) -> Vec<u8> {
    let mut out = vec![0; 4096];
    let n = pool.zs_obj_read(h, &mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn objects_of_every_size_keep_their_bytes_even_across_pages() {
    let mm = real_map(64 << 20);
    let pool = ZsPool::zs_create_pool("t", mm.clone()).unwrap();
    let sizes: Vec<usize> = (1..=4096).step_by(37).chain([32, 33, 3000, 3624, 3625, 4095, 4096]).collect();
    let handles: Vec<(Handle, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let data = pattern(i as u64, size);
            // Every other object through the one-lock store.
            let h = if i % 2 == 0 {
                let h = pool.zs_malloc(size, gfp(), 0).unwrap();
                pool.zs_obj_write(&h, &data).unwrap();
                h
            } else {
                pool.zs_malloc_copy(&data, gfp(), 0).unwrap()
            };
            (h, data)
        })
        .collect();
    pool.check_invariants().unwrap();
    assert!(matches!(pool.zs_malloc_copy(&[], gfp(), 0), Err(ZsError::BadSize { .. })));
    assert!(matches!(pool.zs_malloc_copy(&[1; 4097], gfp(), 0), Err(ZsError::BadSize { .. })));
    for (h, data) in &handles {
        assert_eq!(&read(&pool, h), data);
        // The closure form sees the same bytes, in place or through the copy.
        let mut local = vec![0; 4096];
        assert!(pool.zs_obj_read_with(h, &mut local, |bytes| bytes == &data[..]).unwrap());
    }
    for (h, _) in handles {
        pool.zs_free(h).unwrap();
    }
    assert_eq!(pool.zs_get_total_pages(), 0, "every zspage emptied and went back");
    pool.check_invariants().unwrap();
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let mm = real_map(16 << 20);
    let pool = ZsPool::zs_create_pool("t", mm.clone()).unwrap();
    assert_eq!(pool.zs_malloc(0, gfp(), 0), Err(ZsError::BadSize { size: 0, max: 4096 }));
    assert_eq!(pool.zs_malloc(4097, gfp(), 0), Err(ZsError::BadSize { size: 4097, max: 4096 }));
    let h = pool.zs_malloc(100, gfp(), 0).unwrap();
    pool.zs_obj_write(&h, &[1; 100]).unwrap();
    let pages = pool.zs_get_total_pages();
    assert_eq!(pool.zs_obj_write(&h, &[2; 101]), Err(ZsError::TooLong { len: 101, size: 100 }));
    assert_eq!(pool.zs_obj_read(&h, &mut [0; 99]), Err(ZsError::BufferTooSmall { need: 100, got: 99 }));
    assert_eq!(read(&pool, &h), vec![1; 100], "the object is untouched");
    assert_eq!(pool.zs_get_total_pages(), pages);
    pool.zs_free(h).unwrap();
    pool.check_invariants().unwrap();
    assert!(matches!(ZsPool::with_chain_size("t", mm.clone(), 3), Err(ZsError::BadChainSize(3))));
    let meta = Arc::new(MemoryMapBuilder::with_memory(16 << 20).build().unwrap());
    assert!(matches!(ZsPool::zs_create_pool("t", meta), Err(ZsError::NoRealMemory)));
}

#[test]
fn dropping_the_pool_returns_every_page() {
    let mm = real_map(32 << 20);
    Cpus::new(&mm).drain_all_pages();
    let start = Report::new(&mm).nr_free_pages();
    {
        let pool = ZsPool::zs_create_pool("t", mm.clone()).unwrap();
        for i in 0..3000usize {
            let h = pool.zs_malloc(50 + i % 4000, gfp(), 0).unwrap();
            if i % 3 == 0 {
                pool.zs_free_deferred(h).unwrap();
            }
        }
        assert!(pool.zs_get_total_pages() > 0);
    }
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), start);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn compaction_frees_pages_and_keeps_every_object_reachable() {
    let mm = real_map(64 << 20);
    let pool = ZsPool::zs_create_pool("t", mm.clone()).unwrap();
    let mut live = Vec::new();
    for i in 0..6000u64 {
        let size = [200, 700, 1500, 2500][i as usize % 4];
        let h = pool.zs_malloc(size, gfp(), 0).unwrap();
        let data = pattern(i, size);
        pool.zs_obj_write(&h, &data).unwrap();
        live.push((h, data));
    }
    // Free two objects in three, across all four sizes: every zspage is
    // left sparse.
    let mut kept = Vec::new();
    for (i, entry) in live.into_iter().enumerate() {
        if i % 3 == 0 {
            kept.push(entry);
        } else {
            pool.zs_free(entry.0).unwrap();
        }
    }
    let before = pool.zs_get_total_pages();
    let freed = pool.zs_compact();
    assert!(freed > 0);
    assert_eq!(pool.zs_get_total_pages(), before - freed);
    assert_eq!(pool.zs_pool_stats().pages_compacted, freed);
    let stored: u64 = kept.iter().map(|(_, d)| d.len() as u64 + 8).sum();
    assert!(pool.zs_get_total_pages() * 4096 < stored * 6 / 5, "compacted to within 20 % of the bytes stored");
    pool.check_invariants().unwrap();
    for (h, data) in &kept {
        assert_eq!(&read(&pool, h), data, "handle {h} after compaction");
    }
    assert_eq!(pool.zs_compact(), 0, "nothing left to gain");
    for (h, _) in kept {
        pool.zs_free(h).unwrap();
    }
    assert_eq!(pool.zs_get_total_pages(), 0);
}

#[test]
fn deferred_frees_happen_by_the_flush() {
    let mm = real_map(32 << 20);
    let pool = ZsPool::zs_create_pool("t", mm.clone()).unwrap();
    let handles: Vec<Handle> = (0..100).map(|_| pool.zs_malloc(300, gfp(), 0).unwrap()).collect();
    for h in handles {
        pool.zs_free_deferred(h).unwrap();
    }
    pool.zs_free_deferred_flush();
    let stats = pool.deferred_stats();
    assert_eq!(stats.queued + stats.fallback, 100);
    assert_eq!(stats.drained + stats.fallback, 100);
    assert_eq!(stats.invalid, 0);
    assert_eq!(pool.zs_get_total_pages(), 0);
    pool.check_invariants().unwrap();
}

/// Without a flush, the worker frees what was queued: a few handles after
/// its idle period, a burst once half the series' queue (64 MiB of handles:
/// 16,384 on 4 KiB pages) waits in full batches, while the burst goes on.
#[test]
fn the_worker_drains_a_small_queue_when_idle_and_a_burst_past_half_the_series_queue() {
    let wait_for = |pool: &ZsPool, drained: u64| {
        let start = std::time::Instant::now();
        while pool.deferred_stats().drained < drained {
            assert!(start.elapsed() < std::time::Duration::from_secs(30), "{:?}", pool.deferred_stats());
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    let mm = real_map(64 << 20);
    let pool = ZsPool::zs_create_pool("t", mm).unwrap();
    for _ in 0..100 {
        pool.zs_free_deferred(pool.zs_malloc(300, gfp(), 0).unwrap()).unwrap();
    }
    wait_for(&pool, 100);
    let burst = 40 * 512;
    let handles: Vec<Handle> = (0..burst).map(|_| pool.zs_malloc(300, gfp(), 0).unwrap()).collect();
    for h in handles {
        pool.zs_free_deferred(h).unwrap();
    }
    wait_for(&pool, 100 + burst as u64);
    assert_eq!(pool.deferred_stats().fallback, 0);
    assert_eq!(pool.zs_get_total_pages(), 0);
    pool.check_invariants().unwrap();
}

#[test]
fn the_classes_table_has_linux_columns_and_counts() {
    let mm = real_map(16 << 20);
    let pool = ZsPool::zs_create_pool("t", mm).unwrap();
    let h = pool.zs_malloc(500, gfp(), 0).unwrap();
    let table = pool.classes_table();
    let header = table.lines().next().unwrap();
    for column in [
        "class",
        "size",
        "10%",
        "99%",
        "100%",
        "obj_allocated",
        "obj_used",
        "pages_used",
        "pages_per_zspage",
        "freeable",
    ] {
        assert!(header.split_whitespace().any(|c| c == column), "{column} missing from {header}");
    }
    assert_eq!(table.lines().filter(|l| l.trim_start().starts_with(char::is_numeric)).count(), 119);
    let class = pool.zs_lookup_class_index(500);
    let row = table.lines().find(|l| l.split_whitespace().next() == Some(&class.to_string())).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    // One object of the 8 a 512-byte zspage holds is 12 %: Linux's group
    // for 10..19 %, the "20%" column.
    assert_eq!(cols[3], "1", "one zspage in the 20% group: {row}");
    assert_eq!(cols[14], "1", "one object used: {row}");
    assert_eq!(pool.zs_huge_class_size(), 3625);
    pool.zs_free(h).unwrap();
}

#[test]
fn running_out_of_pages_is_a_typed_error_and_the_pool_stays_whole() {
    let mm = real_map(4 << 20);
    let pool = ZsPool::zs_create_pool("t", mm.clone()).unwrap();
    let mut held = Vec::new();
    let err = loop {
        match pool.zs_malloc(3000, gfp(), 0) {
            Ok(h) => {
                pool.zs_obj_write(&h, &pattern(held.len() as u64, 3000)).unwrap();
                held.push(h);
            }
            Err(e) => break e,
        }
        assert!(held.len() < 10_000, "a 4 MiB map cannot hold this many");
    };
    assert!(matches!(err, ZsError::NoMemory(Some(_))), "{err:?}");
    let pages = pool.zs_get_total_pages();
    assert_eq!(pool.zs_malloc(3000, gfp(), 0).unwrap_err(), err, "still out, nothing leaked");
    assert_eq!(pool.zs_get_total_pages(), pages);
    pool.check_invariants().unwrap();
    for (i, h) in held.iter().enumerate() {
        assert_eq!(read(&pool, h), pattern(i as u64, 3000));
    }
    for h in held {
        pool.zs_free(h).unwrap();
    }
    assert_eq!(pool.zs_get_total_pages(), 0);
}

#[test]
fn both_deferred_layouts_free_everything() {
    use mmkit_zsmalloc::{DeferredLayout, ZsConfig};
    for deferred in [DeferredLayout::PerCpu, DeferredLayout::PerPool] {
        let mm = real_map(32 << 20);
        let pool = ZsPool::with_config("t", mm.clone(), ZsConfig { deferred, ..ZsConfig::default() }).unwrap();
        let mut parts: Vec<Vec<Handle>> = (0..4).map(|_| Vec::new()).collect();
        for i in 0..2000 {
            parts[i / 500].push(pool.zs_malloc(100 + i % 3000, gfp(), 0).unwrap());
        }
        std::thread::scope(|s| {
            for part in parts {
                let pool = &pool;
                s.spawn(move || part.into_iter().for_each(|h| pool.zs_free_deferred(h).unwrap()));
            }
        });
        pool.zs_free_deferred_flush();
        assert_eq!(pool.zs_get_total_pages(), 0, "{deferred:?}");
        let stats = pool.deferred_stats();
        assert_eq!(stats.queued + stats.fallback, 2000);
        assert_eq!(stats.invalid, 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn a_zspage_takes_its_pages_as_its_objects_reach_them() {
    let mm = real_map(16 << 20);
    let pool = ZsPool::zs_create_pool("t", mm).unwrap();
    let table = mmkit_zsmalloc::class::ClassTable::new(4096, 8);
    // 1100 bytes plus the header: a class whose zspages chain several pages.
    let shape = table.shape(table.class_for(1100 + mmkit_zsmalloc::class::ZS_HANDLE_SIZE));
    assert!(shape.pages_per_zspage > 1, "{shape:?}");
    let mut handles = Vec::new();
    for n in 1..=2 * shape.objs_per_zspage {
        handles.push(pool.zs_malloc_copy(&pattern(n as u64, 1100), gfp(), 0).unwrap());
        // Full zspages have their whole chain; the newest has the pages its
        // objects end in, and no more.
        let full = (n - 1) / shape.objs_per_zspage;
        let in_newest = n - full * shape.objs_per_zspage;
        let expected = full * shape.pages_per_zspage + (in_newest * shape.size).div_ceil(4096);
        assert_eq!(pool.zs_get_total_pages(), expected as u64, "after {n} objects");
        pool.check_invariants().unwrap();
    }
    // Freed objects are reused before the chain grows again.
    let last = handles.pop().unwrap();
    pool.zs_free(last).unwrap();
    let pages = pool.zs_get_total_pages();
    handles.push(pool.zs_malloc_copy(&pattern(99, 1100), gfp(), 0).unwrap());
    assert_eq!(pool.zs_get_total_pages(), pages);
    for (i, h) in handles.iter().enumerate().take(5) {
        assert_eq!(read(&pool, h), pattern(i as u64 + 1, 1100));
    }
    for h in handles {
        pool.zs_free(h).unwrap();
    }
    assert_eq!(pool.zs_get_total_pages(), 0);
    pool.check_invariants().unwrap();
}

/// Reads nest in each other's closures up to a fixed depth (the thread's
/// record of the classes it reads is a fixed array, so entering a read
/// allocates nothing); one more is a typed error, and the reads around it
/// go on.
#[test]
fn reads_nested_past_the_limit_get_an_error_and_the_outer_reads_finish() {
    let mm = real_map(16 << 20);
    let pool = ZsPool::zs_create_pool("nest", mm.clone()).unwrap();
    // One object of its own class per level, so no level re-enters a class.
    let handles: Vec<Handle> =
        (0..20).map(|i| pool.zs_malloc_copy(&pattern(i, 40 + 200 * i as usize), gfp(), 0).unwrap()).collect();
    fn nest(pool: &ZsPool, handles: &[Handle], depth: usize) -> Result<usize, ZsError> {
        let Some((first, rest)) = handles.split_first() else { return Ok(depth) };
        pool.zs_obj_read_with(first, &mut [0; 4096], |_| nest(pool, rest, depth + 1))?
    }
    assert_eq!(nest(&pool, &handles, 0), Err(ZsError::ReadsNestedTooDeep { max: 16 }));
    assert_eq!(nest(&pool, &handles[..16], 0), Ok(16), "16 nested reads are fine");
    // The record unwound with the closures: a write from outside works.
    pool.zs_obj_write(&handles[0], &[7; 10]).unwrap();
    for h in handles {
        pool.zs_free(h).unwrap();
    }
    drop(pool);
    Report::new(&mm).check_invariants().unwrap();
}

/// A thread-local's destructor may use a pool while the thread exits,
/// after the pool's own thread-locals are gone (a `SwapRegion` touched from
/// a destructor does this): reads and frees that empty a zspage still work.
#[test]
fn a_thread_local_destructor_may_read_and_free() {
    struct LastUse(Option<(Arc<ZsPool>, Vec<Handle>)>);
    impl Drop for LastUse {
        fn drop(&mut self) {
            let (pool, handles) = self.0.take().unwrap();
            for h in handles {
                assert_eq!(read(&pool, &h), pattern(5, 300));
                pool.zs_free(h).unwrap();
            }
        }
    }
    std::thread_local! {
        static LAST: std::cell::RefCell<LastUse> = const { std::cell::RefCell::new(LastUse(None)) };
    }
    let mm = real_map(16 << 20);
    let pool = Arc::new(ZsPool::zs_create_pool("tls", mm.clone()).unwrap());
    let worker = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            // This thread-local first, then the pool's: destructors run in
            // the reverse order, so the pool's are gone when this one runs.
            LAST.with(|last| assert!(last.borrow().0.is_none()));
            let warm = pool.zs_malloc_copy(&pattern(1, 300), gfp(), 0).unwrap();
            assert_eq!(read(&pool, &warm), pattern(1, 300));
            pool.zs_free(warm).unwrap();
            let handles: Vec<Handle> =
                (0..64).map(|_| pool.zs_malloc_copy(&pattern(5, 300), gfp(), 0).unwrap()).collect();
            LAST.with(|last| last.borrow_mut().0 = Some((pool.clone(), handles)));
        })
    };
    worker.join().expect("the destructor's reads and frees do not panic");
    let pool = Arc::try_unwrap(pool).ok().unwrap();
    assert_eq!(pool.zs_get_total_pages(), 0, "every zspage emptied and freed");
    drop(pool);
    Report::new(&mm).check_invariants().unwrap();
}
