//! Fuzz target for the plugin's request layer (`mmkit_nbdkit::ops`) on two
//! devices at once: the input is a stream of requests — read, write, trim,
//! zero with and without holes, block status, open and close of a
//! connection, and the control socket's `reset` and `disksize` — each
//! checked against a model of each device (its bytes, or none while
//! uninitialised). Reads must return the model's bytes, block status must
//! cover what was asked and call nothing a hole that holds data, errors
//! must change nothing, and nothing may panic. The devices are kept from
//! one input to the next (see `mmkit_fuzz`): each input starts on two
//! blank devices of the same size.
//!
//! Run with `cargo +nightly fuzz run nbd_requests` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmkit_fuzz::zram::map;
use mmkit_fuzz::Persistent;
use mmkit_nbdkit::control::answer;
use mmkit_nbdkit::ops::{self, BlockState};
use mmkit_zram::{Zram, ZramConfig, ZramError};

const SIZE: u64 = 8 * 4096 + 512;

/// What a device should hold: its bytes, or `None` while uninitialised.
struct Model {
    bytes: Option<Vec<u8>>,
}

/// The two devices, kept from one input to the next (see `mmkit_fuzz`).
static DEVICES: Persistent<[Zram; 2]> = Persistent::new();

fn new_device() -> Zram {
    Zram::new(map(), ZramConfig { disksize: SIZE, ..ZramConfig::default() }).expect("a device")
}

fuzz_target!(|data: &[u8]| DEVICES.with(|| [new_device(), new_device()], |devices| run(devices, data)));

/// Brings `zram` back to an initialised device of `SIZE` bytes that reads
/// as zeroes: this target changes nothing else of its configuration.
fn make_blank(zram: &Zram) {
    let rounded = SIZE.next_multiple_of(4096);
    if zram.disksize() != rounded {
        if zram.is_initialised() {
            answer(zram, "reset").expect("nobody holds the device open between inputs");
        }
        answer(zram, &format!("disksize {SIZE}")).expect("an uninitialised device takes a size");
    }
    zram.open().expect("no reset runs").discard(0, rounded).expect("an initialised device");
}

/// Runs one input on two blank devices.
fn run(devices: &[Zram; 2], data: &[u8]) {
    for zram in devices {
        make_blank(zram);
    }
    // Sizes round up to whole pages.
    let rounded = SIZE.next_multiple_of(4096) as usize;
    let mut models: Vec<Model> = (0..2).map(|_| Model { bytes: Some(vec![0; rounded]) }).collect();
    let mut opens: Vec<Vec<mmkit_zram::OpenHandle<'_>>> = vec![Vec::new(), Vec::new()];
    let mut input = data;
    let mut take = |n: usize| -> Option<&[u8]> {
        if input.len() < n {
            return None;
        }
        let (head, rest) = input.split_at(n);
        input = rest;
        Some(head)
    };
    while let Some(op) = take(6) {
        let which = usize::from(op[0] & 1);
        let (zram, model) = (&devices[which], &mut models[which]);
        let offset = u64::from(u16::from_le_bytes([op[1], op[2]])) * 3 % (SIZE + 8192);
        let len = u64::from(u16::from_le_bytes([op[3], op[4]])) % 20_000;
        let fill = op[5];
        let in_range = model.bytes.as_ref().is_some_and(|b| offset + len <= b.len() as u64);
        let result: Result<(), ZramError> = match op[0] >> 1 & 15 {
            0 | 1 => {
                let mut buf = vec![0xa5; len as usize];
                let got = zram.open().and_then(|io| io.read(offset, &mut buf));
                if got.is_ok() {
                    let want = &model.bytes.as_ref().expect("read ok on an uninitialised device")
                        [offset as usize..(offset + len) as usize];
                    assert!(buf == want, "read {len} at {offset} differs from the model");
                }
                got
            }
            2 | 3 => {
                let bytes: Vec<u8> = (0..len).map(|i| fill ^ (i as u8).wrapping_mul(31) ^ (i / 5) as u8).collect();
                let got = zram.open().and_then(|io| io.write(offset, &bytes));
                if got.is_ok() {
                    model.bytes.as_mut().expect("write ok uninitialised")[offset as usize..(offset + len) as usize]
                        .copy_from_slice(&bytes);
                }
                got
            }
            4 => {
                let got = zram.open().and_then(|io| ops::trim(&io, offset, len));
                if got.is_ok() {
                    // Whole pages inside the range read as zeroes after a trim.
                    let first = offset.div_ceil(4096) * 4096;
                    let end = (offset + len) / 4096 * 4096;
                    if first < end {
                        model.bytes.as_mut().expect("trim ok uninitialised")[first as usize..end as usize].fill(0);
                    }
                }
                got
            }
            5 | 6 => {
                let got = zram.open().and_then(|io| ops::zero(&io, offset, len, op[0] >> 1 & 15 == 5));
                if got.is_ok() {
                    model.bytes.as_mut().expect("zero ok uninitialised")[offset as usize..(offset + len) as usize]
                        .fill(0);
                }
                got
            }
            7 => ops::extents(zram, offset, len, fill & 1 == 1).map(|runs| {
                let bytes = model.bytes.as_ref().expect("extents ok uninitialised");
                let mut at = offset;
                for run in &runs {
                    assert_eq!(run.offset, at, "runs are contiguous");
                    assert!(run.length > 0 || len == 0);
                    if run.state != BlockState::Data {
                        let span = &bytes[run.offset as usize..(run.offset + run.length) as usize];
                        assert!(span.iter().all(|&b| b == 0), "a hole or zero run over data");
                    }
                    at += run.length;
                }
                if fill & 1 == 0 {
                    assert_eq!(at, offset + len, "block status covers the range");
                }
            }),
            8 => zram.open().map(|handle| opens[which].push(handle)),
            9 => {
                opens[which].pop();
                Ok(())
            }
            10 => {
                let open = !opens[which].is_empty();
                let got = answer(zram, "reset").map(|_| ());
                assert_eq!(got.is_err(), open, "reset refused exactly while open");
                if got.is_ok() {
                    model.bytes = None;
                }
                got.map_err(ZramError::Invalid)
            }
            11 => {
                let pages = u64::from(fill % 9) + 1;
                let got = answer(zram, &format!("disksize {}", pages * 4096 - u64::from(fill % 3)));
                if got.is_ok() {
                    assert!(model.bytes.is_none(), "disksize taken by an initialised device");
                    model.bytes = Some(vec![0; (pages * 4096) as usize]);
                }
                got.map(|_| ()).map_err(ZramError::Invalid)
            }
            _ => {
                let _ = answer(zram, if fill & 1 == 0 { "mm_stat" } else { "compact" });
                Ok(())
            }
        };
        if result.is_err() && in_range && model.bytes.is_some() {
            // In range on an initialised device: only the lifecycle refuses.
            assert!(matches!(op[0] >> 1 & 15, 8 | 10 | 11), "op {} refused in range: {result:?}", op[0] >> 1 & 15);
        }
        assert_eq!(zram.is_initialised(), model.bytes.is_some());
        assert_eq!(zram.disksize(), model.bytes.as_ref().map_or(0, |b| b.len() as u64));
    }
    drop(opens);
}
