//! Pools on every page size Linux builds zsmalloc for (4, 16 and 64 KiB):
//! every class index a handle or a raw word can name reaches its own
//! class. On 16 and 64 KiB pages Linux's arithmetic gives 257 size
//! classes (`(PAGE_SIZE - 32) / (PAGE_SIZE >> 8)` rounded up, plus one),
//! so an 8-bit class field would send the top class's objects (every huge
//! object) to class 0's slots.

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Report};
use mmkit_zsmalloc::class::ClassTable;
use mmkit_zsmalloc::{ZsConfig, ZsError, ZsPool};
use std::sync::Arc;

fn gfp() -> Gfp {
    Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE
}

fn map(page_size: u64, bytes: u64) -> Arc<PageAllocator> {
    Arc::new(
        MemoryMapBuilder::new()
            .page_size(page_size)
            .add_pc_node(0, 0, bytes)
            .backing(Backing::RealMemory(HugePages::None))
            .build()
            .unwrap(),
    )
}

/// A payload size that lands in serving class `class` (header added).
fn size_in(table: &ClassTable, class: usize) -> usize {
    table.shape(class).size - mmkit_zsmalloc::class::ZS_HANDLE_SIZE
}

/// One object in every serving class, each with its own bytes; every
/// read gets its own object back, and every free frees its own.
fn every_class_keeps_its_objects(page_size: u64, chain: usize) {
    let mm = map(page_size, 64 << 20);
    let pool = ZsPool::with_chain_size("p", mm.clone(), chain).unwrap();
    let table = ClassTable::new(page_size as usize, chain);
    let serving: Vec<usize> = (0..table.nr_classes()).filter(|&c| table.serving(c) == c).collect();
    let mut held = Vec::new();
    for (n, &class) in serving.iter().enumerate() {
        let size = size_in(&table, class).max(1);
        assert_eq!(pool.zs_lookup_class_index(size), class);
        let bytes = vec![n as u8 ^ 0x5a; size];
        held.push((pool.zs_malloc_copy(&bytes, gfp(), 0).unwrap(), bytes));
    }
    let mut out = vec![0; page_size as usize];
    for (h, bytes) in &held {
        let n = pool.zs_obj_read(h, &mut out).unwrap();
        assert_eq!(&out[..n], &bytes[..], "page size {page_size}, chain {chain}: {:?}", h.id());
    }
    // Free the top class first: with an aliased class field its free
    // reaches class 0's object.
    while let Some((h, _)) = held.pop() {
        pool.zs_free(h).map_err(|(e, _)| e).unwrap();
        for (h, bytes) in &held {
            let n = pool.zs_obj_read(h, &mut out).unwrap();
            assert_eq!(&out[..n], &bytes[..], "page size {page_size}: {:?} survives the frees above it", h.id());
        }
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.zs_get_total_pages(), 0);
}

#[test]
fn every_class_of_4k_16k_and_64k_pages_keeps_its_objects() {
    for page_size in [4096, 16384, 65536] {
        for chain in [4, 8, 16] {
            every_class_keeps_its_objects(page_size, chain);
        }
    }
}

#[test]
fn linux_has_257_classes_on_16k_and_64k_pages() {
    assert_eq!(ClassTable::new(4096, 8).nr_classes(), 255);
    assert_eq!(ClassTable::new(16384, 8).nr_classes(), 257);
    assert_eq!(ClassTable::new(65536, 8).nr_classes(), 257);
}

/// The raw words and the deferred queue carry the class too.
#[test]
fn the_top_class_of_64k_pages_through_raw_words_and_the_deferred_queue() {
    let mm = map(65536, 64 << 20);
    let (pool, key) = ZsPool::with_raw_key("p", mm, ZsConfig::default()).unwrap();
    let small = pool.zs_malloc_copy_raw(&key, &[1; 10], gfp(), 0).unwrap();
    let huge = pool.zs_malloc_copy_raw(&key, &[2; 65536], gfp(), 0).unwrap();
    assert_eq!(pool.zs_lookup_class_index(65536), 256);
    let mut out = vec![0; 65536];
    assert_eq!(pool.zs_obj_read_raw(&key, huge, &mut out), Ok(65536));
    assert!(out.iter().all(|&b| b == 2));
    pool.zs_free_deferred_raw(&key, huge).unwrap();
    pool.zs_free_deferred_flush();
    let stats = pool.deferred_stats();
    assert_eq!((stats.drained, stats.invalid), (1, 0));
    assert_eq!(pool.zs_obj_read_raw(&key, small, &mut out), Ok(10), "the small object is still there");
    assert!(matches!(pool.zs_obj_read_raw(&key, huge, &mut out), Err(ZsError::InvalidHandle(_))));
    let h = pool.zs_malloc_copy(&[3; 65000], gfp(), 0).unwrap();
    let w = pool.zs_handle_into_raw(&key, h).unwrap();
    let h = pool.zs_handle_from_raw(&key, w).unwrap();
    pool.zs_free_deferred(h).unwrap();
    assert_eq!(pool.zs_free_deferred_raw_many(&key, &[small]), 0);
    pool.zs_free_deferred_flush();
    assert_eq!(pool.deferred_stats().invalid, 0);
    pool.check_invariants().unwrap();
    assert_eq!(pool.zs_get_total_pages(), 0);
}

/// Page sizes the pool's fields cannot serve are refused at creation with
/// a typed error, and nothing is held afterwards.
#[test]
fn pages_outside_4k_to_64k_are_refused_at_creation() {
    for page_size in [512u64, 2048, 128 << 10, 1 << 20] {
        let mm = map(page_size, 64 << 20);
        let free = Report::new(&mm).nr_free_pages();
        let got = ZsPool::zs_create_pool("p", mm.clone()).err();
        assert_eq!(got, Some(ZsError::UnsupportedPageSize(page_size as usize)));
        assert!(ZsPool::with_raw_key("p", mm.clone(), ZsConfig::default()).is_err());
        assert_eq!(Report::new(&mm).nr_free_pages(), free, "page size {page_size}: nothing taken");
    }
}
