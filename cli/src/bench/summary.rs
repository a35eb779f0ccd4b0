//! What each suite is compared with, and the closing summary: one line per
//! suite with its headline case, mmkit's number, its peer's in the same run
//! and the figure the suite reproduces from a Linux change.
//!
//! Owns the comparison rules ([`Baselines`], [`Headline`]) and their
//! rendering as text, Markdown and JSON, with two things a reader must not
//! have to guess: a line whose compared row is another of mmkit's own
//! paths (not another project's) says so, and a run that left suites out
//! names them and how to run them ([`LeftOut`]). Each suite declares its
//! own rules in its `SUITE` constant; this module never names a suite.

use super::report::{CaseResult, SuiteReport};
use mmkit_bench::subjects::names::MMKIT;
use serde::Serialize;
use std::fmt::Write as _;

/// Which implementation each case of a suite is compared with: the first
/// rule whose case-name prefix matches, else `mmkit` where the case has an
/// `mmkit` row. The baseline is mmkit's own choice (its default
/// implementation or mode); the other rows are its peers.
pub type Baselines = &'static [(&'static str, &'static str)];

/// One row of a suite's results, named by case and implementation.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// Case name.
    pub case: &'static str,
    /// Implementation name.
    pub imp: &'static str,
}

/// A figure published with the Linux change a suite reproduces.
#[derive(Clone, Copy, Debug)]
pub struct Published {
    /// What the change measured, as the summary prints it.
    pub text: &'static str,
    /// The figure to hold mmkit's result against.
    pub figure: Figure,
    /// The change, named as Linux names it.
    pub source: &'static str,
}

/// The kind of a published figure.
#[derive(Clone, Copy, Debug)]
pub enum Figure {
    /// The peer's time over mmkit's (the speed-up the change reported).
    SpeedUp(f64),
    /// A time per unit in ns, held against mmkit's median.
    Time(f64),
}

/// A suite's one line in the summary.
#[derive(Clone, Copy, Debug)]
pub struct Headline {
    /// mmkit's row.
    pub mmkit: Row,
    /// The row it is compared with in the same run.
    pub peer: Row,
    /// The published figure the suite reproduces, if there is one.
    pub published: Option<Published>,
}

/// Sets `baseline` and `ratio_vs_baseline` on every case of `cases`.
///
/// Timed rows: the row's median over the baseline's (> 1: the baseline is
/// faster). Untimed rows with a `ratio` figure (compression ratios): the
/// baseline's ratio over the row's (> 1: the baseline compresses better).
pub fn fill_baselines(cases: &mut [CaseResult], rules: Baselines) {
    let baseline_of = |case: &str, cases: &[CaseResult]| -> Option<&'static str> {
        match rules.iter().find(|(prefix, _)| case.starts_with(prefix)) {
            Some(&(_, imp)) => Some(imp),
            None => cases.iter().any(|c| c.name == case && c.impl_name == MMKIT).then_some(MMKIT),
        }
    };
    let picks: Vec<(Option<&'static str>, Option<f64>)> = cases
        .iter()
        .map(|r| {
            let Some(base_name) = baseline_of(r.name, cases) else { return (None, None) };
            let base = cases.iter().find(|c| c.name == r.name && c.impl_name == base_name);
            (base.map(|b| b.impl_name), base.and_then(|b| ratio(r, b)))
        })
        .collect();
    for (r, (baseline, ratio)) in cases.iter_mut().zip(picks) {
        r.baseline = baseline;
        r.ratio_vs_baseline = ratio;
    }
}

/// `row` against `base`, as [`fill_baselines`] defines it.
fn ratio(row: &CaseResult, base: &CaseResult) -> Option<f64> {
    if row.is_untimed() {
        let (ours, theirs) = (figure(row, "ratio")?, figure(base, "ratio")?);
        (ours > 0.0).then(|| theirs / ours)
    } else {
        (base.median_ns > 0.0).then(|| row.median_ns / base.median_ns)
    }
}

fn figure(row: &CaseResult, key: &str) -> Option<f64> {
    row.extra.iter().find(|(k, _)| *k == key).map(|&(_, v)| v)
}

/// The header of a suite's comparison column: `vs NAME` when every
/// compared case has the same baseline, `vs baseline` otherwise.
pub fn column_header(report: &SuiteReport) -> String {
    let mut names = report.cases.iter().filter_map(|c| c.baseline);
    match names.next() {
        Some(first) if names.all(|n| n == first) => format!("vs {first}"),
        Some(_) => "vs baseline".to_string(),
        None => "vs mmkit".to_string(),
    }
}

/// One line of the summary, as the JSON document carries it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SummaryLine {
    /// Suite.
    pub suite: &'static str,
    /// mmkit's case.
    pub case: &'static str,
    /// mmkit's implementation.
    #[serde(rename = "impl")]
    pub imp: &'static str,
    /// Unit of both medians.
    pub unit: &'static str,
    /// mmkit's median, ns per unit; `null` when the row did not run.
    pub median_ns: Option<f64>,
    /// What mmkit is compared with: the peer's implementation, or its case
    /// where the two rows are cases of one implementation.
    pub peer: &'static str,
    /// Whether the compared row is another of mmkit's own paths (its
    /// single-page calls, its per-page free, its allocate-and-zero, its
    /// pool-locked free, …) rather than another project's implementation.
    pub peer_is_mmkit: bool,
    /// The peer's median in the same run, ns per unit.
    pub peer_median_ns: Option<f64>,
    /// Peer median / mmkit median (> 1: mmkit is faster).
    pub ratio: Option<f64>,
    /// The published figure, as text.
    pub published: Option<&'static str>,
    /// The published speed-up, or the published time over mmkit's (> 1:
    /// mmkit does better than the published figure).
    pub published_ratio: Option<f64>,
    /// mmkit's result over the published figure, for a speed-up; absent
    /// for a time, whose `published_ratio` already compares the two.
    pub vs_published: Option<f64>,
    /// The Linux change the figure comes from.
    pub source: Option<&'static str>,
    /// Calls of mmkit's row that fell back to a slower path (its
    /// `fallback_frees` figure, the most of one run), where the row counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<f64>,
}

/// The summary line of one suite, when it declares a headline.
pub fn summary_line(report: &SuiteReport, headline: &Headline) -> SummaryLine {
    let find = |row: &Row| report.cases.iter().find(|c| c.name == row.case && c.impl_name == row.imp);
    let (ours, theirs) = (find(&headline.mmkit), find(&headline.peer));
    let median = |c: Option<&CaseResult>| c.map(|c| c.median_ns).filter(|m| *m > 0.0);
    let (median_ns, peer_median_ns) = (median(ours), median(theirs));
    let ratio = median_ns.zip(peer_median_ns).map(|(m, p)| p / m);
    let (published_ratio, vs_published) = match headline.published.map(|p| p.figure) {
        Some(Figure::SpeedUp(x)) => (Some(x), ratio.map(|r| r / x)),
        Some(Figure::Time(ns)) => (median_ns.map(|m| ns / m), None),
        None => (None, None),
    };
    SummaryLine {
        suite: report.suite,
        case: headline.mmkit.case,
        imp: headline.mmkit.imp,
        unit: ours.or(theirs).map_or("", |c| c.unit),
        median_ns,
        peer: if headline.peer.case == headline.mmkit.case { headline.peer.imp } else { headline.peer.case },
        peer_is_mmkit: !is_another_project(headline.peer.imp),
        peer_median_ns,
        ratio,
        published: headline.published.map(|p| p.text),
        published_ratio,
        vs_published,
        source: headline.published.map(|p| p.source),
        fallback: ours.and_then(|c| figure(c, "fallback_frees")),
    }
}

/// Whether an implementation is another project's: Linux's own
/// (`kernel/…`), nbdkit's plugins (`nbdkit-…`), and the frame and heap
/// allocators of `mmkit_bench::subjects::names`. Every other row is one of
/// mmkit's paths.
fn is_another_project(imp: &str) -> bool {
    use mmkit_bench::subjects::names;
    imp.starts_with("kernel/")
        || imp.starts_with("nbdkit-")
        || [names::BSA, names::BSA_LOCKED, names::MIMALLOC, names::SYSTEM].contains(&imp)
}

/// A suite a run did not include: why, and the command that runs it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LeftOut {
    /// Suite.
    pub suite: &'static str,
    /// Why the run left it out.
    pub why: &'static str,
}

/// The note under the summary for the suites a run left out, or nothing.
fn left_out_note(left: &[LeftOut]) -> String {
    if left.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = left.iter().map(|l| l.suite).collect();
    let mut out = format!("Not in this run: {}.", names.join(", "));
    for l in left {
        let _ = write!(out, " {}: {}.", l.suite, l.why);
    }
    let _ = write!(out, " Run them with `mmkit bench {}`.", names.join(" "));
    out
}

/// A time for people: ns below a microsecond, then µs, ms and s.
pub fn human_time(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// `2.47x faster` / `1.30x slower` / `level`: how mmkit stands when `ratio`
/// is the other side's time over mmkit's.
pub fn verdict(ratio: f64) -> String {
    if !ratio.is_finite() || ratio <= 0.0 {
        "-".to_string()
    } else if (ratio - 1.0).abs() < 0.005 {
        "level".to_string()
    } else if ratio > 1.0 {
        format!("{ratio:.2}x faster")
    } else {
        format!("{:.2}x slower", 1.0 / ratio)
    }
}

/// The cells of one summary line: suite, case, mmkit's time, the peer,
/// its time, mmkit against it, the published figure (with its footnote
/// number, `source`), mmkit against that.
fn cells(line: &SummaryLine, source: Option<usize>) -> [String; 8] {
    let time = |ns: Option<f64>| ns.map_or_else(|| "-".to_string(), |ns| format!("{}/{}", human_time(ns), line.unit));
    let against_published = match (line.vs_published, line.published_ratio) {
        (Some(x), Some(published)) => {
            let ours = line.ratio.unwrap_or(f64::NAN);
            let word = if x >= 1.0 { "met" } else { "not reached" };
            format!("{ours:.2}x vs {published:.2}x: {word}")
        }
        (None, Some(x)) => verdict(x),
        _ => "-".to_string(),
    };
    // A published speed-up is shown as the number the next column holds
    // mmkit against, so the two never read differently (2.1x and 2.08x).
    let published_text = match (line.vs_published, line.published_ratio, line.published) {
        (Some(_), Some(x), Some(_)) => Some(format!("{x:.2}x")),
        (_, _, text) => text.map(str::to_string),
    };
    let published = match (published_text, source) {
        (Some(text), Some(n)) => format!("{text} [{n}]"),
        (Some(text), None) => text,
        (None, _) => "-".to_string(),
    };
    [
        line.suite.to_string(),
        match (line.imp == MMKIT, line.fallback) {
            (true, None) => line.case.to_string(),
            (true, Some(n)) => format!("{} ({n} fell back)", line.case),
            (false, None) => format!("{} ({})", line.case, line.imp),
            (false, Some(n)) => format!("{} ({}, {n} fell back)", line.case, line.imp),
        },
        time(line.median_ns),
        if line.peer_is_mmkit { format!("{} (mmkit's own path)", line.peer) } else { line.peer.to_string() },
        time(line.peer_median_ns),
        line.ratio.map_or_else(|| "-".to_string(), verdict),
        published,
        against_published,
    ]
}

const HEADER: [&str; 8] = [
    "suite",
    "headline case",
    "mmkit's time",
    "compared with",
    "its time",
    "mmkit is",
    "published figure",
    "mmkit against it",
];

/// Every line's cells, and the footnotes naming the published figures'
/// sources in the order the lines cite them.
fn table(lines: &[SummaryLine]) -> (Vec<[String; 8]>, Vec<&'static str>) {
    let mut sources: Vec<&'static str> = Vec::new();
    let rows = lines
        .iter()
        .map(|line| {
            let n = line.source.map(|s| match sources.iter().position(|&t| t == s) {
                Some(i) => i + 1,
                None => {
                    sources.push(s);
                    sources.len()
                }
            });
            cells(line, n)
        })
        .collect();
    (rows, sources)
}

const LEGEND: &str = "\"mmkit is\": mmkit's time against the compared row's, in this run; \"(mmkit's own path)\": \
                      the compared row is another of mmkit's paths (the one the headline path replaces), not \
                      another project's; \"mmkit against it\": mmkit's speed-up (or time) against the one the \
                      Linux change published.";

/// The summary as a plain-text table, for the end of the text report.
pub fn to_text(lines: &[SummaryLine], left_out: &[LeftOut]) -> String {
    let (rows, sources) = table(lines);
    let mut widths = HEADER.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::from("summary: each suite's headline case in this run\n");
    let mut line = |cells: [&str; 8]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            let pad = " ".repeat(w.saturating_sub(cell.chars().count()));
            // Times align right, words left.
            if i == 2 || i == 4 {
                let _ = write!(text, "{pad}{cell}  ");
            } else {
                let _ = write!(text, "{cell}{pad}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(HEADER);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5], &row[6], &row[7]]);
    }
    out.push_str(LEGEND);
    out.push('\n');
    for (i, source) in sources.iter().enumerate() {
        let _ = writeln!(out, "[{}] Linux: {source}", i + 1);
    }
    let note = left_out_note(left_out);
    if !note.is_empty() {
        out.push_str(&note);
        out.push('\n');
    }
    out
}

/// The summary as a Markdown table, for the top of BENCHMARKS.md.
pub fn to_markdown(lines: &[SummaryLine], left_out: &[LeftOut]) -> String {
    let (rows, sources) = table(lines);
    let mut out = String::from("## Summary\n\n| ");
    out.push_str(&HEADER.join(" | "));
    out.push_str(" |\n|---|---|---:|---|---:|---|---|---|\n");
    for row in rows {
        let row = row.map(|c| c.replace('|', "\\|"));
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    let _ = writeln!(out, "\n{LEGEND}\n");
    for (i, source) in sources.iter().enumerate() {
        let _ = writeln!(out, "{}. Linux: {source}", i + 1);
    }
    let note = left_out_note(left_out);
    if !note.is_empty() {
        let _ = writeln!(out, "\n{note}");
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &'static str, imp: &'static str, median: f64) -> CaseResult {
        let mut r = CaseResult::untimed("s", name, imp, Vec::new());
        r.unit = "op";
        r.median_ns = median;
        r
    }

    fn ratio_row(imp: &'static str, ratio: f64) -> CaseResult {
        CaseResult::untimed("s", "ratio/real", imp, vec![("ratio", ratio), ("bytes", 4096.0)])
    }

    #[test]
    fn a_rule_names_the_baseline_and_mmkit_is_the_default() {
        let mut cases = vec![
            row("write", "mmkit/lz4", 100.0),
            row("write", "kernel/lz4", 250.0),
            row("pair", MMKIT, 10.0),
            row("pair", "peer", 15.0),
            row("alone", "other", 3.0),
            ratio_row("mmkit/lz4", 3.0),
            ratio_row("kernel/lz4", 2.0),
        ];
        fill_baselines(&mut cases, &[("write", "mmkit/lz4"), ("ratio/", "mmkit/lz4")]);
        let got: Vec<(Option<&str>, Option<f64>)> = cases.iter().map(|c| (c.baseline, c.ratio_vs_baseline)).collect();
        assert_eq!(
            got,
            vec![
                (Some("mmkit/lz4"), Some(1.0)),
                (Some("mmkit/lz4"), Some(2.5)),
                (Some(MMKIT), Some(1.0)),
                (Some(MMKIT), Some(1.5)),
                (None, None),
                (Some("mmkit/lz4"), Some(1.0)),
                (Some("mmkit/lz4"), Some(1.5)),
            ]
        );
    }

    #[test]
    fn a_missing_baseline_row_leaves_no_ratio() {
        let mut cases = vec![row("write", "kernel/lz4", 250.0)];
        fill_baselines(&mut cases, &[("write", "mmkit/lz4")]);
        assert_eq!((cases[0].baseline, cases[0].ratio_vs_baseline), (None, None));
    }

    fn report(cases: Vec<CaseResult>) -> SuiteReport {
        SuiteReport { suite: "s", description: String::new(), cases, notes: Vec::new() }
    }

    #[test]
    fn headline_against_peer_and_published_speed_up() {
        let r = report(vec![row("batched", MMKIT, 100.0), row("per_page", MMKIT, 420.0)]);
        let headline = Headline {
            mmkit: Row { case: "batched", imp: MMKIT },
            peer: Row { case: "per_page", imp: MMKIT },
            published: Some(Published { text: "3.5x", figure: Figure::SpeedUp(3.5), source: "change" }),
        };
        let line = summary_line(&r, &headline);
        assert_eq!(line.ratio, Some(4.2));
        assert!((line.vs_published.unwrap() - 1.2).abs() < 1e-9);
        assert!(line.peer_is_mmkit, "per_page is mmkit's own path");
        let text = to_text(&[line], &[]);
        assert!(text.contains("per_page (mmkit's own path)"), "{text}");
        assert!(text.contains("4.20x faster"), "{text}");
        assert!(text.contains("4.20x vs 3.50x: met"), "{text}");
        assert!(text.contains("3.50x [1]") && text.contains("[1] Linux: change"), "{text}");
        assert!(!text.contains("Not in this run"), "{text}");
        assert!(text.contains("100.0 ns/op") && text.contains("420.0 ns/op"), "{text}");
    }

    #[test]
    fn headline_against_a_published_time_and_a_missing_peer() {
        let r = report(vec![row("bulk/64", MMKIT, 3.0)]);
        let headline = Headline {
            mmkit: Row { case: "bulk/64", imp: MMKIT },
            peer: Row { case: "single/1", imp: MMKIT },
            published: Some(Published { text: "21.3 ns/page", figure: Figure::Time(21.3), source: "bulk" }),
        };
        let line = summary_line(&r, &headline);
        assert_eq!((line.peer_median_ns, line.ratio, line.vs_published), (None, None, None));
        assert!((line.published_ratio.unwrap() - 7.1).abs() < 1e-9);
        let left = [LeftOut { suite: "nbd", why: "needs nbdkit" }, LeftOut { suite: "zswap", why: "needs root" }];
        let md = to_markdown(&[line], &left);
        assert!(md.contains("Not in this run: nbd, zswap.") && md.contains("`mmkit bench nbd zswap`"), "{md}");
        assert!(md.starts_with("## Summary\n\n| suite | headline case |"), "{md}");
        assert!(md.contains("| 3.0 ns/op |"), "{md}");
        assert!(md.contains("7.10x faster"), "{md}");
    }

    #[test]
    fn another_projects_rows_are_told_from_mmkits_own_paths() {
        for own in ["mmkit", "mmkit-no-quicklists", "mmkit_lists_off", "pool_locked", "mmkit/lz4"] {
            assert!(!is_another_project(own), "{own}");
        }
        for peer in ["kernel/lz4", "kernel/zram-swap", "nbdkit-memory/sparse", "mimalloc", "system"] {
            assert!(is_another_project(peer), "{peer}");
        }
        let r = report(vec![row("pte", MMKIT, 55.0), row("pte", "mmkit-no-quicklists", 108.0)]);
        let headline = Headline {
            mmkit: Row { case: "pte", imp: MMKIT },
            peer: Row { case: "pte", imp: "mmkit-no-quicklists" },
            published: Some(Published { text: "2.1x", figure: Figure::SpeedUp(2.7 / 1.3), source: "q" }),
        };
        let text = to_text(&[summary_line(&r, &headline)], &[]);
        // One figure for the published speed-up in both columns.
        assert!(text.contains("2.08x [1]") && text.contains("vs 2.08x") && !text.contains("2.1x"), "{text}");
        assert!(text.contains("mmkit-no-quicklists (mmkit's own path)"), "{text}");
    }

    #[test]
    fn a_row_that_counts_fallbacks_shows_them() {
        let mut deferred = row("release/1threads", "deferred", 2.0e6);
        deferred.extra.push(("fallback_frees", 3.0));
        let r = report(vec![deferred, row("release/1threads", "pool_locked", 12.0e6)]);
        let headline = Headline {
            mmkit: Row { case: "release/1threads", imp: "deferred" },
            peer: Row { case: "release/1threads", imp: "pool_locked" },
            published: None,
        };
        let line = summary_line(&r, &headline);
        assert_eq!((line.fallback, line.ratio), (Some(3.0), Some(6.0)));
        let text = to_text(std::slice::from_ref(&line), &[]);
        assert!(text.contains("release/1threads (deferred, 3 fell back)"), "{text}");
        let json = serde_json::to_string(&line).unwrap();
        assert!(json.contains("\"fallback\":3.0"), "{json}");
        let plain = summary_line(&report(vec![row("pair", MMKIT, 1.0)]), &headline);
        assert!(!serde_json::to_string(&plain).unwrap().contains("fallback"));
    }

    #[test]
    fn verdicts_read_without_arithmetic() {
        assert_eq!(verdict(2.474), "2.47x faster");
        assert_eq!(verdict(0.5), "2.00x slower");
        assert_eq!(verdict(1.001), "level");
        assert_eq!(verdict(f64::NAN), "-");
        assert_eq!(human_time(137_267.4), "137.3 µs");
        assert_eq!(human_time(7_811_885.0), "7.81 ms");
    }
}
