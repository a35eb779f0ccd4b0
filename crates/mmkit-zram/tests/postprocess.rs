//! Post-processing case by case: recompression with secondary algorithms,
//! writeback to a backing file and reads from it, the writeback limit, bad
//! backing files, the sysfs attributes by name and block status.

use mmkit_zram::{
    Algorithm, Extent, ExtentKind, RecompressParams, WritebackMode, Zram, ZramConfig, ZramError, PAGE_SIZE, SHOW_ATTRS,
};
use std::path::PathBuf;

mod common;
use common::noise;

/// Pages of this test binary: real, compressible data.
fn real_pages(n: usize) -> Vec<Vec<u8>> {
    common::exe_pages(8, n)
}

/// A scratch directory of this test's own, removed when dropped.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new(name: &str) -> Self {
        Self(tempfile::Builder::new().prefix(&format!("mmkit-zram-{name}-")).tempdir().unwrap())
    }
    fn file(&self, name: &str, pages: usize) -> PathBuf {
        let path = self.0.path().join(name);
        std::fs::write(&path, vec![0u8; pages * PAGE_SIZE]).unwrap();
        path
    }
}

fn device(config: ZramConfig) -> Zram {
    Zram::with_own_memory(config).unwrap()
}

fn read_page(zram: &Zram, index: usize) -> Vec<u8> {
    let mut page = vec![0; PAGE_SIZE];
    zram.open().unwrap().read((index * PAGE_SIZE) as u64, &mut page).unwrap();
    page
}

fn bd_stat(zram: &Zram) -> [u64; 3] {
    let v: Vec<u64> = zram.bd_stat().split_whitespace().map(|n| n.parse().unwrap()).collect();
    [v[0], v[1], v[2]]
}

#[test]
fn recompression_shrinks_idle_pages_and_marks_what_it_cannot() {
    let zram = device(ZramConfig {
        disksize: 64 * PAGE_SIZE as u64,
        recomp_algorithms: vec![Algorithm::Zstd { level: 9 }],
        ..ZramConfig::default()
    });
    let pages = real_pages(32);
    for (i, page) in pages.iter().enumerate() {
        zram.open().unwrap().write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    zram.open().unwrap().write(40 * PAGE_SIZE as u64, &noise(1)).unwrap();
    let before = zram.mm_stat_values();
    assert!(matches!(
        zram.recompress(&RecompressParams::parse("type=idle algo=lzma").unwrap()),
        Err(ZramError::Invalid(_))
    ));
    assert!(matches!(
        zram.recompress(&RecompressParams::parse("type=idle priority=2").unwrap()),
        Err(ZramError::Invalid(_))
    ));
    assert_eq!(zram.mm_stat_values(), before, "a refused request changes nothing");
    assert_eq!(zram.recompress(&RecompressParams::parse("type=idle").unwrap()), Ok(0), "nothing is idle yet");
    zram.idle_all().unwrap();
    zram.open().unwrap().read(0, &mut [0; 8]).unwrap(); // page 0 is no longer idle
    let done = zram.recompress(&RecompressParams::parse("type=idle").unwrap()).unwrap();
    let after = zram.mm_stat_values();
    assert!(done >= 16, "zstd -9 shrinks most lz4 pages of a binary: {done}");
    assert!(after.compr_data_size < before.compr_data_size);
    assert_eq!((after.orig_data_size, after.huge_pages), (before.orig_data_size, 1));
    for (i, page) in pages.iter().enumerate() {
        assert_eq!(&read_page(&zram, i), page, "page {i} reads back after recompression");
    }
    let state = zram.block_state();
    let line = |index: usize| state.lines().find(|l| l.split_whitespace().next() == Some(&index.to_string())).unwrap();
    assert!(line(0).ends_with("......"), "page 0 was not idle: {}", line(0));
    assert!(state.lines().filter(|l| l.ends_with("r.")).count() >= 16);
    assert!(line(40).ends_with("..hi.n"), "noise is marked incompressible: {}", line(40));
    // Marked pages are skipped the next time.
    assert_eq!(zram.recompress(&RecompressParams::parse("type=huge").unwrap()), Ok(0));
    let device_without = device(ZramConfig { disksize: 1 << 20, ..ZramConfig::default() });
    assert!(matches!(device_without.recompress(&RecompressParams::default()), Err(ZramError::Invalid(_))));
}

#[test]
fn writeback_moves_pages_to_the_file_and_reads_come_from_it() {
    let scratch = Scratch::new("wb");
    let no_file = device(ZramConfig { disksize: 1 << 20, ..ZramConfig::default() });
    assert_eq!(no_file.writeback(WritebackMode::Idle), Err(ZramError::NoBackingDev));
    let zram = device(ZramConfig {
        disksize: 64 * PAGE_SIZE as u64,
        backing_dev: Some(scratch.file("backing", 16)),
        ..ZramConfig::default()
    });
    let pages = real_pages(8);
    for (i, page) in pages.iter().enumerate() {
        zram.open().unwrap().write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    zram.open().unwrap().write(10 * PAGE_SIZE as u64, &noise(2)).unwrap();
    zram.open().unwrap().write(11 * PAGE_SIZE as u64, &[0; PAGE_SIZE]).unwrap();
    let before = zram.mm_stat_values();
    assert_eq!(zram.writeback(WritebackMode::Huge), Ok(1));
    assert_eq!(bd_stat(&zram), [1, 0, 1]);
    assert_eq!(zram.mm_stat_values().huge_pages, 0);
    assert_eq!(read_page(&zram, 10), noise(2), "a written-back page reads from the file");
    assert_eq!(bd_stat(&zram), [1, 1, 1]);
    zram.idle_all().unwrap();
    assert_eq!(zram.writeback(WritebackMode::Idle), Ok(8), "the zero page is same-filled, never idle");
    let after = zram.mm_stat_values();
    assert_eq!(after.orig_data_size, before.orig_data_size, "written-back pages still count as stored");
    assert_eq!(after.compr_data_size, 0);
    for (i, page) in pages.iter().enumerate() {
        assert_eq!(&read_page(&zram, i), page);
    }
    // Rewriting or discarding a written-back page returns its block.
    zram.open().unwrap().write(0, &pages[1]).unwrap();
    zram.open().unwrap().discard(PAGE_SIZE as u64, PAGE_SIZE as u64).unwrap();
    assert_eq!(bd_stat(&zram)[0], 7);
    // A partial write to a written-back page patches the page from the file.
    zram.open().unwrap().write(2 * PAGE_SIZE as u64 + 100, b"patch").unwrap();
    let mut expected = pages[2].clone();
    expected[100..105].copy_from_slice(b"patch");
    assert_eq!(read_page(&zram, 2), expected);
    assert_eq!(zram.writeback(WritebackMode::parse("page_index=2").unwrap()), Ok(1));
    assert_eq!(read_page(&zram, 2), expected);
    assert!(matches!(zram.writeback(WritebackMode::Pages { first: 0, last: 64 }), Err(ZramError::Invalid(_))));
    assert!(zram.block_state().lines().any(|l| l.ends_with(".w....")), "written back, read since: not idle");
}

#[test]
fn the_limit_and_a_full_file_stop_writeback_after_what_fits() {
    let scratch = Scratch::new("wb-limit");
    let zram = device(ZramConfig {
        disksize: 64 * PAGE_SIZE as u64,
        backing_dev: Some(scratch.file("backing", 4)),
        ..ZramConfig::default()
    });
    let pages = real_pages(8);
    for (i, page) in pages.iter().enumerate() {
        zram.open().unwrap().write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    zram.idle_all().unwrap();
    zram.set_writeback_limit_enable(true).unwrap();
    zram.set_writeback_limit(2).unwrap();
    assert_eq!(zram.writeback(WritebackMode::Idle), Err(ZramError::WritebackLimit { written: 2 }));
    assert_eq!((bd_stat(&zram)[0], zram.writeback_limit()), (2, 0));
    zram.set_writeback_limit_enable(false).unwrap();
    assert_eq!(zram.writeback(WritebackMode::Idle), Err(ZramError::BackingFull { written: 2 }), "two more fit");
    assert_eq!(bd_stat(&zram)[0], 4, "the file holds four pages");
    assert!(!zram.block_state().contains('p'), "no slot is left marked");
    for (i, page) in pages.iter().enumerate() {
        assert_eq!(&read_page(&zram, i), page);
    }
}

#[test]
fn a_bad_backing_file_is_a_typed_error() {
    let scratch = Scratch::new("wb-bad");
    let config = |path: PathBuf| ZramConfig { disksize: 1 << 20, backing_dev: Some(path), ..ZramConfig::default() };
    assert!(matches!(Zram::with_own_memory(config(scratch.0.path().join("absent"))), Err(ZramError::Backing(_))));
    assert!(matches!(Zram::with_own_memory(config(scratch.file("empty", 0))), Err(ZramError::Backing(_))));
    // A file cut short under the device: the read fails, is counted, and
    // the other pages are untouched.
    let path = scratch.file("shrinks", 8);
    let zram = device(config(path.clone()));
    let pages = real_pages(2);
    zram.open().unwrap().write(0, &pages[0]).unwrap();
    zram.open().unwrap().write(PAGE_SIZE as u64, &pages[1]).unwrap();
    assert_eq!(zram.writeback(WritebackMode::parse("page_index=0").unwrap()), Ok(1));
    std::fs::File::options().write(true).open(&path).unwrap().set_len(0).unwrap();
    assert!(matches!(zram.open().unwrap().read(0, &mut [0; PAGE_SIZE]), Err(ZramError::Backing(_))));
    assert_eq!(zram.io_stat().split_whitespace().next(), Some("1"), "failed_reads");
    assert_eq!(read_page(&zram, 1), pages[1]);
}

#[test]
fn attributes_by_name_show_and_store_as_sysfs_does() {
    let scratch = Scratch::new("attrs");
    let zram = device(ZramConfig {
        disksize: 64 * PAGE_SIZE as u64,
        recomp_algorithms: vec![Algorithm::Zstd { level: 3 }],
        backing_dev: Some(scratch.file("backing", 8)),
        ..ZramConfig::default()
    });
    for name in SHOW_ATTRS {
        assert!(zram.attr_show(name).unwrap().ends_with('\n') || *name == "block_state", "{name}");
    }
    assert_eq!(zram.attr_show("comp_algorithm").unwrap(), "[lz4] lz4_flex lz4hc zstd\n");
    assert_eq!(zram.attr_show("recomp_algorithm").unwrap(), "#1: lz4 lz4_flex lz4hc [zstd]\n");
    assert_eq!(zram.attr_show("disksize").unwrap(), format!("{}\n", 64 * PAGE_SIZE));
    assert!(matches!(zram.attr_show("colour"), Err(ZramError::Invalid(_))));
    assert!(matches!(zram.attr_store("idle", "soon"), Err(ZramError::Invalid(_))));
    assert!(matches!(zram.attr_store("writeback", "everything"), Err(ZramError::Invalid(_))));
    assert!(matches!(zram.attr_store("disksize", "1G"), Err(ZramError::Busy(_))), "set: busy, not unknown");
    zram.attr_store("mem_limit", "1M").unwrap();
    assert_eq!(zram.mm_stat_values().mem_limit, 1 << 20);
    zram.open().unwrap().write(0, &real_pages(1)[0]).unwrap();
    zram.attr_store("idle", "all").unwrap();
    assert_eq!(zram.attr_store("writeback", "idle").unwrap(), "1\n");
    assert_eq!(zram.attr_show("bd_stat").unwrap().split_whitespace().collect::<Vec<_>>(), ["1", "0", "1"]);
    zram.attr_store("writeback_limit_enable", "1").unwrap();
    zram.attr_store("writeback_limit", "5").unwrap();
    assert_eq!(zram.attr_show("writeback_limit").unwrap(), "5\n");
    zram.attr_store("compact", "1").unwrap();
    zram.attr_store("reset", "1").unwrap();
    assert_eq!(zram.mm_stat_values().orig_data_size, 0);
}

#[test]
fn extents_report_holes_zero_pages_and_data() {
    let zram = device(ZramConfig { disksize: 16 * PAGE_SIZE as u64, ..ZramConfig::default() });
    let size = 16 * PAGE_SIZE as u64;
    assert_eq!(zram.extents(0, size).unwrap(), [Extent { offset: 0, length: size, kind: ExtentKind::Hole }]);
    zram.open().unwrap().write(2 * PAGE_SIZE as u64, &real_pages(1)[0]).unwrap();
    zram.open().unwrap().write(3 * PAGE_SIZE as u64, &[0; PAGE_SIZE]).unwrap();
    zram.open().unwrap().write(4 * PAGE_SIZE as u64, &[7; PAGE_SIZE]).unwrap();
    let page = PAGE_SIZE as u64;
    assert_eq!(
        zram.extents(100, 6 * page).unwrap(),
        [
            Extent { offset: 100, length: 2 * page - 100, kind: ExtentKind::Hole },
            Extent { offset: 2 * page, length: page, kind: ExtentKind::Data },
            Extent { offset: 3 * page, length: page, kind: ExtentKind::Zero },
            Extent { offset: 4 * page, length: page, kind: ExtentKind::Data },
            Extent { offset: 5 * page, length: page + 100, kind: ExtentKind::Hole },
        ]
    );
    assert!(matches!(zram.extents(size, 1), Err(ZramError::OutOfRange { .. })));
}
