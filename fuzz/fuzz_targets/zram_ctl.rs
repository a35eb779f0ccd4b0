//! Fuzz target for the control socket's request layer
//! (`mmkit_nbdkit::control::answer`): the input is split into request lines
//! (`NAME` or `NAME VALUE`, as `mmkit zram ctl` sends them) answered by a
//! small device with a secondary algorithm and a backing file, with a user
//! holding it open for part of the run. Nothing may panic; a refused
//! request must leave the statistics alone; a reset is refused while the
//! device is open; the pool's invariants hold after every request.
//!
//! Run with `cargo +nightly fuzz run zram_ctl` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmkit_nbdkit::control::answer;
use mmkit_zram::{Algorithm, Zram, ZramConfig};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let backing = std::env::temp_dir().join(format!("mmkit-fuzz-ctl-{}", std::process::id()));
    if std::fs::write(&backing, vec![0u8; 4 * 4096]).is_err() {
        return;
    }
    let config = ZramConfig {
        disksize: 16 * 4096,
        recomp_algorithms: vec![Algorithm::Zstd { level: 3 }],
        backing_dev: Some(backing),
        ..ZramConfig::default()
    };
    let zram = Zram::with_own_memory(config).expect("a small device");
    for page in 0..6u64 {
        let fill: Vec<u8> = (0..4096).map(|i| ((i * (page + 1)) % 251) as u8).collect();
        zram.write(page * 4096, &fill).expect("room for six pages");
    }
    let mut open = None;
    for (n, line) in text.lines().take(32).enumerate() {
        // Every fourth line toggles a user holding the device open.
        if n % 4 == 3 {
            open = match open.take() {
                Some(handle) => {
                    drop(handle);
                    None
                }
                None => zram.open().ok(),
            };
        }
        if line.trim_start().starts_with("backing_dev") {
            // It names a file the device then overwrites: not from fuzz input.
            continue;
        }
        let before = (zram.mm_stat(), zram.block_state(), zram.bd_stat(), zram.is_initialised());
        let reply = answer(&zram, line);
        if reply.is_err() {
            let after = (zram.mm_stat(), zram.block_state(), zram.bd_stat(), zram.is_initialised());
            // A writeback or recompression pass may stop part-way with its
            // pages done; every other refusal changes nothing.
            let partial = line.trim_start().starts_with("writeback") || line.trim_start().starts_with("recompress");
            assert!(partial || after == before, "{line:?} refused but changed the device");
        }
        if open.is_some() && line.trim() == "reset" {
            assert!(reply.is_err(), "reset taken while open");
        }
        if let Some(pool) = zram.pool() {
            pool.check_invariants().expect("pool invariants");
        }
    }
});
