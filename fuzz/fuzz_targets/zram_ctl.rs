//! Fuzz target for the control socket's request layer
//! (`mmkit_nbdkit::control::answer`): the input is split into request lines
//! (`NAME` or `NAME VALUE`, as `mmkit zram ctl` sends them) answered by a
//! small device with a secondary algorithm and a backing file, with a user
//! holding it open for part of the run. Nothing may panic; a refused
//! request must leave the statistics alone; a reset is refused while the
//! device is open; the pool's invariants hold after every request.
//!
//! The device is kept from one input to the next (see `mmkit_fuzz`): each
//! input starts with six pages written over a discarded device, and one
//! that reconfigured or reset it has it built again for the next.
//!
//! Run with `cargo +nightly fuzz run zram_ctl` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmkit_fuzz::zram::{map, DeviceSlot, RECONFIGURING};
use mmkit_fuzz::Persistent;
use mmkit_nbdkit::control::answer;
use mmkit_zram::{Algorithm, Zram, ZramConfig};
use std::path::PathBuf;
use std::sync::OnceLock;

const DISKSIZE: u64 = 16 * 4096;

static DEVICE: Persistent<DeviceSlot> = Persistent::new();

/// This process's backing file, four pages.
fn backing() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| mmkit_fuzz::zram::backing_file("ctl", 4))
}

fn new_device() -> Zram {
    let config = ZramConfig {
        disksize: DISKSIZE,
        recomp_algorithms: vec![Algorithm::Zstd { level: 3 }],
        backing_dev: Some(backing().clone()),
        ..ZramConfig::default()
    };
    Zram::new(map(), config).expect("a small device")
}

fuzz_target!(|data: &[u8]| {
    DEVICE.with(DeviceSlot::default, |slot| {
        let zram = slot.device(new_device);
        slot.reconfigured = run(zram, data);
    });
});

/// Runs one input; returns whether it changed the configuration.
fn run(zram: &Zram, data: &[u8]) -> bool {
    let io = zram.open().expect("no reset runs between inputs");
    io.discard(0, DISKSIZE).expect("an initialised device");
    for page in 0..6u64 {
        let fill: Vec<u8> = (0..4096).map(|i| ((i * (page + 1)) % 251) as u8).collect();
        io.write(page * 4096, &fill).expect("room for six pages");
    }
    drop(io);
    let text = String::from_utf8_lossy(data);
    let mut reconfigured = false;
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
        let name = line.split_whitespace().next().unwrap_or("");
        if name == "backing_dev" {
            // It names a file the device then overwrites: not from fuzz input.
            continue;
        }
        let before = (zram.mm_stat(), zram.block_state(), zram.bd_stat(), zram.is_initialised());
        let reply = answer(zram, line);
        if reply.is_err() {
            let after = (zram.mm_stat(), zram.block_state(), zram.bd_stat(), zram.is_initialised());
            // A writeback or recompression pass may stop part-way with its
            // pages done; every other refusal changes nothing.
            let partial = name == "writeback" || name == "recompress";
            assert!(partial || after == before, "{line:?} refused but changed the device");
        } else if RECONFIGURING.contains(&name) {
            reconfigured = true;
        }
        if open.is_some() && line.trim() == "reset" {
            assert!(reply.is_err(), "reset taken while open");
        }
        if let Some(pool) = zram.pool() {
            pool.check_invariants().expect("pool invariants");
        }
    }
    reconfigured
}
