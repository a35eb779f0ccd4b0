//! zswap's Linux semantics one by one: same-filled pages, each reject and
//! its counter (with injected compressor, decompressor, allocation and
//! entry failures), the pool limit and its accept threshold, the
//! shrinker's second chance, writeback to a full or failing swap file,
//! the swap file's lock, and the debugfs and parameter names.

use mmkit::{Backing, HugePages, MemoryMapBuilder};
use mmkit_zswap::{
    Injected, KeepEntry, Reject, SwapFile, SwpEntry, Zswap, ZswapError, ZswapParams, PAGE_SIZE, PARAM_NAMES,
};
use std::sync::Arc;

fn zswap_with(mem: u64, slots: u64, params: ZswapParams) -> Zswap {
    let mm = MemoryMapBuilder::with_memory(mem).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
    Zswap::new(Arc::new(mm), SwapFile::create_temp(slots).unwrap(), params).unwrap()
}

fn text_page(seed: usize) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| b"the quick brown fox jumps over the lazy dog "[(i * 7 + seed) % 44] ^ (seed as u8))
        .collect()
}

fn random_page(seed: u64) -> Vec<u8> {
    mmkit_testkit::pages::noise_page(seed, PAGE_SIZE)
}

#[test]
fn same_filled_pages_take_no_pool_memory() {
    let z = zswap_with(16 << 20, 64, ZswapParams::default());
    let e = z.alloc_swap_slot().unwrap();
    z.zswap_store(&e, &[0u8; PAGE_SIZE]).unwrap();
    let s = z.stats();
    assert_eq!((s.stored_pages, s.same_filled_pages, s.pool_total_size), (1, 1, 0));
    let mut back = vec![1u8; PAGE_SIZE];
    assert!(z.zswap_load_keep(&e, &mut back).unwrap());
    assert_eq!(back, vec![0u8; PAGE_SIZE]);
    assert!(z.zswap_invalidate(&e).unwrap());
    assert!(!z.zswap_invalidate(&e).unwrap(), "nothing left to invalidate");
    assert_eq!(z.stats().stored_pages, 0);
}

#[test]
fn every_reject_is_counted_and_the_page_goes_to_the_swap_file() {
    let z = zswap_with(16 << 20, 64, ZswapParams::default());
    let cases = [
        (Some(Injected::CompressFail), Reject::CompressFail),
        (Some(Injected::AllocFail), Reject::AllocFail),
        (Some(Injected::KmemcacheFail), Reject::KmemcacheFail),
        (None, Reject::CompressPoor),
    ];
    for (k, (inject, why)) in cases.into_iter().enumerate() {
        let page = if inject.is_none() { random_page(k as u64 + 1) } else { text_page(k) };
        if let Some(what) = inject {
            z.inject(what, 1);
        }
        let e = z.alloc_swap_slot().unwrap();
        assert!(matches!(z.zswap_store(&e, &page), Err(ZswapError::Rejected(r)) if r == why), "{why:?}");
        // swap_out does what a pager does with a reject: the file takes it.
        if let Some(what) = inject {
            z.inject(what, 1);
        }
        let e2 = z.swap_out(&page).unwrap();
        assert!(!z.contains(&e2));
        let mut back = vec![0u8; PAGE_SIZE];
        z.swap_in(&e2, &mut back, KeepEntry::Keep).unwrap();
        assert_eq!(back, page);
        z.swap_free(e).unwrap();
        z.swap_free(e2).unwrap();
    }
    let s = z.stats();
    assert_eq!(
        (s.reject_compress_fail, s.reject_alloc_fail, s.reject_kmemcache_fail, s.reject_compress_poor),
        (2, 2, 2, 2)
    );
    z.param_set("enabled", "N").unwrap();
    let e = z.alloc_swap_slot().unwrap();
    assert!(matches!(z.zswap_store(&e, &text_page(1)), Err(ZswapError::Rejected(Reject::Disabled))));
    z.check_invariants().unwrap();
}

#[test]
fn a_failed_decompression_keeps_the_entry() {
    let z = zswap_with(16 << 20, 64, ZswapParams::default());
    let e = z.alloc_swap_slot().unwrap();
    let page = text_page(3);
    z.zswap_store(&e, &page).unwrap();
    let mut back = vec![0u8; PAGE_SIZE];
    z.inject(Injected::DecompressFail, 2);
    assert!(matches!(z.zswap_load(&e, &mut back), Err(ZswapError::DecompressFail(_))));
    assert!(matches!(z.zswap_load_keep(&e, &mut back), Err(ZswapError::DecompressFail(_))));
    assert_eq!(z.stats().decompress_fail, 2);
    assert!(z.contains(&e));
    z.check_invariants().unwrap();
    assert!(z.zswap_load(&e, &mut back).unwrap());
    assert_eq!(back, page);
    assert!(!z.contains(&e), "an exclusive load drops the entry");
}

#[test]
fn the_pool_limit_refuses_until_below_the_accept_threshold() {
    // 8 MiB of memory at 5 %: the pool may hold about 100 pages.
    let params = ZswapParams { max_pool_percent: 5, shrinker_enabled: false, ..ZswapParams::default() };
    let z = zswap_with(8 << 20, 4096, params);
    let max_pages = z.pool().allocator().zones().iter().map(|zone| zone.managed_pages()).sum::<u64>() * 5 / 100;
    let mut stored = Vec::new();
    let mut k = 0;
    loop {
        let e = z.alloc_swap_slot().unwrap();
        match z.zswap_store(&e, &random_page(k + 1)[..PAGE_SIZE / 2].repeat(2)) {
            Ok(()) => stored.push(e),
            Err(ZswapError::Rejected(Reject::PoolLimit)) => break,
            Err(other) => panic!("{other}"),
        }
        k += 1;
        assert!(k < 10_000, "the limit never came");
    }
    assert!(z.pool().zs_get_total_pages() >= max_pages);
    assert_eq!(z.stats().pool_limit_hit, 1);
    // Freeing a little is not enough: still refused until below 90 %.
    z.swap_free(stored.pop().unwrap()).unwrap();
    z.flush_deferred();
    let e = z.alloc_swap_slot().unwrap();
    assert!(matches!(z.zswap_store(&e, &text_page(1)), Err(ZswapError::Rejected(Reject::PoolLimit))));
    while z.pool().zs_get_total_pages() * 100 > max_pages * 85 {
        z.swap_free(stored.pop().unwrap()).unwrap();
        z.flush_deferred();
    }
    z.zswap_store(&e, &text_page(1)).unwrap();
    z.check_invariants().unwrap();
}

#[test]
fn the_shrinker_gives_referenced_entries_a_second_chance_and_writes_back_the_rest() {
    let z = zswap_with(16 << 20, 64, ZswapParams::default());
    let entries: Vec<SwpEntry> = (0..8).map(|k| z.swap_out(&text_page(k)).unwrap()).collect();
    // New entries are referenced: the first pass only clears the bits.
    assert_eq!(z.zswap_shrink(8), 0);
    let mut back = vec![0u8; PAGE_SIZE];
    z.zswap_load_keep(&entries[0], &mut back).unwrap(); // entry 0 referenced again
    assert_eq!(z.zswap_shrink(8), 7);
    assert!(z.contains(&entries[0]));
    assert_eq!(z.stats().written_back_pages, 7);
    for (k, e) in entries.iter().enumerate() {
        z.swap_in(e, &mut back, KeepEntry::Keep).unwrap();
        assert_eq!(back, text_page(k), "entry {k} reads back from the file");
    }
    // A failing swap file: the writeback is refused and counted, the entry stays.
    z.swap_file().fail_next_writes(1);
    z.zswap_shrink(1);
    assert!(matches!(z.zswap_writeback_entry(&entries[0]), Ok(()) | Err(ZswapError::WritebackFail(_))));
    z.swap_file().fail_next_writes(1);
    let e = z.swap_out(&text_page(40)).unwrap();
    assert!(matches!(z.zswap_writeback_entry(&e), Err(ZswapError::WritebackFail(_))));
    assert!(z.contains(&e));
    assert!(z.stats().reject_reclaim_fail >= 1);
    z.param_set("shrinker_enabled", "N").unwrap();
    assert_eq!(z.zswap_shrink(100), 0);
    z.check_invariants().unwrap();
}

#[test]
fn a_full_swap_file_is_a_typed_error_that_changes_nothing() {
    let z = zswap_with(16 << 20, 4, ZswapParams::default());
    let slots: Vec<SwpEntry> = (0..4).map(|k| z.swap_out(&text_page(k)).unwrap()).collect();
    let before = z.stats();
    assert!(matches!(z.swap_out(&text_page(9)), Err(ZswapError::SwapFull)));
    assert!(matches!(z.alloc_swap_slot(), Err(ZswapError::SwapFull)));
    assert_eq!(z.stats(), before);
    // Every entry written back: the file holds them all.
    for e in &slots {
        z.zswap_writeback_entry(e).unwrap();
    }
    let mut back = vec![0u8; PAGE_SIZE];
    for (k, e) in slots.iter().enumerate() {
        z.swap_in(e, &mut back, KeepEntry::Drop).unwrap();
        assert_eq!(back, text_page(k));
    }
    assert_eq!(z.stats().stored_pages, 0);
    z.check_invariants().unwrap();
}

#[test]
fn a_second_owner_of_the_swap_file_is_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("swap");
    let first = SwapFile::open(&path, 16).unwrap();
    assert!(matches!(SwapFile::open(&path, 16), Err(ZswapError::Busy)));
    drop(first);
    SwapFile::open(&path, 16).unwrap();
}

#[test]
fn parameters_and_statistics_carry_linux_names() {
    let z = zswap_with(16 << 20, 16, ZswapParams::default());
    assert_eq!(
        PARAM_NAMES,
        ["accept_threshold_percent", "compressor", "enabled", "max_pool_percent", "shrinker_enabled"]
    );
    assert_eq!(z.param_show("max_pool_percent").as_deref(), Some("20"));
    assert_eq!(z.param_show("accept_threshold_percent").as_deref(), Some("90"));
    assert!(z.param_set("max_pool_percent", "-1").is_err());
    assert_eq!(z.params(), ZswapParams::default());
    // A compressor switch leaves old entries readable.
    let e = z.swap_out(&text_page(5)).unwrap();
    z.param_set("compressor", "zstd:3").unwrap();
    let f = z.swap_out(&text_page(6)).unwrap();
    let mut back = vec![0u8; PAGE_SIZE];
    z.swap_in(&e, &mut back, KeepEntry::Keep).unwrap();
    assert_eq!(back, text_page(5));
    z.swap_in(&f, &mut back, KeepEntry::Keep).unwrap();
    assert_eq!(back, text_page(6));
    let text = z.stats().debugfs();
    for name in [
        "pool_total_size",
        "stored_pages",
        "written_back_pages",
        "pool_limit_hit",
        "reject_compress_fail",
        "reject_compress_poor",
        "reject_alloc_fail",
        "reject_reclaim_fail",
        "reject_kmemcache_fail",
        "decompress_fail",
    ] {
        assert!(text.lines().any(|l| l.starts_with(&format!("{name} "))), "{name} missing from\n{text}");
    }
    assert!(text.contains("stored_pages 2\n"));
}
