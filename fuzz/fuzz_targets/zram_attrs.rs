//! Fuzz target for `mmkit_zram`'s text interface: the input is split into
//! lines of `NAME VALUE`; each line is tried as a configuration key, then
//! stored into (and shown from) a small device with a secondary algorithm
//! and a backing file. Nothing may panic, an invalid store must leave the
//! device's statistics alone, and the pool's invariants must hold.
//!
//! Run with `cargo +nightly fuzz run zram_attrs` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmkit_zram::{Algorithm, Zram, ZramConfig, ZramError};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let backing = std::env::temp_dir().join(format!("mmkit-fuzz-zram-{}", std::process::id()));
    if std::fs::write(&backing, vec![0u8; 8 * 4096]).is_err() {
        return;
    }
    let mut config = ZramConfig {
        disksize: 16 * 4096,
        recomp_algorithms: vec![Algorithm::Zstd { level: 3 }],
        backing_dev: Some(backing),
        ..ZramConfig::default()
    };
    let zram = Zram::with_own_memory(config.clone()).expect("a small device");
    for page in 0..8u64 {
        let fill: Vec<u8> = (0..4096).map(|i| ((i * (page + 1)) % 251) as u8).collect();
        zram.write(page * 4096, &fill).expect("room for eight pages");
    }
    for line in text.lines().take(32) {
        let (name, value) = line.split_once(' ').unwrap_or((line, ""));
        if name == "backing_dev" {
            // It names a file the device then overwrites: not from fuzz input.
            continue;
        }
        let before = config.clone();
        if config.set(name, value).is_err() {
            assert_eq!(config, before);
        }
        let stats = (zram.mm_stat(), zram.block_state(), zram.bd_stat());
        if let Err(ZramError::Invalid(_) | ZramError::Busy(_) | ZramError::NotInitialised) =
            zram.attr_store(name, value)
        {
            assert_eq!((zram.mm_stat(), zram.block_state(), zram.bd_stat()), stats);
        }
        let _ = zram.attr_show(name);
        if let Some(pool) = zram.pool() {
            pool.check_invariants().expect("pool invariants");
        }
    }
});
