//! Fuzz target for `mmkit_zram`'s text interface: the input is split into
//! lines of `NAME VALUE`; each line is tried as a configuration key, then
//! stored into (and shown from) a small device with a secondary algorithm
//! and a backing file. Nothing may panic, an invalid store must leave the
//! device's statistics alone, and the pool's invariants must hold.
//!
//! The device is kept from one input to the next (see `mmkit_fuzz`): each
//! input starts with eight pages written over a discarded device, and one
//! that reconfigured or reset it has it built again for the next.
//!
//! Run with `cargo +nightly fuzz run zram_attrs` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmkit_fuzz::zram::{map, DeviceSlot, RECONFIGURING};
use mmkit_fuzz::Persistent;
use mmkit_zram::{Algorithm, Zram, ZramConfig, ZramError};
use std::path::PathBuf;
use std::sync::OnceLock;

const DISKSIZE: u64 = 16 * 4096;

static DEVICE: Persistent<DeviceSlot> = Persistent::new();

fn config() -> ZramConfig {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    let backing = PATH.get_or_init(|| mmkit_fuzz::zram::backing_file("zram", 8));
    ZramConfig {
        disksize: DISKSIZE,
        recomp_algorithms: vec![Algorithm::Zstd { level: 3 }],
        backing_dev: Some(backing.clone()),
        ..ZramConfig::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    DEVICE.with(DeviceSlot::default, |slot| {
        let zram = slot.device(|| Zram::new(map(), config()).expect("a small device"));
        slot.reconfigured = run(zram, text);
    });
});

/// Runs one input; returns whether it changed the configuration.
fn run(zram: &Zram, text: &str) -> bool {
    let io = zram.open().expect("no reset runs between inputs");
    io.discard(0, DISKSIZE).expect("an initialised device");
    for page in 0..8u64 {
        let fill: Vec<u8> = (0..4096).map(|i| ((i * (page + 1)) % 251) as u8).collect();
        io.write(page * 4096, &fill).expect("room for eight pages");
    }
    drop(io);
    let mut config = config();
    let mut reconfigured = false;
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
        match zram.attr_store(name, value) {
            Err(ZramError::Invalid(_) | ZramError::Busy(_) | ZramError::NotInitialised) => {
                assert_eq!((zram.mm_stat(), zram.block_state(), zram.bd_stat()), stats);
            }
            Ok(_) if RECONFIGURING.contains(&name) => reconfigured = true,
            _ => {}
        }
        let _ = zram.attr_show(name);
        if let Some(pool) = zram.pool() {
            pool.check_invariants().expect("pool invariants");
        }
    }
    reconfigured
}
