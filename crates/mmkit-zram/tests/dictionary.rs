//! zram with the compressors' parameters: a zstd dictionary and levels set
//! through `algorithm_params`, lz4hc as primary and secondary, patterns
//! written and read back, recompression into a dictionary algorithm, and
//! refused parameters that change nothing.

use mmkit_zram::{
    Algorithm, CompressError, Dictionary, RecompressParams, Zram, ZramConfig, ZramError, PAGE_SIZE, STORE_ATTRS,
};
use std::path::PathBuf;

mod common;
use common::{exe_pages, noise};

/// A dictionary trained on the even pages of a stretch of this test
/// binary (the tests store odd ones: neighbours, never the same page),
/// written to a file of this test's own (in a directory removed when the
/// returned guard drops).
fn dictionary_file(name: &str) -> (PathBuf, Dictionary, tempfile::TempDir) {
    let dir = tempfile::Builder::new().prefix(&format!("mmkit-zram-dict-{name}-")).tempdir().unwrap();
    let training: Vec<Vec<u8>> = exe_pages(100, 800).into_iter().step_by(2).collect();
    let dict = Dictionary::train(training.iter().map(Vec::as_slice), 16 << 10).unwrap();
    let path = dir.path().join("zram.dict");
    dict.save(&path).unwrap();
    (path, dict, dir)
}

/// `ZramConfig::set` calls, in order.
type Settings<'a> = &'a [(&'a str, &'a str)];

/// Which error a refused case expects.
type Expected = fn(&ZramError) -> bool;

fn device(settings: Settings<'_>) -> Result<Zram, ZramError> {
    let mut config = ZramConfig { disksize: 256 * PAGE_SIZE as u64, ..ZramConfig::default() };
    for (key, value) in settings {
        config.set(key, value)?;
    }
    Zram::with_own_memory(config)
}

/// Pages of every kind: real, same-filled, noise, partial writes.
fn write_patterns(zram: &Zram) -> Vec<Vec<u8>> {
    let mut expected = vec![vec![0u8; PAGE_SIZE]; 64];
    for (i, page) in exe_pages(101, 80).into_iter().step_by(2).enumerate() {
        expected[i] = page;
    }
    expected[40] = vec![0x5a; PAGE_SIZE];
    expected[41] = noise(41);
    expected[42] = 0xdead_beef_u64.to_le_bytes().repeat(PAGE_SIZE / 8);
    for (i, page) in expected.iter().enumerate().take(43) {
        zram.open().unwrap().write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    // A partial page over a compressed one, and one over a hole.
    zram.open().unwrap().write((3 * PAGE_SIZE + 100) as u64, b"partial").unwrap();
    expected[3][100..107].copy_from_slice(b"partial");
    zram.open().unwrap().write((50 * PAGE_SIZE + 4000) as u64, b"tail of a hole").unwrap();
    expected[50][4000..4014].copy_from_slice(b"tail of a hole");
    expected
}

fn check(zram: &Zram, expected: &[Vec<u8>]) {
    let mut page = vec![0u8; PAGE_SIZE];
    for (i, want) in expected.iter().enumerate() {
        zram.open().unwrap().read((i * PAGE_SIZE) as u64, &mut page).unwrap();
        assert!(page == *want, "page {i} differs");
    }
}

#[test]
fn a_dictionary_device_stores_and_reads_every_pattern_in_less_memory() {
    let (path, dict, _dir) = dictionary_file("patterns");
    // Level 9: below level 6 zstd reuses a dictionary's entropy tables
    // on small blocks without pricing them, and pages can grow.
    let params = format!("algo=zstd level=9 dict={}", path.display());
    let with = device(&[("comp", "zstd"), ("algorithm_params", &params)]).unwrap();
    assert_eq!(with.dictionary(0), Some(dict.clone()));
    assert_eq!(with.attr_show("comp_algorithm").unwrap(), "lz4 lz4_flex lz4hc [zstd:9]\n");
    let without = device(&[("comp", "zstd:9")]).unwrap();
    assert_eq!(without.dictionary(0), None);
    let expected = write_patterns(&with);
    assert_eq!(write_patterns(&without), expected);
    check(&with, &expected);
    check(&without, &expected);
    let (a, b) = (with.mm_stat_values(), without.mm_stat_values());
    assert_eq!(a.orig_data_size, b.orig_data_size);
    assert!(a.compr_data_size < b.compr_data_size, "with {} bytes, without {}", a.compr_data_size, b.compr_data_size);
    // Rewritten pages free the old objects: the totals stay consistent.
    for i in 0..40 {
        with.open().unwrap().write((i * PAGE_SIZE) as u64, &expected[39 - i]).unwrap();
    }
    let mut swapped = expected.clone();
    swapped[..40].reverse();
    check(&with, &swapped);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn lz4hc_and_levels_through_algorithm_params() {
    let zram = device(&[("comp", "lz4hc"), ("recomp", "zstd"), ("algorithm_params", "priority=1 level=19")]).unwrap();
    assert_eq!(zram.algorithm(), Algorithm::Lz4Hc { level: 9 });
    assert_eq!(zram.recomp_algorithms(), [Algorithm::Zstd { level: 19 }]);
    assert_eq!(zram.attr_show("recomp_algorithm").unwrap(), "#1: lz4 lz4_flex lz4hc [zstd:19]\n");
    let expected = write_patterns(&zram);
    check(&zram, &expected);
    let level_12 = device(&[("comp", "lz4hc"), ("algorithm_params", "algo=lz4hc level=12")]).unwrap();
    assert_eq!(level_12.algorithm(), Algorithm::Lz4Hc { level: 12 });
    assert_eq!(write_patterns(&level_12), expected);
    check(&level_12, &expected);
}

#[test]
fn recompression_into_a_dictionary_algorithm_reads_back() {
    let (path, _, _dir) = dictionary_file("recompress");
    let params = format!("priority=1 level=9 dict={}", path.display());
    let zram = device(&[("comp", "lz4"), ("recomp", "zstd"), ("algorithm_params", &params)]).unwrap();
    assert!(zram.dictionary(1).is_some());
    let expected = write_patterns(&zram);
    let before = zram.mm_stat_values().compr_data_size;
    zram.idle_all().unwrap();
    let done = zram.recompress(&RecompressParams::parse("type=idle").unwrap()).unwrap();
    assert!(done > 20, "{done} pages recompressed");
    assert!(zram.mm_stat_values().compr_data_size < before);
    check(&zram, &expected);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn refused_parameters_are_typed_and_change_nothing() {
    let (path, _, _dir) = dictionary_file("refused");
    let dict = format!("dict={}", path.display());
    let refused: [(Settings, Expected); 5] = [
        (&[("comp", "lz4"), ("algorithm_params", "algo=zstd level=3")], |e| matches!(e, ZramError::Invalid(_))),
        (&[("comp", "lz4hc"), ("algorithm_params", "level=0")], |e| {
            matches!(e, ZramError::Compress(CompressError::LevelOutOfRange { .. }))
        }),
        (&[("comp", "lz4hc"), ("algorithm_params", &dict)], |e| {
            matches!(e, ZramError::Compress(CompressError::NoDictionary("lz4hc")))
        }),
        (&[("comp", "zstd"), ("algorithm_params", "dict=/no/such/file")], |e| {
            matches!(e, ZramError::Compress(CompressError::DictionaryFile { .. }))
        }),
        (&[("comp", "zstd"), ("algorithm_params", "algo=zstd colour=blue")], |e| matches!(e, ZramError::Invalid(_))),
    ];
    for (settings, expected) in refused {
        let err = device(settings).err().expect("refused");
        assert!(expected(&err), "{settings:?}: {err:?}");
    }
    // A dictionary left behind by a change of algorithm is refused when the
    // device is made, not ignored.
    let mut config = ZramConfig { disksize: 64 * PAGE_SIZE as u64, ..ZramConfig::default() };
    config.set("comp", "zstd").unwrap();
    config.set("algorithm_params", &dict).unwrap();
    config.set("comp", "lz4").unwrap();
    assert!(matches!(Zram::with_own_memory(config), Err(ZramError::Compress(CompressError::NoDictionary("lz4")))));
    // On an initialised device the attribute is busy, as the kernel's
    // configuration attributes are; the data and statistics stay.
    assert!(STORE_ATTRS.contains(&"algorithm_params"));
    let zram = device(&[("comp", "zstd")]).unwrap();
    let expected = write_patterns(&zram);
    let stats = zram.mm_stat();
    for bad in ["algo=zstd level=99", "algo=lzo", "", "level", &format!("algo=zstd {dict}")] {
        assert!(zram.attr_store("algorithm_params", bad).is_err(), "{bad}");
    }
    assert!(matches!(zram.attr_store("algorithm_params", "algo=zstd level=9"), Err(ZramError::Busy(_))));
    assert_eq!(zram.mm_stat(), stats);
    assert_eq!(zram.algorithm(), Algorithm::Zstd { level: 3 });
    check(&zram, &expected);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
