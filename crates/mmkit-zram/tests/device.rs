//! The zram device case by case: what each kind of page costs and reads
//! back as, partial pages, discard and write-zeroes, bad input, the memory
//! limit, the free notification, and statistics in the kernel's formats.

use mmkit::{Backing, HugePages, MemoryMapBuilder, PageAllocator};
use mmkit_zram::{Algorithm, Zram, ZramConfig, ZramError, PAGE_SIZE};
use std::sync::Arc;

fn real_map(bytes: u64) -> Arc<PageAllocator> {
    Arc::new(MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).build().unwrap())
}

fn device(disksize: u64, algorithm: Algorithm) -> Zram {
    Zram::new(real_map(64 << 20), ZramConfig { disksize, algorithm, mem_limit: 0, ..ZramConfig::default() }).unwrap()
}

mod common;
use common::noise;

/// Pages of this test binary: real, compressible data.
fn real_pages(n: usize) -> Vec<Vec<u8>> {
    common::exe_pages(8, n)
}

#[test]
fn every_kind_of_page_reads_back_and_is_accounted_as_the_kernel_does() {
    for algorithm in [Algorithm::Lz4, Algorithm::Zstd { level: 3 }] {
        let zram = device(1 << 20, algorithm);
        let pages = real_pages(4);
        let same = [0xabu8, 0xcd, 0, 1, 2, 3, 4, 5].repeat(PAGE_SIZE / 8);
        let contents = [pages[0].clone(), pages[1].clone(), vec![0; PAGE_SIZE], same.clone(), noise(7)];
        for (i, page) in contents.iter().enumerate() {
            zram.open().unwrap().write((i * PAGE_SIZE) as u64, page).unwrap();
        }
        for (i, page) in contents.iter().enumerate() {
            let mut back = vec![0; PAGE_SIZE];
            zram.open().unwrap().read((i * PAGE_SIZE) as u64, &mut back).unwrap();
            assert_eq!(&back, page, "{algorithm:?} page {i}");
        }
        let s = zram.mm_stat_values();
        assert_eq!(s.orig_data_size, 5 * PAGE_SIZE as u64);
        assert_eq!(s.same_pages, 2, "zeroes and a repeated word");
        assert_eq!(s.huge_pages, 1, "noise is stored raw");
        assert!(s.compr_data_size < 3 * PAGE_SIZE as u64 && s.compr_data_size >= PAGE_SIZE as u64);
        assert!(s.mem_used_total > 0 && s.mem_used_max >= s.mem_used_total);
        let never = &mut [1u8; 100];
        zram.open().unwrap().read(900_000, never).unwrap();
        assert_eq!(never, &[0; 100], "never-written bytes read as zero");
        assert_eq!(zram.mm_stat().split_whitespace().count(), 9);
    }
}

#[test]
fn partial_pages_are_read_modified_and_written() {
    let zram = device(1 << 20, Algorithm::Lz4);
    let page = real_pages(1).remove(0);
    zram.open().unwrap().write(0, &page).unwrap();
    zram.open().unwrap().write(100, b"patch").unwrap();
    zram.open().unwrap().write(PAGE_SIZE as u64 - 2, b"span").unwrap(); // across two pages
    let mut back = vec![0; 2 * PAGE_SIZE];
    zram.open().unwrap().read(0, &mut back).unwrap();
    let mut want = page.clone();
    want[100..105].copy_from_slice(b"patch");
    want[PAGE_SIZE - 2..].copy_from_slice(b"sp");
    assert_eq!(&back[..PAGE_SIZE], &want[..]);
    assert_eq!(&back[PAGE_SIZE..PAGE_SIZE + 2], b"an");
    assert!(back[PAGE_SIZE + 2..].iter().all(|&b| b == 0));
}

#[test]
fn discard_frees_whole_pages_only_and_write_zeroes_zeroes_everything() {
    let zram = device(1 << 20, Algorithm::Lz4);
    let pages = real_pages(4);
    for (i, page) in pages.iter().enumerate() {
        zram.open().unwrap().write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    // From the middle of page 0 to the middle of page 2: only page 1 goes.
    zram.open().unwrap().discard(PAGE_SIZE as u64 / 2, 2 * PAGE_SIZE as u64).unwrap();
    let mut back = vec![0; PAGE_SIZE];
    zram.open().unwrap().read(0, &mut back).unwrap();
    assert_eq!(back, pages[0], "partial page kept");
    zram.open().unwrap().read(PAGE_SIZE as u64, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    assert_eq!(zram.mm_stat_values().orig_data_size, 3 * PAGE_SIZE as u64);
    // write-zeroes over the same span zeroes the partial pages too.
    zram.open().unwrap().write_zeroes(PAGE_SIZE as u64 / 2, 2 * PAGE_SIZE as u64).unwrap();
    let mut all = vec![1; 3 * PAGE_SIZE];
    zram.open().unwrap().read(0, &mut all).unwrap();
    assert_eq!(&all[..PAGE_SIZE / 2], &pages[0][..PAGE_SIZE / 2]);
    assert!(all[PAGE_SIZE / 2..2 * PAGE_SIZE + PAGE_SIZE / 2].iter().all(|&b| b == 0));
    assert_eq!(&all[2 * PAGE_SIZE + PAGE_SIZE / 2..], &pages[2][PAGE_SIZE / 2..]);
    assert!(zram.io_stat().split_whitespace().nth(3).unwrap().parse::<u64>().unwrap() >= 1, "discards counted");
}

#[test]
fn out_of_range_io_is_a_typed_error_that_changes_nothing() {
    let zram = device(1 << 20, Algorithm::Lz4);
    zram.open().unwrap().write(0, &real_pages(1)[0]).unwrap();
    let before = zram.mm_stat();
    let size = 1 << 20;
    let err = ZramError::OutOfRange { offset: size - 1, len: 2, size };
    assert_eq!(zram.open().unwrap().write(size - 1, b"xy"), Err(err.clone()));
    assert_eq!(zram.open().unwrap().read(size - 1, &mut [0; 2]), Err(err));
    assert!(zram.open().unwrap().discard(u64::MAX, 2).is_err());
    assert!(zram.open().unwrap().write_zeroes(size, 1).is_err());
    assert_eq!(zram.mm_stat(), before);
    assert_eq!(zram.io_stat().split_whitespace().nth(2), Some("4"), "invalid_io counts them");
    zram.open().unwrap().slot_free_notify(usize::MAX);
}

#[test]
fn the_memory_limit_refuses_writes_and_keeps_old_contents() {
    let zram = Zram::new(
        real_map(64 << 20),
        ZramConfig {
            disksize: 4 << 20,
            algorithm: Algorithm::Lz4,
            mem_limit: 64 * PAGE_SIZE as u64,
            ..ZramConfig::default()
        },
    )
    .unwrap();
    let mut written = 0;
    let err = loop {
        match zram.open().unwrap().write((written * PAGE_SIZE) as u64, &noise(written as u64 + 1)) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 1024);
    };
    assert_eq!(err, ZramError::NoSpace);
    // The slot table's first chunk (4096 slots of 16 bytes, 16 pages) counts
    // against the limit with the pool.
    assert!((44..=54).contains(&written), "{written} pages fit a 64-page limit less the table's 16");
    assert!(zram.mm_stat_values().mem_used_total <= 64 * PAGE_SIZE as u64, "never past the limit");
    // Overwriting an existing page needs new memory first: refused, and the
    // page keeps what it had.
    assert_eq!(zram.open().unwrap().write(0, &noise(999)), Err(ZramError::NoSpace));
    let mut back = vec![0; PAGE_SIZE];
    zram.open().unwrap().read(0, &mut back).unwrap();
    assert_eq!(back, noise(1));
    assert_eq!(zram.io_stat().split_whitespace().nth(1), Some("2"), "failed_writes");
}

/// Every limit from one page to a few chunks: writes (new chunks, new
/// zspages, overwrites, same-filled pages) go on until one is refused;
/// `mem_used_total` never passes the limit, and the refused write leaves
/// `mm_stat` as it was (no chunk, no object behind).
#[test]
fn the_memory_limit_is_never_passed_and_a_refused_write_leaves_nothing() {
    // The case: a 64 KiB limit, which the first chunk alone (64 KiB
    // of slots) and the directory would pass.
    for limit in [1u64, 2, 3, 16, 17, 20, 24, 33, 64, 100, 300].map(|pages| pages * PAGE_SIZE as u64) {
        let zram = Zram::new(
            real_map(64 << 20),
            ZramConfig { disksize: 48 << 20, algorithm: Algorithm::Lz4, mem_limit: limit, ..ZramConfig::default() },
        )
        .unwrap();
        let mut index = 0u64;
        loop {
            let before = zram.mm_stat_values();
            // Pages spread over the chunks (each 16 MiB of device), some
            // overwritten, some same-filled.
            let at = (index * 7919 % (48 << 8)) * PAGE_SIZE as u64;
            let page = if index % 5 == 4 { vec![7u8; PAGE_SIZE] } else { noise(index + 1) };
            let result = zram.open().unwrap().write(at, &page);
            let after = zram.mm_stat_values();
            assert!(after.mem_used_total <= limit, "limit {limit}: {} used", after.mem_used_total);
            assert!(after.mem_used_max <= limit, "limit {limit}: max {}", after.mem_used_max);
            match result {
                Ok(()) => {}
                Err(ZramError::NoSpace) => {
                    assert_eq!(after.mem_used_total, before.mem_used_total, "limit {limit}: left behind");
                    assert_eq!(after.orig_data_size, before.orig_data_size, "limit {limit}");
                    break;
                }
                Err(e) => panic!("limit {limit}: {e}"),
            }
            index += 1;
            assert!(index < 100_000, "limit {limit} never reached");
        }
    }
}

#[test]
fn free_notify_defers_the_free() {
    let zram = device(1 << 20, Algorithm::Lz4);
    zram.open().unwrap().write(0, &real_pages(1)[0]).unwrap();
    zram.open().unwrap().slot_free_notify(0);
    zram.pool().unwrap().zs_free_deferred_flush();
    assert_eq!(zram.mm_stat_values().orig_data_size, 0);
    assert_eq!(zram.pool().unwrap().zs_get_total_pages(), 0);
    assert_eq!(zram.io_stat().split_whitespace().nth(3), Some("1"));
    assert!(zram.debug_stat().starts_with("version: 1\n"));
}

#[test]
fn the_synchronous_free_notify_frees_before_it_returns() {
    let zram = device(1 << 20, Algorithm::Lz4);
    let io = zram.open().unwrap();
    for (i, page) in real_pages(3).iter().enumerate() {
        io.write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    let pool = zram.pool().unwrap();
    for index in 0..3 {
        io.slot_free_notify_sync(index);
    }
    // No flush: the objects are gone and their pages back already.
    assert_eq!((pool.zs_get_total_pages(), pool.deferred_stats().queued), (0, 0));
    assert_eq!(zram.mm_stat_values().orig_data_size, 0);
    assert_eq!(zram.io_stat().split_whitespace().nth(3), Some("3"), "notify_free counts them");
    // Out of range: counted as invalid I/O, nothing freed.
    io.slot_free_notify_sync(usize::MAX);
    assert_eq!(zram.io_stat().split_whitespace().nth(2), Some("1"), "invalid_io");
}

#[test]
fn a_range_notification_frees_each_slot_as_one_notification_would() {
    let zram = device(1 << 20, Algorithm::Lz4);
    let io = zram.open().unwrap();
    let pages = real_pages(3);
    for (i, page) in pages.iter().enumerate() {
        io.write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    io.write(3 * PAGE_SIZE as u64, &[7; PAGE_SIZE]).unwrap();
    io.write(5 * PAGE_SIZE as u64, &noise(5)).unwrap();
    let before = zram.mm_stat_values();
    assert_eq!((before.same_pages, before.huge_pages, before.orig_data_size), (1, 1, 5 * PAGE_SIZE as u64));
    let pool = zram.pool().unwrap();
    // Slots 1 ..= 299 of a 256-page device: a compressed page, a
    // same-filled one, a huge one, empty slots, then 44 past the end.
    io.slot_free_notify_range(1, 299);
    pool.zs_free_deferred_flush();
    let after = zram.mm_stat_values();
    assert_eq!((after.same_pages, after.huge_pages, after.orig_data_size), (0, 0, PAGE_SIZE as u64));
    let io_stat: Vec<String> = zram.io_stat().split_whitespace().map(str::to_string).collect();
    assert_eq!((io_stat[2].as_str(), io_stat[3].as_str()), ("44", "255"), "invalid_io, notify_free");
    let mut back = vec![0; PAGE_SIZE];
    io.read(0, &mut back).unwrap();
    assert_eq!(back, pages[0], "the slot before the range keeps its page");
    io.read(2 * PAGE_SIZE as u64, &mut back).unwrap();
    assert_eq!(back, vec![0; PAGE_SIZE], "a freed slot reads as zeroes");
    assert_eq!(after.compr_data_size, zram.mm_stat_values().compr_data_size);
    // The synchronous form frees before it returns; a range of nothing,
    // or wholly past the device, frees nothing.
    io.slot_free_notify_range_sync(0, 1);
    assert_eq!((pool.zs_get_total_pages(), zram.mm_stat_values().orig_data_size), (0, 0));
    io.slot_free_notify_range(7, 0);
    io.slot_free_notify_range(usize::MAX - 1, usize::MAX);
    assert_eq!(zram.io_stat().split_whitespace().nth(2), Some("45"), "one more invalid index");
    assert_eq!(pool.deferred_stats().invalid, 0);
}

/// A range across chunks of the slot table (4096 slots each), one of them
/// never written (a hole), starting and ending inside chunks: the slots in
/// the range are freed and counted, the hole is skipped, the slot just past
/// the range keeps its page.
#[test]
fn a_range_notification_walks_chunks_and_skips_a_hole() {
    let chunk = 4096;
    let zram = device(3 * chunk as u64 * PAGE_SIZE as u64, Algorithm::Lz4);
    let io = zram.open().unwrap();
    let pages = real_pages(3);
    for (index, page) in [10, 2 * chunk + 4, 2 * chunk + 5].into_iter().zip(&pages) {
        io.write((index * PAGE_SIZE) as u64, page).unwrap();
    }
    let pool = zram.pool().unwrap();
    io.slot_free_notify_range(5, 2 * chunk);
    pool.zs_free_deferred_flush();
    assert_eq!(zram.mm_stat_values().orig_data_size, PAGE_SIZE as u64, "two of three pages freed");
    let io_stat: Vec<String> = zram.io_stat().split_whitespace().map(str::to_string).collect();
    assert_eq!(io_stat[3], (chunk - 5 + 5).to_string(), "notify_free: the written chunks' slots in the range");
    let mut back = vec![0; PAGE_SIZE];
    io.read(((2 * chunk + 5) * PAGE_SIZE) as u64, &mut back).unwrap();
    assert_eq!(back, pages[2], "the slot past the range keeps its page");
    io.read(((2 * chunk + 4) * PAGE_SIZE) as u64, &mut back).unwrap();
    assert_eq!(back, vec![0; PAGE_SIZE]);
    assert_eq!(pool.deferred_stats().invalid, 0);
}

#[test]
fn idle_marking_and_block_state_use_the_kernel_letters() {
    let zram = device(1 << 20, Algorithm::Lz4);
    zram.open().unwrap().write(0, &real_pages(1)[0]).unwrap();
    zram.open().unwrap().write(PAGE_SIZE as u64, &[0; PAGE_SIZE]).unwrap();
    zram.open().unwrap().write(2 * PAGE_SIZE as u64, &noise(3)).unwrap();
    zram.idle_all().unwrap();
    let state = zram.block_state();
    let lines: Vec<&str> = state.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].ends_with("...i.."), "{}", lines[0]);
    assert!(lines[1].ends_with("s....."), "same-filled pages are never idle: {}", lines[1]);
    assert!(lines[2].ends_with("..hi.."), "{}", lines[2]);
    zram.open().unwrap().read(0, &mut [0; 10]).unwrap();
    assert!(zram.block_state().lines().next().unwrap().ends_with("......"), "a read clears idle");
    zram.reset().unwrap();
    assert_eq!(zram.block_state(), "");
    assert_eq!(zram.mm_stat_values(), mmkit_zram::MmStat::default());
}
