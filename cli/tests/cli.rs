//! End-to-end tests of the `mmkit` binary: exit codes, the `info` report and
//! the `bench` JSON document, run as a user would run them.

use serde_json::Value;
use std::process::{Command, Output};

fn mmkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmkit")).args(args).output().expect("the mmkit binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn info_prints_buddyinfo_and_the_rest() {
    let out = mmkit(&["info", "--memory", "1G"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.lines().any(|l| l.starts_with("Node 0, zone      DMA")), "{text}");
    for heading in
        ["== /proc/buddyinfo ==", "== /proc/pagetypeinfo ==", "== zones ==", "== /proc/vmstat ==", "build time:"]
    {
        assert!(text.contains(heading), "missing {heading}");
    }
    assert!(text.contains("nr_free_pages 262143"), "{text}");
}

#[test]
fn info_with_two_nodes() {
    let out = mmkit(&["info", "--memory", "512M", "--nodes", "2"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("on 2 node(s)"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("Node 1, zone    DMA32")));
}

#[test]
fn bad_sizes_exit_2_with_a_message() {
    for size in ["banana", "99999999999999T", "0", "4X", ""] {
        let out = mmkit(&["info", "--memory", size]);
        assert_eq!(out.status.code(), Some(2), "size {size:?}");
        let err = stderr(&out);
        assert!(err.contains("--memory"), "size {size:?}: {err}");
        assert!(!err.contains("panicked"), "size {size:?}: {err}");
        assert!(stdout(&out).is_empty());
    }
    let err = stderr(&mmkit(&["info", "--memory", "banana"]));
    assert!(err.contains("`banana` is not a size"), "{err}");
}

#[test]
fn impossible_maps_exit_2() {
    // A syntactically fine size that cannot become a map.
    let out = mmkit(&["info", "--memory", "4K", "--nodes", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
    let out = mmkit(&["info", "--memory", "1E"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr(&out).contains("panicked"));
}

#[test]
fn unknown_suite_exits_2() {
    let out = mmkit(&["bench", "nosuch", "--quick"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("buddy"), "{}", stderr(&out));
}

#[test]
fn quick_buddy_bench_prints_json() {
    let out = mmkit(&["bench", "buddy", "--quick", "--json", "--runs", "1"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("stdout is one JSON document");
    assert_eq!(doc["suite"], "buddy");
    assert!(doc["machine"]["cpus"].as_u64().unwrap() >= 1);
    assert!(doc["machine"].get("model").is_some());
    let cases = doc["cases"].as_array().expect("cases array");
    let has = |name: &str, imp: &str| cases.iter().any(|c| c["name"] == name && c["impl"] == imp);
    let all = ["mmkit", "buddy_system_allocator", "mimalloc", "system"];
    for name in ["buddy_order0_alloc_free", "buddy_order9_alloc_free", "buddy_order0_batch"] {
        for imp in all {
            assert!(has(name, imp), "{name} / {imp} missing");
        }
    }
    for name in ["buddy_order0_alloc_free_fragmented", "buddy_order9_alloc_free_fragmented"] {
        for imp in ["mmkit", "buddy_system_allocator"] {
            assert!(has(name, imp), "{name} / {imp} missing");
        }
    }
    for c in cases {
        assert_eq!(c["runs"], 1, "{c}");
        let median = c["median_ns"].as_f64().unwrap();
        assert!(median > 0.0, "{c}");
        assert!(c["min_ns"].as_f64().unwrap() <= median, "{c}");
        assert!(c["max_ns"].as_f64().unwrap() >= median, "{c}");
        assert!(c["unit"] == "pair" || c["unit"] == "page", "{c}");
        let ratio = c["ratio_vs_mmkit"].as_f64().expect("ratio");
        if c["impl"] == "mmkit" {
            assert_eq!(ratio, 1.0);
        }
    }
}

#[test]
fn quick_bench_table() {
    let out = mmkit(&["bench", "--quick", "--runs", "1"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("suite buddy:"), "{text}");
    assert!(text.contains("vs mmkit"), "{text}");
    assert!(text.contains("buddy_order0_batch (page)"), "{text}");
}

#[test]
fn train_dict_writes_a_dictionary_the_device_takes_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    // Files sharing a vocabulary, with a same-filled page in each.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let vocab: Vec<[u8; 8]> = (0..200)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .collect();
    for f in 0..8 {
        let mut data = Vec::new();
        while data.len() < 64 * 4096 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.extend_from_slice(&vocab[state as usize % vocab.len()][..1 + (state >> 40) as usize % 8]);
        }
        data.truncate(64 * 4096);
        data[..4096].fill(0);
        std::fs::write(dir.path().join(format!("f{f}")), data).unwrap();
    }
    let out = dir.path().join("zram.dict");
    let out_arg = out.to_str().unwrap();
    let input = dir.path().to_str().unwrap();
    let run = mmkit(&["zram", "train-dict", "--out", out_arg, "--size", "16K", input]);
    assert!(run.status.success(), "stderr: {}", stderr(&run));
    let text = stdout(&run);
    assert!(text.contains("same-filled skipped") && text.contains("held-out pages"), "{text}");
    let dict = mmkit_zram::Dictionary::load(&out).unwrap();
    assert!(dict.len() <= 16 << 10);
    let mut config = mmkit_zram::ZramConfig::default();
    config.set("comp", "zstd:9").unwrap();
    config.set("algorithm_params", &format!("algo=zstd dict={out_arg}")).unwrap();
    for bad in [
        vec!["zram", "train-dict", "--out", out_arg, input, "no/such/input"],
        vec!["zram", "train-dict", "--out", out_arg, "--size", "100", input],
        vec!["zram", "train-dict", "--out", out_arg, "--level", "30", input],
    ] {
        let run = mmkit(&bad);
        assert_eq!(run.status.code(), Some(2), "{bad:?}: {}", stderr(&run));
        assert!(!stderr(&run).contains("panicked"));
    }
}

#[test]
fn serve_refuses_algorithm_params_the_device_would_refuse_before_starting() {
    for (params, why) in [
        (vec!["--comp", "lz4", "--algorithm-params", "algo=zstd level=3"], "no algorithm"),
        (vec!["--comp", "zstd", "--algorithm-params", "level=23"], "levels 1..=22"),
        (vec!["--comp", "zstd", "--algorithm-params", "dict=no/such/dict"], "no/such/dict"),
        (vec!["--comp", "lz4hc", "--algorithm-params", "level=x"], "not a number"),
    ] {
        let mut args = vec!["zram", "serve", "--size", "16M"];
        args.extend(&params);
        let out = mmkit(&args);
        assert_eq!(out.status.code(), Some(2), "{params:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{params:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "no URI printed");
    }
}
