//! The lifecycle as the kernel's zram has it: `reset` refused while the
//! device is open, a reset device uninitialised with every statistic
//! zeroed and I/O refused, configuration only while uninitialised (busy
//! otherwise), `disksize` initialising it again, and one device per
//! backing file.

use mmkit_zram::{Zram, ZramConfig, ZramError, PAGE_SIZE};

fn noise(seed: u64) -> Vec<u8> {
    mmkit_testkit::pages::noise_page(seed, PAGE_SIZE)
}

fn text(seed: u8) -> Vec<u8> {
    (0..PAGE_SIZE).map(|i| b"zram lifecycle "[(i + seed as usize) % 15]).collect()
}

#[test]
fn reset_is_busy_while_open_and_otherwise_returns_to_uninitialised_with_zeroed_stats() {
    let zram = Zram::with_own_memory(ZramConfig { disksize: 64 * PAGE_SIZE as u64, ..ZramConfig::default() }).unwrap();
    for i in 0..32 {
        zram.open().unwrap().write(i * PAGE_SIZE as u64, &if i % 2 == 0 { text(i as u8) } else { noise(i) }).unwrap();
    }
    for i in (0..32).step_by(2) {
        zram.open().unwrap().discard(i * PAGE_SIZE as u64, PAGE_SIZE as u64).unwrap();
    }
    zram.compact().unwrap();
    let open = zram.open().unwrap();
    let before = zram.mm_stat();
    assert!(matches!(zram.attr_store("reset", "1"), Err(ZramError::Busy(_))));
    assert!(matches!(zram.reset(), Err(ZramError::Busy(_))));
    assert_eq!(zram.mm_stat(), before, "a refused reset changes nothing");
    let mut back = vec![0; PAGE_SIZE];
    zram.open().unwrap().read(PAGE_SIZE as u64, &mut back).unwrap();
    assert_eq!(back, noise(1));
    drop(open);
    assert!(matches!(zram.attr_store("reset", "0"), Err(ZramError::Invalid(_))));
    zram.attr_store("reset", "1").unwrap();
    assert!(!zram.is_initialised());
    assert_eq!(zram.attr_show("initstate").unwrap(), "0\n");
    assert_eq!(zram.attr_show("disksize").unwrap(), "0\n");
    assert_eq!(zram.mm_stat_values(), mmkit_zram::MmStat::default(), "pages_compacted too");
    assert!(zram.io_stat().split_whitespace().all(|c| c == "0"));
    assert_eq!(zram.open().unwrap().read(0, &mut back), Err(ZramError::NotInitialised));
    assert_eq!(zram.open().unwrap().write(0, &back), Err(ZramError::NotInitialised));
    assert!(matches!(zram.attr_store("compact", "1"), Err(ZramError::NotInitialised)));
    // Configured while uninitialised; disksize initialises.
    zram.attr_store("comp_algorithm", "zstd").unwrap();
    zram.attr_store("recomp_algorithm", "lz4").unwrap();
    zram.attr_store("max_comp_streams", "2").unwrap();
    assert_eq!(zram.attr_show("comp_algorithm").unwrap(), "lz4 lz4_flex lz4hc [zstd]\n");
    assert!(zram.attr_store("disksize", "0").is_err(), "a device needs a page");
    assert!(!zram.is_initialised());
    zram.attr_store("disksize", "40K").unwrap();
    assert_eq!((zram.disksize(), zram.attr_show("initstate").unwrap().as_str()), (40 << 10, "1\n"));
    assert_eq!(zram.attr_show("recomp_algorithm").unwrap(), "#1: [lz4] lz4_flex lz4hc zstd\n");
    zram.open().unwrap().read(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0), "a new device reads as zeroes");
    zram.open().unwrap().write(0, &text(3)).unwrap();
    zram.open().unwrap().read(0, &mut back).unwrap();
    assert_eq!(back, text(3));
    for (name, value) in [
        ("disksize", "1M"),
        ("comp_algorithm", "lz4"),
        ("recomp_algorithm", "zstd"),
        ("backing_dev", "x"),
        ("max_comp_streams", "1"),
    ] {
        match zram.attr_store(name, value) {
            Err(ZramError::Busy(what)) => assert!(what.contains(name), "{what}"),
            other => panic!("{name} on an initialised device: {other:?}"),
        }
    }
    assert_eq!(zram.disksize(), 40 << 10);
}

#[test]
fn a_backing_file_serves_one_device_and_bad_limits_are_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().to_path_buf();
    let file = dir.join("bk.img");
    std::fs::write(&file, vec![0u8; 16 * PAGE_SIZE]).unwrap();
    let link = dir.join("link.img");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let config = |path: &std::path::Path| ZramConfig {
        disksize: 16 * PAGE_SIZE as u64,
        backing_dev: Some(path.to_owned()),
        ..ZramConfig::default()
    };
    let first = Zram::with_own_memory(config(&file)).unwrap();
    match Zram::with_own_memory(config(&link)) {
        Err(ZramError::Busy(what)) => assert!(what.contains("link.img"), "{what}"),
        other => panic!("a second device on one file: {:?}", other.map(|_| ())),
    }
    // Also when set through the attribute of an uninitialised device.
    let second =
        Zram::with_own_memory(ZramConfig { disksize: 16 * PAGE_SIZE as u64, ..ZramConfig::default() }).unwrap();
    second.reset().unwrap();
    assert!(matches!(second.attr_store("backing_dev", &link.display().to_string()), Err(ZramError::Busy(_))));
    first.reset().unwrap();
    second.attr_store("backing_dev", &link.display().to_string()).unwrap();
    second.attr_store("disksize", "64K").unwrap();
    assert_eq!(second.backing_dev(), Some(link.clone()));
    for bad in ["1", "4095", "18446744073709551615", "99999T"] {
        assert!(matches!(second.attr_store("mem_limit", bad), Err(ZramError::Invalid(_))), "mem_limit {bad}");
    }
    second.attr_store("mem_limit", "4096").unwrap();
    assert!(matches!(second.attr_store("recompress", ""), Err(ZramError::Invalid(_))), "a bare recompress");
}

/// Issue 37: I/O goes only through an open handle, so a writer is always
/// one of the openers `reset` counts. Before, `Zram::write` needed no
/// handle: a reset between two writes of a user that never opened the
/// device answered Ok and dropped the first write's data.
#[test]
fn a_writer_holds_the_device_open_so_reset_cannot_drop_its_data() {
    let zram = Zram::with_own_memory(ZramConfig { disksize: 1 << 20, ..ZramConfig::default() }).unwrap();
    let writer = zram.open().unwrap();
    writer.write(0, &text(9)).unwrap();
    assert!(matches!(zram.reset(), Err(ZramError::Busy(_))), "the writer holds the device open");
    let mut back = vec![0; PAGE_SIZE];
    writer.read(0, &mut back).unwrap();
    assert_eq!(back, text(9), "the writer's data is still there");
    std::thread::scope(|s| {
        // A reset from another thread is refused as long as the writer lives.
        s.spawn(|| assert!(matches!(zram.reset(), Err(ZramError::Busy(_)))));
    });
    assert_eq!(writer.zram().openers(), 1);
    drop(writer);
    zram.reset().unwrap();
    assert_eq!(zram.open().unwrap().read(0, &mut back), Err(ZramError::NotInitialised));
}
