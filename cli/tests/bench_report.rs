//! The report `mmkit bench` prints, read as a newcomer reads it: ratio rows
//! show their ratio, rows are compared with their natural peer, and a
//! closing summary says where mmkit stands, suite by suite.

use serde_json::Value;
use std::process::{Command, Output};

fn mmkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmkit")).args(args).output().expect("the mmkit binary runs")
}

fn text_of(args: &[&str]) -> String {
    let out = mmkit(args);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ratio_rows_print_their_ratio_and_zram_compares_with_its_lz4_device() {
    let text = text_of(&["bench", "zram", "--quick", "--runs", "1"]);
    let ratio_rows: Vec<&str> = text.lines().filter(|l| l.starts_with("ratio/real")).collect();
    assert!(ratio_rows.len() >= 3, "{text}");
    for row in &ratio_rows {
        assert!(row.contains(" ratio ") && row.contains("bytes "), "a ratio row shows its figures: {row}");
        assert!(!row.contains("0.0..0.0"), "a ratio row is no zero time: {row}");
    }
    // Every I/O and ratio row is compared with mmkit/lz4, the algorithm the
    // kernel row runs; the release rows with `deferred` (so the column says
    // "vs baseline").
    assert!(text.contains("vs baseline"), "{text}");
    for row in text.lines().filter(|l| l.starts_with("release/256MiB") && l.contains("  deferred  ")) {
        assert!(row.trim_end().ends_with("1.00"), "deferred is the release rows' baseline: {row}");
    }
    for row in text.lines().filter(|l| l.contains("  mmkit/lz4  ") && !l.starts_with("summary")) {
        assert!(row.trim_end().ends_with("1.00"), "the baseline row compares as 1.00: {row}");
    }
    for row in text.lines().filter(|l| l.contains("  mmkit/zstd  ")) {
        assert!(!row.trim_end().ends_with(" -"), "every row has its comparison: {row}");
    }
}

#[test]
fn the_summary_closes_the_report_with_peers_and_published_figures() {
    let text = text_of(&["bench", "bulk", "contig", "--quick", "--runs", "1"]);
    let summary = text.split("summary: each suite's headline case in this run\n").nth(1).expect(&text);
    let line = |suite: &str| summary.lines().find(|l| l.starts_with(suite)).unwrap_or_else(|| panic!("{summary}"));
    let bulk = line("bulk ");
    assert!(bulk.contains("bulk/64") && bulk.contains("ns/page"), "{bulk}");
    assert!(bulk.contains("21.3 ns/page"), "the published figure: {bulk}");
    let contig = line("contig ");
    assert!(contig.contains("free_contig_range/batched"), "{contig}");
    assert!(contig.contains("3.50x [") && contig.contains("vs 3.50x:"), "one figure in both columns: {contig}");
    assert!(contig.contains("x faster") || contig.contains("x slower"), "a verdict, no arithmetic: {contig}");
    assert!(summary.contains("Linux: mm, page_alloc: Add a bulk page allocator"), "{summary}");
}

#[test]
fn a_suite_of_one_implementation_has_no_blank_line_between_rows() {
    let text = text_of(&["bench", "bulk", "--quick", "--runs", "1"]);
    let table: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("case")).skip(1).collect();
    let rows: Vec<&str> = table.iter().take_while(|l| !l.is_empty()).copied().collect();
    assert!(rows.len() >= 20, "every bulk row in one block: {text}");
}

#[test]
fn json_carries_the_baseline_and_the_summary() {
    let doc: Value = serde_json::from_str(&text_of(&["bench", "contig", "--quick", "--runs", "1", "--json"])).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.iter().all(|c| c["baseline"] == "mmkit" && c["ratio_vs_baseline"].is_number()), "{cases:?}");
    assert!(cases.iter().all(|c| c["ratio_vs_mmkit"].is_number()), "the documented field stays");
    let summary = doc["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 1);
    let line = &summary[0];
    assert_eq!(line["suite"], "contig");
    assert_eq!(line["case"], "free_contig_range/batched");
    assert_eq!(line["published_ratio"], 3.5);
    let ratio = line["ratio"].as_f64().unwrap();
    let expected = line["peer_median_ns"].as_f64().unwrap() / line["median_ns"].as_f64().unwrap();
    assert!((ratio - expected).abs() < 1e-9 * expected);
}
