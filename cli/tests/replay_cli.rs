//! End-to-end tests of `mmkit replay`: both trace formats, exit codes, the
//! JSON object's top-level fields and the two plots.

use serde_json::Value;
use std::process::{Command, Output};

fn mmkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmkit")).args(args).output().expect("the mmkit binary runs")
}

/// A temporary directory of its own, removed when dropped.
fn dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("mmkit-replay-cli-").tempdir().unwrap()
}

/// A `perf script` text: 64 order-0 pages and 4 order-2 blocks on two CPUs,
/// half freed again, one free of a page allocated before the recording.
fn perf_trace() -> String {
    let mut t = String::from("# perf script output\n");
    let mut time = 0u64;
    let mut line = |cpu: u32, rest: String| {
        time += 1234;
        t.push_str(&format!(
            "  tar  2536 [{cpu:03}] {}.{:06}: kmem:{rest}\n",
            100 + time / 1_000_000,
            time % 1_000_000
        ));
    };
    for i in 0..64u64 {
        line((i % 2) as u32, format!("mm_page_alloc: page=0xffffea0000000000 pfn={:#x} order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_COMP", 0x200000 + i));
    }
    for i in 0..4u64 {
        line(
            0,
            format!(
                "mm_page_alloc: page=0x1 pfn={:#x} order=2 migratetype=0 gfp_flags=GFP_KERNEL|__GFP_ZERO",
                0x200100 + 4 * i
            ),
        );
    }
    for i in (0..64u64).step_by(2) {
        line(1, format!("mm_page_free: page=0x1 pfn={:#x} order=0", 0x200000 + i));
    }
    line(0, "mm_page_free_batched: page=0x1 pfn=0x1fffff order=0".to_string());
    t
}

#[test]
fn replays_perf_text_as_json_with_top_level_fields() {
    let d = dir();
    let path = d.path().join("perf.txt");
    std::fs::write(&path, perf_trace()).unwrap();
    let out = mmkit(&["replay", path.to_str().unwrap(), "--json", "--peer", "buddy_system_allocator", "--check"]);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v["unusable_index_order9"].as_f64().is_some_and(|x| (0.0..=1.0).contains(&x)));
    assert!(v["events_per_sec"].as_f64().is_some_and(|x| x > 0.0));
    assert!(v["loop_events_per_sec"].as_f64().is_some());
    assert_eq!(v["mode"], "policy");
    assert_eq!(v["trace"]["events"], 101);
    assert_eq!(v["trace"]["batched_frees"], 1);
    assert_eq!(v["counts"]["unseen_frees_by_order"][0], 1);
    assert_eq!(v["counts"]["live_pages"], 32 + 16);
    assert_eq!(v["trace"]["peak_live_pages"], 64 + 16);
    assert_eq!(v["double_handouts"], 0);
    assert_eq!(v["invariants"], "ok");
    assert_eq!(v["peer"]["name"], "buddy_system_allocator");
    assert!(v["samples"].as_array().is_some_and(|s| !s.is_empty()));
    assert_eq!(v["final"]["free_pages_by_order_and_type"].as_array().map(Vec::len), Some(11));
}

#[test]
fn table_plots_and_placed_mode() {
    let d = dir();
    let path = d.path().join("perf.zst");
    std::fs::write(&path, zstd::encode_all(perf_trace().as_bytes(), 3).unwrap()).unwrap();
    let prefix = d.path().join("plot");
    let out = mmkit(&["replay", path.to_str().unwrap(), "--mode", "placed", "--plot", prefix.to_str().unwrap()]);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("placed mode") && text.contains("unusable free space index"), "{text}");
    for suffix in ["-free-by-order.png", "-pageblocks.png"] {
        let png = std::fs::read(d.path().join(format!("plot{suffix}"))).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{suffix} is a PNG");
    }
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let d = dir();
    let garbage = d.path().join("garbage");
    std::fs::write(&garbage, "not a trace\n\x00\x01\n").unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["replay".into(), d.path().join("missing.xz").display().to_string()],
        vec!["replay".into(), garbage.display().to_string()],
        vec!["replay".into(), garbage.display().to_string(), "--mode".into(), "sideways".into()],
        vec!["replay".into(), garbage.display().to_string(), "--memory".into(), "lots".into()],
        vec!["replay".into(), garbage.display().to_string(), "--peer".into(), "jemalloc".into()],
    ];
    for args in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = mmkit(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked") && !err.is_empty(), "{args:?}: {err}");
    }
    let path = d.path().join("t.txt");
    std::fs::write(&path, perf_trace()).unwrap();
    let out = mmkit(&["replay", path.to_str().unwrap(), "--mode", "placed", "--memory", "1G"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `cat TRACE | mmkit replay /dev/stdin`: the pipe is read once and the
/// replay is of every event, as from the file (it reported events it had
/// not replayed before).
#[test]
fn a_trace_on_a_pipe_is_replayed_whole() {
    use std::io::Write;
    let d = dir();
    let path = d.path().join("t.perf");
    std::fs::write(&path, perf_trace()).unwrap();
    let from_file: Value =
        serde_json::from_slice(&mmkit(&["replay", path.to_str().unwrap(), "--json"]).stdout).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .args(["replay", "/dev/stdin", "--check", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(perf_trace().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let from_pipe: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(from_pipe["counts"]["events"], from_file["counts"]["events"]);
    assert_eq!(from_pipe["counts"]["allocs"], from_file["counts"]["allocs"]);
    assert!(from_pipe["counts"]["events"].as_u64().unwrap() > 100);
}

/// A PFN of 2^64 - 1 or a CPU of 999999 is a malformed line, skipped and
/// counted with its number (the first aborted the replay, the second made
/// it build 256 CPUs); `--strict` makes the first such line fatal.
#[test]
fn fields_out_of_range_are_skipped_with_their_line_or_fatal_with_strict() {
    let d = dir();
    let path = d.path().join("t.perf");
    let mut text = perf_trace();
    text.push_str("  tar  2536 [000] 101.000001: kmem:mm_page_free: page=0x1 pfn=0xffffffffffffffff order=0\n");
    text.push_str("  tar  2536 [999999] 101.000002: kmem:mm_page_free: page=0x1 pfn=0x200001 order=0\n");
    std::fs::write(&path, &text).unwrap();
    let lines = text.lines().count();
    let out = mmkit(&["replay", path.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["trace"]["skipped_lines"], 2, "{}", json["trace"]);
    let errors = json["trace"]["first_errors"].to_string();
    assert!(errors.contains(&format!("line {}: pfn out of range", lines - 1)), "{errors}");
    assert!(errors.contains(&format!("line {lines}: cpu number out of range")), "{errors}");
    assert_eq!(json["cpus"], 2, "CPU 999999 is skipped, not folded into 256 CPUs");
    let out = mmkit(&["replay", path.to_str().unwrap(), "--strict"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("line {}: pfn out of range", lines - 1)) && stderr.contains("--strict"),
        "{stderr}"
    );
}
