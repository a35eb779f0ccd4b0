//! Fuzz target for `mmkit_trace` (crate `mmkit-trace`): any bytes, read as
//! a stream and line by line, must never panic; every skipped line carries a
//! line number inside the input; every event round-trips through the
//! compact format.
//!
//! Run with `cargo +nightly fuzz run trace_parser` from the repository root
//! (see README, "Trace replay").
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmkit_trace::{parse_compact_line, parse_line, EventKind, TraceLine, TraceReader};

fuzz_target!(|data: &[u8]| {
    let mut reader = TraceReader::new(data);
    let mut events = 0u64;
    for _ in reader.by_ref() {
        events += 1;
    }
    let stats = reader.stats();
    assert_eq!(stats.events, events);
    assert!(stats.skipped <= stats.lines);
    for e in &stats.first_errors {
        assert!(e.line >= 1 && e.line <= stats.lines);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        for (i, line) in text.lines().enumerate() {
            let no = i as u64 + 1;
            match parse_line(line, no) {
                Err(e) => assert_eq!(e.line, no),
                Ok(TraceLine::Event { event, .. }) => {
                    let mut out = String::new();
                    event.write_compact(&mut out).unwrap();
                    let back = parse_compact_line(&out, no).expect("a written line parses");
                    assert_eq!(back.pfn, event.pfn);
                    assert_eq!(back.order, event.order);
                    assert_eq!(back.cpu, event.cpu);
                    assert_eq!(back.gfp, event.gfp);
                    assert_eq!(back.kind == EventKind::Alloc, event.kind == EventKind::Alloc);
                }
                Ok(_) => {}
            }
        }
    }
});
