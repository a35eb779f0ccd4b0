//! Hand-written lines of every kind the parser meets.

use super::*;
use alloc::string::String;

fn event(line: &str) -> TraceEvent {
    match parse_line(line, 7) {
        Ok(TraceLine::Event { event, .. }) => event,
        other => panic!("{line:?} gave {other:?}"),
    }
}

fn error(line: &str) -> TraceParseError {
    match parse_line(line, 42) {
        Err(e) => {
            assert_eq!(e.line, 42);
            e
        }
        Ok(other) => panic!("{line:?} parsed as {other:?}"),
    }
}

#[test]
fn compact_alloc_free_and_failed_alloc() {
    let a = event("0 0 1 a 199258 0 0 0x500cc2");
    assert_eq!(a.kind, EventKind::Alloc);
    assert_eq!((a.seq, a.time_ns, a.cpu, a.pfn, a.order), (0, 0, 1, Some(0x199258), 0));
    assert_eq!(a.migratetype, Some(0));
    assert_eq!(a.gfp, Gfp::HIGHUSER | Gfp::ACCOUNT);
    let f = event("1 81562 0 f 199271 3 - -");
    assert_eq!((f.kind, f.pfn, f.order, f.cpu, f.gfp), (EventKind::Free, Some(0x199271), 3, 0, Gfp::EMPTY));
    let failed = event("2 90000 1 a - 9 1 0x140dca");
    assert_eq!(failed.pfn, None);
    assert_eq!(failed.gfp, Gfp::HIGHUSER_MOVABLE | Gfp::ZERO | Gfp::COMP);
}

#[test]
fn compact_odd_spacing_and_headers() {
    let a = event("  5\t 10   1 a  ff   2 2  0x10  \r");
    assert_eq!((a.seq, a.pfn, a.order, a.migratetype), (5, Some(0xff), 2, Some(2)));
    assert_eq!(parse_line("# zones: DMA", 1), Ok(TraceLine::Header(" zones: DMA")));
    assert_eq!(parse_line("   \t", 1), Ok(TraceLine::Blank));
    assert_eq!(parse_line("", 1), Ok(TraceLine::Blank));
}

#[test]
fn compact_malformed_lines() {
    assert_eq!(error("0 0 1 a 199258 0 0").reason, "truncated line: no gfp column");
    assert_eq!(error("0 0 1").reason, "truncated line: no event letter");
    assert_eq!(error("0 0 1 a 10 0 0 0x1 extra").reason, "more than 8 columns");
    assert_eq!(error("0 0 1 x 10 0 0 0x1").reason, "event letter is neither `a` nor `f`");
    assert_eq!(error("0 0 1 f - 0 - -").reason, "a free needs a pfn");
    assert_eq!(error("0 0 1 a 10 31 0 0x1").reason, "order too large");
    assert_eq!(error("0 0 1 a zz 0 0 0x1").reason, "pfn is not a hex number");
    assert_eq!(error("0 0 1 a 10 0 0 cc0").reason, "gfp is not a 0x-prefixed hex number");
    assert_eq!(error("0 0 1 a 10 0 0 0x1ffffffff").reason, "gfp does not fit in 32 bits");
    assert_eq!(error("0 0 1 f 10 0 1 -").reason, "a free has `-` for migratetype and gfp");
    assert_eq!(error("-1 0 1 f 10 0 - -").reason, "sequence number is not a decimal number");
    assert_eq!(error("0 0 1 a 10 0 999 0x1").reason, "migratetype out of range (Linux has at most 7)");
    assert_eq!(error("0 0 1 a 10 0 x 0x1").reason, "bad migratetype");
    assert_eq!(error("0 0 1 a 11111111111111111 0 0 0x1").reason, "pfn is not a hex number");
}

#[test]
fn compact_round_trip() {
    for line in
        ["0 0 1 a 199258 0 0 0x500cc2", "1 81562 1 f 199271 0 - -", "2 3 0 a - 9 1 0x140dca", "3 4 5 a 0 10 - 0x0"]
    {
        let ev = parse_compact_line(line, 1).unwrap();
        let mut out = String::new();
        ev.write_compact(&mut out).unwrap();
        assert_eq!(out, line);
        assert_eq!(parse_compact_line(&out, 1).unwrap(), ev);
    }
}

#[test]
fn perf_alloc_and_free() {
    let a = event(
        "tar  2536 [000]   154.747343: kmem:mm_page_alloc: page=0xffffea0004fc2b80 pfn=0x13f0ae order=0 \
         migratetype=0 gfp_flags=GFP_KERNEL_ACCOUNT|__GFP_ZERO|__GFP_COMP",
    );
    assert_eq!((a.kind, a.cpu, a.pfn, a.order, a.migratetype), (EventKind::Alloc, 0, Some(0x13f0ae), 0, Some(0)));
    assert_eq!(a.time_ns, 154_747_343_000);
    assert_eq!(a.gfp, Gfp::KERNEL_ACCOUNT | Gfp::ZERO | Gfp::COMP);
    assert!(!a.unknown_gfp);
    let f = event("tar  2536 [001]   154.747343123: kmem:mm_page_free: page=0x13f0ae pfn=0x13f0ae order=2");
    assert_eq!((f.kind, f.cpu, f.pfn, f.order, f.time_ns), (EventKind::Free, 1, Some(0x13f0ae), 2, 154_747_343_123));
    let b = event(
        "kworker/u4:2-ev    85 [001]  9.5: kmem:mm_page_free_batched: page=0xffffea0000ab0000 pfn=0x2ac00 order=0",
    );
    assert_eq!((b.kind, b.pfn), (EventKind::FreeBatched, Some(0x2ac00)));
}

#[test]
fn perf_odd_comm_spacing_and_unknown_flags() {
    let a = event(
        "Web Content [x]  777   [1]\t 1.000000001:  mm_page_alloc:   pfn=0x10  order=3 \
         migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_SHINY|0x4000000 extra=1",
    );
    assert_eq!((a.cpu, a.pfn, a.order, a.time_ns), (1, Some(0x10), 3, 1_000_000_001));
    assert!(a.unknown_gfp, "__GFP_SHINY is not a flag");
    assert_eq!(a.gfp, Gfp::HIGHUSER_MOVABLE | Gfp::from_bits(0x400_0000));
    let none = event("x 1 [0] 1.0: kmem:mm_page_alloc: page=0x1 pfn=0x1 order=0 migratetype=0 gfp_flags=none");
    assert_eq!(none.gfp, Gfp::EMPTY);
    let failed =
        event("x 1 [0] 1.0: kmem:mm_page_alloc: page=(nil) pfn=0x0 order=4 migratetype=1 gfp_flags=GFP_KERNEL");
    assert_eq!(failed.pfn, None);
    let other = parse_line("x 1 [0] 1.0: kmem:mm_page_pcpu_drain: page=0x1 pfn=0x1 order=0 migratetype=1", 3);
    assert_eq!(other, Ok(TraceLine::OtherEvent("kmem:mm_page_pcpu_drain")));
}

#[test]
fn perf_truncated_and_malformed() {
    let full = "tar 2536 [000] 154.747343: kmem:mm_page_alloc: page=0x1 pfn=0x13f0ae order=0 migratetype=0 gfp_flags=GFP_KERNEL";
    // Every prefix of a valid line either parses or is an error: never a panic.
    for end in 0..full.len() {
        let _ = parse_line(&full[..end], 1);
    }
    assert_eq!(
        error("tar 2536 [000] 154.747343: kmem:mm_page_alloc: page=0x1 pfn=0x13f0ae order=0").reason,
        "truncated line: no gfp_flags="
    );
    assert_eq!(
        error("tar 2536 [000] 154.747343: kmem:mm_page_free: page=0x1 pfn=0x13f0ae").reason,
        "truncated line: no order="
    );
    assert_eq!(error("tar 2536 [000] 154.747343:").reason, "truncated line: no event name");
    assert_eq!(error("tar 2536 154.747343: kmem:mm_page_free: pfn=0x1 order=0").reason, "no [cpu] column");
    assert_eq!(
        error("tar 1 [0] 154: kmem:mm_page_free: pfn=0x1 order=0").reason,
        "timestamp is not `seconds.fraction:`"
    );
    assert_eq!(error("tar 1 [0] 1.5: kmem:mm_page_free: pfn=0x1 order").reason, "field is not `key=value`");
    assert_eq!(error("tar 1 [0] 1.5: kmem:mm_page_free: pfn=0xg order=0").reason, "pfn is not a hex number");
    assert_eq!(error("tar 1 [0] 1.5: kmem:mm_page_free: pfn=0x1 order=99").reason, "order too large");
    assert_eq!(
        error("tar 1 [0] 1.5: kmem:mm_page_alloc: pfn=0x1 order=0 gfp_flags=GFP_KERNEL||__GFP_ZERO").reason,
        "empty term in gfp_flags"
    );
    assert_eq!(error("tar 1 [0] 1.5: kmem:mm_page_alloc: pfn=0x1 order=0 gfp_flags=").reason, "empty gfp_flags");
}

#[test]
fn perf_lines_convert_to_compact() {
    let a = event("tar 1 [1] 2.5: kmem:mm_page_alloc: page=0x1 pfn=0xabc order=1 migratetype=2 gfp_flags=GFP_NOFS|__GFP_RECLAIMABLE");
    let mut out = String::new();
    a.write_compact(&mut out).unwrap();
    assert_eq!(out, "0 2500000000 1 a abc 1 2 0xc50");
    let back = parse_compact_line(&out, 1).unwrap();
    assert_eq!((back.pfn, back.order, back.gfp, back.cpu), (a.pfn, a.order, a.gfp, a.cpu));
}

#[cfg(feature = "std")]
#[test]
fn reader_counts_skips_and_keeps_the_header() {
    let mut text = String::from("# name: t\n# more\n0 0 0 a 10 0 0 0xcc0\n");
    text.push_str("0 0 0 a 10\n"); // truncated: line 4
    text.push_str(&"x".repeat(MAX_LINE_BYTES + 10));
    text.push('\n'); // too long: line 5
    text.push_str("# not header any more\n1 1 0 f 10 0 - -\n");
    text.push_str("p 1 [1] 1.0: kmem:mm_page_free_batched: page=0x1 pfn=0x11 order=0\n");
    text.push_str("p 1 [1] 1.0: kmem:mm_page_alloc: page=(nil) pfn=0x0 order=0 migratetype=0 gfp_flags=__GFP_NOPE");
    let bytes = {
        let mut b = text.into_bytes();
        b.extend_from_slice(b"\n\xff\xfe\n");
        b
    };
    let mut reader = TraceReader::new(&bytes[..]);
    let events: alloc::vec::Vec<TraceEvent> = reader.by_ref().collect();
    assert_eq!(events.len(), 4);
    assert_eq!(events[2].seq, 2, "perf events are numbered as they come");
    let s = reader.stats();
    assert_eq!((s.allocs, s.failed_allocs, s.frees, s.batched_frees, s.unknown_gfp), (2, 1, 1, 1, 1));
    assert_eq!(s.skipped, 3);
    let lines: alloc::vec::Vec<u64> = s.first_errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [4, 5, 10]);
    assert_eq!(reader.header(), [" name: t", " more"]);
}

#[test]
fn lines_from_a_real_perf_script() {
    // `perf script` output of a recording on this kind of machine (Linux 6.18).
    let a = event(
        "            perf 29749 [001]  9757.591610:        kmem:mm_page_alloc: page=0x203fa1 pfn=0x203fa1 order=0 \
         migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_WRITE|__GFP_COMP",
    );
    assert_eq!((a.cpu, a.pfn, a.migratetype, a.time_ns), (1, Some(0x203fa1), Some(1), 9_757_591_610_000));
    assert_eq!(a.gfp.bits(), 0x141cca);
    let b = event(
        "       perf-exec 29750 [001]  9757.593132: kmem:mm_page_free_batched: page=0x1a7c7d pfn=0x1a7c7d order=0",
    );
    assert_eq!((b.kind, b.pfn, b.order), (EventKind::FreeBatched, Some(0x1a7c7d), 0));
}

#[test]
fn fields_out_of_range_are_malformed_lines_in_both_formats() {
    // The largest values that are in range parse.
    let a = event("0 0 8191 a fffffffffffff 0 5 0xcc0");
    assert_eq!((a.cpu, a.pfn, a.migratetype), (8191, Some(0xf_ffff_ffff_ffff), Some(5)));
    event("0 0 1 a ffffffffffc00 10 0 0xcc0");
    for (line, why) in [
        ("0 0 1 a ffffffffffffffff 0 0 0xcc0", "pfn out of range"),
        ("0 0 1 f 10000000000000 0 - -", "pfn out of range"),
        ("0 0 1 a ffffffffffc00 11 0 0xcc0", "pfn out of range"),
        ("0 0 999999 a 10 0 0 0xcc0", "cpu number out of range"),
        ("0 0 8192 f 10 0 - -", "cpu number out of range"),
        ("0 0 1 a 10 0 8 0xcc0", "migratetype out of range"),
        (
            "tar 1 [999999] 1.000001: kmem:mm_page_alloc: page=0x1 pfn=0x10 order=0 migratetype=0 gfp_flags=GFP_KERNEL",
            "cpu number out of range",
        ),
        ("tar 1 [000] 1.000001: kmem:mm_page_free: page=0x1 pfn=0xffffffffffffffff order=0", "pfn out of range"),
        (
            "tar 1 [000] 1.000001: kmem:mm_page_alloc: page=0x1 pfn=0x10 order=0 migratetype=200 gfp_flags=GFP_KERNEL",
            "migratetype out of range",
        ),
    ] {
        let e = error(line);
        assert!(e.reason.starts_with(why), "{line:?}: {}", e.reason);
    }
}
