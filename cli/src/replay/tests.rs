//! Replay tests: a generated trace with every odd event the traces README
//! lists, and the sample trace of `../shared/traces/` when it is there.

use super::engine::Mode;
use super::{replay, ReplayArgs};
use mmkit::Report;
use mmkit_testkit::XorShift64;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A generated trace and the blocks it leaves allocated (kernel PFN → order).
struct Generated {
    text: String,
    live: BTreeMap<u64, u32>,
    events: u64,
}

/// Simulates a kernel handing out blocks in a 64 MiB region starting at
/// PFN 0x100000 and writes its events in the compact format, with: frees
/// of blocks allocated before the recording, an order-10 zone-growth free,
/// re-allocation of a block whose free was not traced, a failed
/// allocation, a malformed line and a `perf script` line.
fn generate(seed: u64, events: u64) -> Generated {
    const BASE: u64 = 0x100000;
    const PAGES: u64 = 1 << 14;
    let gfps = [0xcc0u32, 0x140dca, 0x152c4a, 0x52c50, 0x2800];
    let mut rng = XorShift64::new(seed);
    let mut used = vec![false; PAGES as usize];
    let mut live: BTreeMap<u64, u32> = BTreeMap::new();
    let mut text = String::from("# generated trace\n# buddyinfo_after: Node 0, zone Normal 1 1 1 1 1 1 1 1 1 1 1\n");
    let mut seq = 0u64;
    let mut line = |text: &mut String, cpu: u64, rest: &str| {
        text.push_str(&format!("{seq} {} {cpu} {rest}\n", seq * 1000));
        seq += 1;
    };
    let mut made = 0;
    while made < events {
        made += 1;
        let cpu = rng.below(2);
        let roll = rng.below(100);
        if roll < 2 {
            // Free of a block allocated before the recording, outside the region.
            line(&mut text, cpu, &format!("f {:x} {} - -", BASE + PAGES + rng.below(PAGES), 0));
        } else if roll < 3 && !live.is_empty() {
            // The block's free was not traced: it is allocated again.
            let (&pfn, &order) = live.iter().nth(rng.below(live.len() as u64) as usize).unwrap();
            line(&mut text, cpu, &format!("a {pfn:x} {order} 0 0xcc0"));
        } else if roll < 55 || live.is_empty() {
            let order = [0, 0, 0, 0, 1, 2, 3, 4, 9][rng.below(9) as usize];
            let size = 1u64 << order;
            let start = rng.below(PAGES / size) * size;
            if (start..start + size).any(|p| used[p as usize]) {
                continue;
            }
            (start..start + size).for_each(|p| used[p as usize] = true);
            live.insert(BASE + start, order);
            let gfp = gfps[rng.below(gfps.len() as u64) as usize];
            let mt = (gfp >> 3) & 3;
            line(&mut text, cpu, &format!("a {:x} {order} {mt} {gfp:#x}", BASE + start));
        } else {
            let (&pfn, &order) = live.iter().nth(rng.below(live.len() as u64) as usize).unwrap();
            live.remove(&pfn);
            let start = pfn - BASE;
            (start..start + (1 << order)).for_each(|p| used[p as usize] = false);
            line(&mut text, cpu, &format!("f {pfn:x} {order} - -"));
        }
    }
    line(&mut text, 0, "a - 3 1 0x140dca");
    line(&mut text, 1, &format!("f {:x} 10 - -", BASE + 2 * PAGES));
    text.push_str("this line is not an event\n");
    let events = seq + 1;
    let mut perf_free = None;
    if let Some((&pfn, &order)) = live.iter().next() {
        text.push_str(&format!("gen 1 [001] 99.000000001: kmem:mm_page_free: page=0x1 pfn={pfn:#x} order={order}\n"));
        live.remove(&pfn);
        perf_free = Some(pfn);
    }
    let events = if perf_free.is_some() { events } else { events - 1 };
    Generated { text, live, events }
}

fn write_xz(path: &Path, text: &str) {
    let mut enc = xz2::write::XzEncoder::new(Vec::new(), 6);
    enc.write_all(text.as_bytes()).unwrap();
    std::fs::write(path, enc.finish().unwrap()).unwrap();
}

/// A trace file in its own temporary directory, removed with it.
struct TempTrace {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for TempTrace {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

fn temp_trace(name: &str, text: &str) -> TempTrace {
    let dir = tempfile::Builder::new().prefix("mmkit-replay-").tempdir().unwrap();
    let path = dir.path().join(name);
    write_xz(&path, text);
    TempTrace { path, _dir: dir }
}

fn args(trace: &Path, mode: Mode) -> ReplayArgs {
    ReplayArgs {
        trace: trace.to_path_buf(),
        mode,
        memory: None,
        no_grouping: false,
        compare: false,
        no_compact: false,
        compact_proactiveness: None,
        compact_marks: None,
        compact_interval: 8192,
        pcp_upkeep: super::PcpUpkeep::None,
        policy: mmkit::PlacementPolicy::default(),
        json: false,
        peer: None,
        samples: 20,
        limit: None,
        check: true,
        plot: None,
        preload: false,
        cache: false,
        strict: false,
    }
}

#[test]
fn placed_mode_ends_with_the_traces_live_blocks() {
    let g = generate(7, 4000);
    let path = temp_trace("placed.trace.xz", &g.text);
    let mut seen = BTreeMap::new();
    let report = replay(&args(&path, Mode::Placed), false, |engine, mm| {
        seen = engine.live_blocks().collect();
        let live_pages: u64 = seen.values().map(|&o| 1u64 << o).sum();
        let zone_pages = mm.zones().iter().map(|z| z.managed_pages()).sum::<u64>();
        assert_eq!(Report::new(mm).nr_free_pages(), zone_pages - live_pages, "every other page is free");
        for &pfn in seen.keys() {
            assert!(mm.page_count(mmkit::Pfn(pfn)).unwrap() >= 1, "{pfn:#x} is allocated in mmkit");
        }
    })
    .unwrap();
    assert_eq!(seen, g.live.iter().map(|(&p, &o)| (p, o)).collect::<BTreeMap<_, _>>());
    assert_eq!(report.invariants.as_deref(), Some("ok"));
    assert_eq!(report.double_handouts, Some(0));
    assert_eq!(report.failures, 0);
    let c = &report.counts;
    assert_eq!(c.zone_growth_frees, 1);
    assert!(c.unseen_frees() > 0 && c.implied_frees > 0);
    assert_eq!(c.trace_failed_by_order[3], 1);
    assert_eq!(c.events, g.events);
    assert_eq!(report.trace.source.skipped, 1);
    assert_eq!(report.counts.live_pages, g.live.values().map(|&o| 1u64 << o).sum::<u64>());
}

#[test]
fn policy_mode_never_hands_out_a_page_twice() {
    let g = generate(11, 6000);
    let path = temp_trace("policy.trace.xz", &g.text);
    let every = mmkit::PlacementPolicy::ALL.iter().flat_map(|&p| [(p, false), (p, true)]);
    for (policy, no_grouping) in every {
        let mut a = args(&path, Mode::Policy);
        a.no_grouping = no_grouping;
        a.policy = policy;
        a.peer = Some("buddy_system_allocator".into());
        let mut live_mmkit = Vec::new();
        let report = replay(&a, false, |engine, _| live_mmkit = engine.live_mmkit_blocks().collect()).unwrap();
        assert_eq!(report.double_handouts, Some(0));
        assert_eq!(report.invariants.as_deref(), Some("ok"));
        assert_eq!(report.counts.free_errors, 0);
        // The blocks mmkit holds at the end are disjoint and as many as the trace's.
        live_mmkit.sort_unstable();
        for pair in live_mmkit.windows(2) {
            assert!(pair[0].0 + (1 << pair[0].1) <= pair[1].0, "{pair:?} overlap");
        }
        assert_eq!(live_mmkit.len(), g.live.len());
        assert!((0.0..=1.0).contains(&report.unusable_index_order9));
        assert!((20..=23).contains(&report.samples.len()), "{} samples", report.samples.len());
        let mean = report.samples[1..].iter().map(|s| s.unusable_index_order9).sum::<f64>()
            / (report.samples.len() - 1) as f64;
        assert!((report.unusable_index_order9_mean - mean).abs() < 1e-9, "mean of the samples after the start");
        let peer = report.peer.unwrap();
        assert_eq!(peer.failures, 0);
        assert_eq!(peer.live_pages, report.counts.live_pages);
        assert_eq!(peer.index_samples.len(), 20, "the peer is sampled at the same points");
    }
}

#[test]
fn compare_replays_every_configuration_and_the_peer() {
    let g = generate(5, 3000);
    let path = temp_trace("compare.trace.xz", &g.text);
    let mut a = args(&path, Mode::Policy);
    a.compare = true;
    let rows = super::compare::compare(&a).unwrap();
    let configurations = super::compare::configurations(true);
    assert_eq!(rows.len(), configurations.len() + 1);
    assert!(rows.last().unwrap().name.starts_with("peer "));
    assert_eq!(rows[0].name, "linux");
    assert!(rows.iter().any(|r| r.name == "linux --no-grouping"));
    for r in &rows {
        assert!((0.0..=1.0).contains(&r.unusable_index_order9_mean), "{r:?}");
        assert!(!r.series.is_empty());
    }
    let table = super::compare::table(&a, &rows);
    assert_eq!(table.lines().count(), rows.len() + 2, "{table}");
}

#[test]
fn compaction_moves_blocks_and_later_frees_find_them() {
    // 8 MiB filled with order-0 movable pages, three of every four freed,
    // then an order-9 request: only compaction can serve it. Then every
    // page still live is freed by its trace PFN.
    let mut text = String::new();
    let mut seq = 0;
    let mut event = |text: &mut String, rest: String| {
        text.push_str(&format!("{seq} {seq} 0 {rest}\n"));
        seq += 1;
    };
    for pfn in 0..2048u64 {
        event(&mut text, format!("a {:x} 0 1 0x140dca", 0x100000 + pfn));
    }
    for pfn in (0..2048u64).filter(|p| p % 4 != 3) {
        event(&mut text, format!("f {:x} 0 - -", 0x100000 + pfn));
    }
    event(&mut text, "a 100800 9 1 0x140dca".to_string());
    for pfn in (0..2048u64).filter(|p| p % 4 == 3) {
        event(&mut text, format!("f {:x} 0 - -", 0x100000 + pfn));
    }
    let path = temp_trace("compact.trace.xz", &text);
    let mut a = args(&path, Mode::Policy);
    a.memory = Some(8 << 20);
    a.no_compact = true;
    let without = replay(&a, false, |_, _| {}).unwrap();
    assert_eq!(without.counts.failures_by_order[9], 1, "fragmented: the order-9 request fails");
    assert!(without.compaction.is_none());
    a.no_compact = false;
    a.compact_interval = 64;
    // Direct compaction alone, then with proactive rounds every 64 events
    // (the fragmented zone scores above proactiveness 20's mark, and above
    // the other policies' own marks), with Linux's scanners and with
    // sparsest-first compaction.
    let cases = [
        (mmkit::PlacementPolicy::Linux, Some(0), true),
        (mmkit::PlacementPolicy::Linux, Some(20), false),
        (mmkit::PlacementPolicy::Lean, Some(0), true),
        (mmkit::PlacementPolicy::Lean, None, false),
        (mmkit::PlacementPolicy::TwoEnds, None, false),
    ];
    for (policy, proactiveness, direct) in cases {
        a.policy = policy;
        a.compact_proactiveness = proactiveness;
        let with = replay(&a, false, |_, _| {}).unwrap();
        assert_eq!(with.counts.failures_by_order[9], 0, "compaction made room");
        let c = with.compaction.as_ref().unwrap();
        if direct {
            assert!(c.compact_stall >= 1 && c.compact_success == 1 && c.proactive_runs == 0, "{c:?}");
        } else {
            assert!(c.proactive_runs > 0 && c.compact_stall == 0, "{c:?}");
        }
        assert!(c.pgmigrate_success > 0);
        assert_eq!(c.followed_moves, c.pgmigrate_success, "every move followed");
        assert_eq!(with.double_handouts, Some(0));
        assert_eq!(with.invariants.as_deref(), Some("ok"));
        assert_eq!(with.counts.free_errors, 0);
        assert_eq!(with.counts.unseen_frees(), without.counts.unseen_frees(), "moved pages were found by their PFN");
        assert_eq!(with.counts.live_pages, 512, "only the order-9 block is left");
    }
}

#[test]
fn order9_failures_with_free_memory_are_counted() {
    // 8 MiB: fill it with order-0 pages (the watermarks refuse a few),
    // free three of every four (every aligned four-page group keeps a live
    // page, so nothing merges above order 1), then ask for an order-9 block.
    let mut text = String::new();
    let mut seq = 0;
    for pfn in 0..2048u64 {
        text.push_str(&format!("{seq} {seq} 0 a {:x} 0 1 0x140dca\n", 0x100000 + pfn));
        seq += 1;
    }
    for pfn in (0..2048u64).filter(|p| p % 4 != 3) {
        text.push_str(&format!("{seq} {seq} 0 f {:x} 0 - -\n", 0x100000 + pfn));
        seq += 1;
    }
    text.push_str(&format!("{seq} {seq} 0 a 200000 9 1 0x140dca\n"));
    let path = temp_trace("order9.trace.xz", &text);
    for policy in mmkit::PlacementPolicy::ALL {
        let mut a = args(&path, Mode::Policy);
        a.memory = Some(8 << 20);
        a.policy = policy;
        a.no_compact = true;
        let report = replay(&a, false, |_, _| {}).unwrap();
        assert_eq!(report.counts.failures_by_order[9], 1, "{policy:?}");
        assert_eq!(report.order9_failures_with_2x_free, 1, "{policy:?}");
    }
}

#[test]
fn small_memory_counts_failures_instead_of_failing() {
    let g = generate(3, 3000);
    let path = temp_trace("small.trace.xz", &g.text);
    let mut a = args(&path, Mode::Policy);
    a.memory = Some(4 << 20);
    let report = replay(&a, false, |_, _| {}).unwrap();
    assert!(report.failures > 0);
    assert_eq!(report.double_handouts, Some(0));
    assert_eq!(report.invariants.as_deref(), Some("ok"));
    a.mode = Mode::Placed;
    assert!(matches!(replay(&a, false, |_, _| {}), Err(super::ReplayError::Usage(_))), "--memory is for policy mode");
}

#[test]
fn unreadable_or_empty_traces_are_usage_errors() {
    let a = args(Path::new("/nonexistent/trace.xz"), Mode::Policy);
    assert!(matches!(replay(&a, false, |_, _| {}), Err(super::ReplayError::Usage(_))));
    let path = temp_trace("empty.trace.xz", "# only a header\nnot an event\n");
    assert!(matches!(replay(&args(&path, Mode::Policy), false, |_, _| {}), Err(super::ReplayError::Usage(_))));
    let path = temp_trace("failed.trace.xz", "0 0 0 a - 0 0 0xcc0\n1 1 1 a - 3 1 0x140dca\n");
    assert!(matches!(replay(&args(&path, Mode::Placed), false, |_, _| {}), Err(super::ReplayError::Usage(_))));
    let far = "0 0 0 a 100 0 0 0xcc0\n1 1 0 a 4000000000 0 0 0xcc0\n";
    let path = temp_trace("far.trace.xz", far);
    assert!(
        matches!(replay(&args(&path, Mode::Policy), false, |_, _| {}), Err(super::ReplayError::Usage(_))),
        "span too large"
    );
}

/// The sample trace, when `../shared/traces/` is beside the repository.
fn sample_trace() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces/gittar.trace.xz");
    if path.exists() {
        Some(path)
    } else {
        println!(
            "note: ../shared/traces/gittar.trace.xz not found; the sample-trace tests ran on generated traces only"
        );
        None
    }
}

#[test]
fn sample_trace_placed_and_policy() {
    let Some(path) = sample_trace() else {
        return;
    };
    // The whole trace: about 5 s in a debug build.
    let mut a = args(&path, Mode::Placed);
    let mut placed_live = 0;
    let placed = replay(&a, false, |engine, _| placed_live = engine.live_blocks().count()).unwrap();
    assert_eq!(placed.invariants.as_deref(), Some("ok"));
    assert_eq!(placed.failures, 0, "the kernel's own placement always fits");
    assert_eq!(placed_live as u64, placed.trace.scan.live_blocks_at_end, "placed ends with the trace's live blocks");
    assert_eq!(placed.counts.live_pages, placed.trace.scan.live_pages_at_end);
    // The counts the traces README gives for this trace.
    assert_eq!(placed.counts.unseen_frees(), 2968);
    assert_eq!(placed.counts.implied_frees, 206);
    assert_eq!(placed.counts.live_pages, 250532);
    assert_eq!(placed.trace.scan.peak_live_pages, placed.counts.peak_live_pages);
    a.mode = Mode::Policy;
    let policy = replay(&a, false, |_, _| {}).unwrap();
    assert_eq!(policy.double_handouts, Some(0));
    assert_eq!(policy.invariants.as_deref(), Some("ok"));
    assert_eq!(policy.counts.live_pages, placed.counts.live_pages);
    assert!(policy.linux_after.is_some(), "the header's buddyinfo_after is read");
}

/// The report without what differs between two runs of the same events
/// (timings, rates, the file names and how they were stored).
fn comparable(report: &super::report::Report) -> serde_json::Value {
    let mut v = serde_json::to_value(report).unwrap();
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for k in [
                    "timing",
                    "events_per_sec",
                    "loop_events_per_sec",
                    "seconds",
                    "path",
                    "compression",
                    "replayed_from",
                    "ratio_vs_mmkit",
                ] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

#[test]
fn binary_copy_replays_exactly_like_the_text() {
    let g = generate(13, 5000);
    let path = temp_trace("binary.trace.xz", &g.text);
    let out = path.with_extension("mmkt");
    let summary = super::cache::convert(&super::cache::ConvertArgs {
        trace: path.to_path_buf(),
        out: Some(out.clone()),
        uncompressed: false,
        strict: false,
    })
    .unwrap();
    assert!(summary.contains(&format!("{} events", g.events)), "{summary}");
    for preload in [false, true] {
        let mut a = args(&path, Mode::Policy);
        a.preload = preload;
        a.peer = Some("buddy_system_allocator".into());
        let text = replay(&a, false, |_, _| {}).unwrap();
        a.trace = out.clone();
        let binary = replay(&a, false, |_, _| {}).unwrap();
        assert_eq!(binary.trace.compression, "binary");
        assert!(binary.trace.scan.seconds < 0.5, "no first pass over a binary file");
        assert_eq!(comparable(&text), comparable(&binary), "preload {preload}");
        // With --limit the binary file is read by a first pass too (the
        // text's line counts stay those of the whole file).
        a.limit = Some(1000);
        let cut = comparable(&replay(&a, false, |_, _| {}).unwrap());
        a.trace = path.to_path_buf();
        let text = comparable(&replay(&a, false, |_, _| {}).unwrap());
        for key in ["counts", "final", "samples", "unusable_index_order9_mean", "peer"] {
            assert_eq!(text[key], cut[key], "{key} with a limit");
        }
        assert_eq!(text["trace"]["peak_live_pages"], cut["trace"]["peak_live_pages"]);
    }
    // Converting the binary copy again gives the same events.
    let again = out.with_extension("again");
    super::cache::convert(&super::cache::ConvertArgs {
        trace: out.clone(),
        out: Some(again.clone()),
        uncompressed: true,
        strict: false,
    })
    .unwrap();
    let a = args(&again, Mode::Placed);
    let b = args(&path, Mode::Placed);
    assert_eq!(comparable(&replay(&a, false, |_, _| {}).unwrap()), comparable(&replay(&b, false, |_, _| {}).unwrap()));
}

#[test]
fn cache_is_written_once_reused_and_renewed_when_the_trace_changes() {
    let g = generate(17, 3000);
    let path = temp_trace("cached.trace.xz", &g.text);
    let cache = super::cache::cache_path(&path);
    let _ = std::fs::remove_file(&cache);
    let mut a = args(&path, Mode::Policy);
    a.cache = true;
    let first = replay(&a, false, |_, _| {}).unwrap();
    assert!(cache.exists());
    assert_eq!(first.trace.replayed_from, cache.display().to_string());
    assert_eq!(first.trace.compression, "xz", "the first pass read the trace");
    let second = replay(&a, false, |_, _| {}).unwrap();
    assert_eq!(second.trace.compression, "binary", "no first pass over the text");
    assert_eq!(comparable(&first), comparable(&second));
    // A changed trace (other size) makes the cache stale.
    let g2 = generate(19, 2000);
    write_xz(&path, &g2.text);
    let third = replay(&a, false, |_, _| {}).unwrap();
    assert_eq!(third.trace.compression, "xz");
    assert_eq!(third.counts.events, g2.events);
    // A cache that cannot be written is a note, not an error.
    std::fs::remove_file(&cache).unwrap();
    std::fs::create_dir(&cache).unwrap();
    let fourth = replay(&a, false, |_, _| {}).unwrap();
    assert!(fourth.trace.cache_note.as_deref().unwrap_or("").contains("cannot write the cache"));
    assert_eq!(fourth.trace.replayed_from, path.display().to_string());
    std::fs::remove_dir(&cache).unwrap();
}

#[test]
fn broken_binary_files_are_errors_not_panics() {
    let g = generate(23, 2000);
    let path = temp_trace("broken.trace.xz", &g.text);
    let out = path.with_extension("mmkt");
    super::cache::convert(&super::cache::ConvertArgs {
        trace: path.to_path_buf(),
        out: Some(out.clone()),
        uncompressed: false,
        strict: false,
    })
    .unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let dir = out.parent().unwrap().to_path_buf();
    // Cut at several places, and with a flipped byte in the record stream.
    let mut variants: Vec<Vec<u8>> =
        [8usize, 16, 40, bytes.len() / 2, bytes.len() - 1].iter().map(|&n| bytes[..n].to_vec()).collect();
    let mut flipped = bytes.clone();
    flipped[20] ^= 0x55;
    variants.push(flipped);
    for (i, v) in variants.iter().enumerate() {
        let p = dir.join(format!("broken-{i}.mmkt"));
        std::fs::write(&p, v).unwrap();
        let r = replay(&args(&p, Mode::Policy), false, |_, _| {});
        assert!(r.is_err(), "variant {i} replayed");
    }
}

#[test]
fn a_block_moved_twice_before_the_moves_are_applied_is_followed() {
    use super::engine::{Engine, Ev, MoveLog, Op};
    use mmkit::{CopyMigrator, Gfp, MemoryMapBuilder, MigrateRequest, Migrator, Pfn, ZoneType};
    use std::sync::Arc;
    let log = Arc::new(MoveLog::default());
    let mm = MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 0x100000..0x102000)
        .nr_cpus(1)
        .per_cpu_lists(false)
        .build()
        .unwrap();
    let mut engine = Engine::new(&mm, Mode::Policy, 0x100000..0x102000, true).unwrap();
    engine.follow_moves(log.clone());
    let gfp = Gfp::HIGHUSER_MOVABLE;
    engine.apply(&Ev { pfn: 0x100010, gfp: gfp.bits(), cpu: 0, order: 0, op: Op::Alloc });
    let at = |engine: &Engine<'_>| engine.live_mmkit_blocks().next().unwrap().0;
    let first = at(&engine);
    // Two moves (first -> b -> c) logged before the engine looks.
    let recorder = log.clone();
    let migrator = CopyMigrator::new(move |o, n, k| recorder.record(o, n, k));
    let mut from = Pfn(first);
    for target in [Pfn(0x101000), Pfn(0x101800)] {
        mm.alloc_pages_at(target, 0, gfp).unwrap();
        let request = MigrateRequest { pfn: from, order: 0, gfp, nid: 0 };
        migrator.migrate_page_to(&mm, &request, target).unwrap();
        from = target;
    }
    engine.apply_moves();
    assert_eq!(at(&engine), 0x101800, "the live entry follows both moves");
    assert_eq!(engine.counts.compaction_moves, 1, "one block, booked once");
    // The trace's free of its PFN now frees the block where it is.
    engine.apply(&Ev { pfn: 0x100010, gfp: 0, cpu: 0, order: 0, op: Op::Free });
    assert_eq!(engine.counts.free_errors, 0);
    assert_eq!(engine.double_handouts, 0);
    engine.finish();
    mmkit::Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), 0x2000, "every page is free again");
}

#[test]
fn pcp_upkeep_empties_the_pinned_lists_between_events() {
    let g = generate(11, 4000);
    let path = temp_trace("upkeep.trace.xz", &g.text);
    let mut a = args(&path, Mode::Policy);
    a.compact_interval = 64;
    let refills = |a: &ReplayArgs| {
        let r = replay(a, false, |_, _| {}).unwrap();
        assert_eq!(r.double_handouts, Some(0));
        assert_eq!(r.invariants.as_deref(), Some("ok"));
        r.placement.pcp_refills
    };
    let none = refills(&a);
    a.pcp_upkeep = super::PcpUpkeep::Drain;
    let drained = refills(&a);
    // Every drain leaves the lists empty: the next request on each CPU
    // refills.
    assert!(drained > none + 10, "a drain every 64 events: {drained} refills vs {none}");
    a.pcp_upkeep = super::PcpUpkeep::Decay;
    assert!(refills(&a) >= none, "decay only takes pages off the lists");
}
