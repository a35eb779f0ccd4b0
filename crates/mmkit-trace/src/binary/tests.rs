//! The binary format: round trips of random event streams, random and
//! mutated bytes never panic the decoder, framing and metadata errors.

use super::*;
use alloc::vec;
use proptest::prelude::*;

fn encode_all(events: &[BinaryEvent]) -> Vec<u8> {
    let mut enc = RecordEncoder::new();
    let mut out = Vec::new();
    for ev in events {
        enc.encode(ev, &mut out);
    }
    out
}

/// Decodes `bytes` fed in pieces of `step` bytes, as a streaming reader
/// would, keeping the unconsumed tail.
fn decode_all(bytes: &[u8], step: usize) -> Result<Vec<BinaryEvent>, BinaryError> {
    let mut dec = RecordDecoder::new();
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    for piece in bytes.chunks(step.max(1)) {
        buf.extend_from_slice(piece);
        let used = dec.decode(&buf, u64::MAX, |e| out.push(e))?;
        buf.drain(..used);
    }
    if !buf.is_empty() {
        return Err(BinaryError::Truncated);
    }
    Ok(out)
}

fn ev(kind: RecordKind, pfn: u64, order: u8, cpu: u32, gfp: u32) -> BinaryEvent {
    BinaryEvent { kind, pfn, order, cpu, gfp }
}

fn normalized(e: &BinaryEvent) -> BinaryEvent {
    let mut e = *e;
    match e.kind {
        RecordKind::Free => e.gfp = 0,
        RecordKind::FailedAlloc => e.pfn = 0,
        RecordKind::Alloc => {}
    }
    e
}

#[test]
fn common_events_take_one_word_and_new_gfps_three() {
    let events = [
        ev(RecordKind::Alloc, 0x100000, 0, 1, 0xcc0),
        ev(RecordKind::Alloc, 0x100001, 0, 0, 0xcc0),
        ev(RecordKind::Free, 0x100000, 0, 1, 0),
        ev(RecordKind::FailedAlloc, 0, 9, 1, 0xcc0),
        ev(RecordKind::Free, 0x100001, 0, 0, 0),
    ];
    let bytes = encode_all(&events);
    // The first allocation is wide (its GFP value is new), the rest fit.
    assert_eq!(bytes.len(), 3 * 8 + 4 * 8);
    assert_eq!(decode_all(&bytes, 8).unwrap(), events);
}

#[test]
fn wide_records_cover_big_cpus_jumps_and_a_full_table() {
    let mut events = vec![
        ev(RecordKind::Alloc, 7, 3, 4000, 0x100cca),
        ev(RecordKind::Free, u64::MAX - 8, 3, 600, 0),
        ev(RecordKind::Alloc, 0, 10, 0, 0x100cca),
        ev(RecordKind::Free, 1 << 50, 0, 0, 0),
    ];
    for g in 0..(MAX_GFP_TABLE as u32 + 10) {
        events.push(ev(RecordKind::Alloc, u64::from(g), 0, 1, g | 0x10_0000));
    }
    for g in 0..(MAX_GFP_TABLE as u32 + 10) {
        events.push(ev(RecordKind::Alloc, u64::from(g), 0, 1, g | 0x10_0000));
    }
    let bytes = encode_all(&events);
    assert_eq!(decode_all(&bytes, 24).unwrap(), events);
    assert_eq!(decode_all(&bytes, 13).unwrap(), events, "pieces that cut records");
}

#[test]
fn decode_stops_at_max_and_resumes() {
    let events: Vec<_> = (0..10).map(|i| ev(RecordKind::Alloc, i * 4, 2, 0, 0xcc0)).collect();
    let bytes = encode_all(&events);
    let mut dec = RecordDecoder::new();
    let mut out = Vec::new();
    let used = dec.decode(&bytes, 4, |e| out.push(e)).unwrap();
    assert_eq!(out.len(), 4);
    assert_eq!(dec.decoded(), 4);
    dec.decode(&bytes[used..], u64::MAX, |e| out.push(e)).unwrap();
    assert_eq!(out, events);
}

#[test]
fn malformed_records_are_typed_errors() {
    let bad = |word: u64, reason: &str| {
        let mut dec = RecordDecoder::new();
        match dec.decode(&word.to_le_bytes(), u64::MAX, |_| {}) {
            Err(BinaryError::BadRecord { at: 0, reason: r }) => assert_eq!(r, reason),
            other => panic!("{word:#x}: {other:?}"),
        }
    };
    bad(31 << 2, "order too large");
    bad(KIND_ALLOC, "gfp index outside the table");
    bad(KIND_FREE | 1 << 16, "a free carries a gfp index");
    bad(KIND_FREE | zigzag(-1) << DELTA_SHIFT, "pfn out of range");
    let wide = |word: u64, pfn: u64, extra: u64| {
        let mut b = Vec::new();
        for w in [word, pfn, extra] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        let mut dec = RecordDecoder::new();
        dec.decode(&b, u64::MAX, |_| {})
    };
    assert!(matches!(wide(KIND_WIDE | 3 << 7, 1, 0), Err(BinaryError::BadRecord { .. })));
    assert!(matches!(wide(KIND_WIDE | KIND_FREE << 7, 1, 5 << 32), Err(BinaryError::BadRecord { .. })));
    assert!(matches!(wide(KIND_WIDE | KIND_FAILED << 7, 1, 0), Err(BinaryError::BadRecord { .. })));
    assert!(matches!(wide(KIND_WIDE | 1 << 20, 1, 0), Err(BinaryError::BadRecord { .. })));
    // A wide record cut short is left for the next call, not an error.
    let mut dec = RecordDecoder::new();
    assert_eq!(dec.decode(&KIND_WIDE.to_le_bytes(), u64::MAX, |_| {}), Ok(0));
}

#[test]
fn preamble_and_trailer_framing() {
    assert_eq!(read_preamble(&preamble(0)), Ok(0));
    let mut p = preamble(0);
    p[8] = 2;
    assert_eq!(read_preamble(&p), Err(BinaryError::UnsupportedVersion(2)));
    let mut p = preamble(0);
    p[12] = 0x80;
    assert_eq!(read_preamble(&p), Err(BinaryError::UnknownFlags(0x80)));
    assert_eq!(read_preamble(b"MMKTRAC"), Err(BinaryError::NotBinary));
    let t = trailer(100, 20);
    assert_eq!(read_trailer(&t, 144), Ok((100, 20)));
    assert_eq!(read_trailer(&t, 145), Err(BinaryError::BadTrailer));
    assert_eq!(read_trailer(&t, 10), Err(BinaryError::BadTrailer));
    assert_eq!(read_trailer(&trailer(4, 116), 144), Err(BinaryError::BadTrailer), "inside the preamble");
    assert_eq!(read_trailer(&trailer(u64::MAX, 2), 144), Err(BinaryError::BadTrailer));
    assert_eq!(read_trailer(&t[..23], 144), Err(BinaryError::NoTrailer));
    let mut cut = t;
    cut[23] = b'x';
    assert_eq!(read_trailer(&cut, 144), Err(BinaryError::NoTrailer));
}

#[test]
fn metadata_round_trips_and_refuses_junk() {
    let mut m = BinaryMeta { events: 42, ..BinaryMeta::default() };
    m.push("peak_live_pages", 250922);
    m.push("header", "workload: git\nclone");
    m.push("header", "second");
    m.push("Bad Key", "x=y");
    let back = BinaryMeta::decode(&m.encode()).unwrap();
    assert_eq!(back, m);
    assert_eq!(back.get_u64("peak_live_pages"), Some(250922));
    assert_eq!(back.all("header").collect::<Vec<_>>(), ["workload: git clone", "second"]);
    assert_eq!(back.get("bad_key"), Some("x=y"));
    assert_eq!(back.get("missing"), None);
    for junk in [&b"1234567"[..], b"\0\0\0\0\0\0\0\0no equals\n", b"\0\0\0\0\0\0\0\0A=1\n", b"\0\0\0\0\0\0\0\0a=1"] {
        assert_eq!(BinaryMeta::decode(junk), Err(BinaryError::BadMetadata), "{junk:?}");
    }
    assert_eq!(BinaryMeta::decode(&[0xff; 12]), Err(BinaryError::BadMetadata));
}

fn arb_event() -> impl Strategy<Value = BinaryEvent> {
    let kind =
        prop_oneof![8 => Just(RecordKind::Alloc), 8 => Just(RecordKind::Free), 1 => Just(RecordKind::FailedAlloc)];
    let pfn = prop_oneof![8 => 0x10_0000u64..0x10_4000, 1 => any::<u64>()];
    let cpu = prop_oneof![8 => 0u32..4, 1 => any::<u32>()];
    let gfp = prop_oneof![8 => prop::sample::select(vec![0xcc0u32, 0x100cca, 0x500cc2, 0x2800]), 1 => any::<u32>()];
    (kind, pfn, 0u8..=30, cpu, gfp).prop_map(|(kind, pfn, order, cpu, gfp)| BinaryEvent { kind, pfn, order, cpu, gfp })
}

proptest! {
    #[test]
    fn random_streams_round_trip(events in prop::collection::vec(arb_event(), 0..300), step in 1usize..64) {
        let bytes = encode_all(&events);
        let want: Vec<_> = events.iter().map(normalized).collect();
        prop_assert_eq!(decode_all(&bytes, step).unwrap(), want);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), max in 0u64..100) {
        let mut dec = RecordDecoder::new();
        let mut n = 0u64;
        if let Ok(used) = dec.decode(&bytes, max, |_| n += 1) {
            prop_assert!(used <= bytes.len());
            prop_assert!(n <= max);
            prop_assert_eq!(n, dec.decoded());
        }
        let _ = BinaryMeta::decode(&bytes);
        let _ = read_preamble(&bytes);
        let _ = read_trailer(&bytes, bytes.len() as u64);
    }

    #[test]
    fn flipped_bits_give_events_or_typed_errors(events in prop::collection::vec(arb_event(), 1..100), flip in any::<usize>()) {
        let mut bytes = encode_all(&events);
        let bit = flip % (bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        let mut dec = RecordDecoder::new();
        let mut out = Vec::new();
        match dec.decode(&bytes, u64::MAX, |e| out.push(e)) {
            Ok(used) => prop_assert!(used <= bytes.len()),
            Err(BinaryError::BadRecord { at, .. }) => prop_assert_eq!(at, out.len() as u64),
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
        for e in &out {
            prop_assert!(u32::from(e.order) <= MAX_TRACE_ORDER);
        }
    }
}

#[test]
fn trace_events_convert_both_ways() {
    let text = "0 0 1 a 199258 2 0 0x500cc2\n1 5 0 f 199258 2 - -\n2 9 1 a - 9 1 0x140dca\n";
    for (i, line) in text.lines().enumerate() {
        let parsed = crate::parse_compact_line(line, i as u64 + 1).unwrap();
        let b = BinaryEvent::from_trace_event(&parsed);
        let back = b.to_trace_event(parsed.seq);
        assert_eq!(
            (back.kind, back.pfn, back.order, back.cpu, back.gfp),
            (parsed.kind, parsed.pfn, parsed.order, parsed.cpu, parsed.gfp)
        );
    }
}
