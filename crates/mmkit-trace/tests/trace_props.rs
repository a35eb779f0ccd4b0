//! Property tests of the trace parser: arbitrary bytes and lines never make
//! it panic, every skipped line carries its line number, and every event
//! survives a round trip through the compact format.

use mmkit::Gfp;
use mmkit_trace::{parse_compact_line, parse_line, EventKind, TraceEvent, TraceLine, TraceReader};
use proptest::prelude::*;

/// Lines that look like trace lines, with pieces cut, doubled and mangled.
fn near_lines() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "0",
        "17",
        "a",
        "f",
        "-",
        "0x",
        "0xcc0",
        "ff",
        "[000]",
        "[1]",
        "154.747343:",
        "kmem:mm_page_alloc:",
        "kmem:mm_page_free:",
        "mm_page_free_batched:",
        "page=(nil)",
        "pfn=0x10",
        "order=3",
        "order=99",
        "migratetype=1",
        "gfp_flags=GFP_KERNEL|__GFP_ZERO",
        "gfp_flags=|",
        "gfp_flags=__GFP_X",
        "#",
        "=",
        ":",
        "\t",
        "  ",
        "é",
        "\u{0}",
    ]);
    prop::collection::vec(pieces, 0..14).prop_map(|v| v.join(" "))
}

fn arb_event() -> impl Strategy<Value = TraceEvent> {
    (
        any::<u64>(),
        any::<u64>(),
        0..mmkit_trace::MAX_TRACE_CPUS,
        any::<bool>(),
        prop::option::of(0..mmkit_trace::MAX_TRACE_PFN_END >> 30),
        0u32..=30,
        0..mmkit_trace::MAX_TRACE_MIGRATETYPES as u8,
        any::<u32>(),
    )
        // Every field in range: a PFN below 2^22 blocks of 2^30 pages ends
        // inside the 2^52 pages a line may name whatever its order.
        .prop_map(|(seq, time_ns, cpu, alloc, pfn, order, mt, gfp)| {
            let kind = if alloc { EventKind::Alloc } else { EventKind::Free };
            TraceEvent {
                seq,
                time_ns,
                cpu,
                kind,
                pfn: if alloc { pfn } else { Some(pfn.unwrap_or(0)) },
                order,
                migratetype: alloc.then_some(mt),
                gfp: if alloc { Gfp::from_bits(gfp) } else { Gfp::EMPTY },
                unknown_gfp: false,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(line in ".{0,200}", no in 1u64..1_000_000) {
        if let Err(e) = parse_line(&line, no) {
            prop_assert_eq!(e.line, no);
        }
    }

    #[test]
    fn near_miss_lines_never_panic(line in near_lines(), no in 1u64..1000) {
        match parse_line(&line, no) {
            Err(e) => prop_assert_eq!(e.line, no),
            Ok(TraceLine::Event { event, .. }) => prop_assert!(event.order <= 30),
            Ok(_) => {}
        }
    }

    #[test]
    fn arbitrary_bytes_stream_with_line_numbers(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let mut reader = TraceReader::new(&bytes[..]);
        let events = reader.by_ref().count() as u64;
        let stats = reader.stats();
        prop_assert_eq!(stats.events, events);
        let lines = bytes.split(|&b| b == b'\n').count() as u64 - u64::from(bytes.last() == Some(&b'\n') || bytes.is_empty());
        prop_assert_eq!(stats.lines, lines);
        for e in &stats.first_errors {
            prop_assert!(e.line >= 1 && e.line <= stats.lines);
        }
        prop_assert!(stats.skipped <= stats.lines);
    }

    #[test]
    fn compact_round_trip(ev in arb_event()) {
        let mut line = String::new();
        ev.write_compact(&mut line).unwrap();
        prop_assert_eq!(parse_compact_line(&line, 1).unwrap(), ev);
    }
}
