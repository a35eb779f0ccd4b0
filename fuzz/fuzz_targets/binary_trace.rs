//! Fuzz target for the binary trace format (`mmkit_trace::binary`): any
//! bytes, read as a record stream in pieces, as metadata, preamble and
//! trailer, must never panic; decoded events re-encode to records that
//! decode to the same events.
//!
//! Run with `cargo +nightly fuzz run binary_trace` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmkit_trace::binary::{read_preamble, read_trailer, BinaryMeta, RecordDecoder, RecordEncoder};

fuzz_target!(|data: &[u8]| {
    let _ = read_preamble(data);
    let _ = read_trailer(data, data.len() as u64);
    if let Ok(meta) = BinaryMeta::decode(data) {
        assert_eq!(BinaryMeta::decode(&meta.encode()), Ok(meta));
    }
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let mut dec = RecordDecoder::new();
    let mut events = Vec::new();
    let mut buf = Vec::new();
    for piece in data.chunks(step) {
        buf.extend_from_slice(piece);
        match dec.decode(&buf, u64::MAX, |e| events.push(e)) {
            Ok(used) => {
                assert!(used <= buf.len());
                buf.drain(..used);
            }
            Err(_) => break,
        }
    }
    let mut enc = RecordEncoder::new();
    let mut bytes = Vec::new();
    for e in &events {
        enc.encode(e, &mut bytes);
    }
    let mut again = Vec::new();
    RecordDecoder::new().decode(&bytes, u64::MAX, |e| again.push(e)).expect("re-encoded records decode");
    assert_eq!(again, events);
});
