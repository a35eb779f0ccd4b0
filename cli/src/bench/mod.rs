//! `mmkit bench`: the command's arguments ([`BenchArgs`], parsed by clap),
//! the suite registry and the command that runs suites and prints their
//! results.
//!
//! Owns which suites exist ([`SUITES`]) and the order they run in. Each suite
//! is one file in this directory exposing a [`Suite`] constant; adding one
//! (`pcp`, `bulk`, `contig`) means writing that file and listing it here.
//! Shared pieces: `harness` (timing, medians, ratios, table and JSON),
//! `summary` (what each case is compared with, and the closing summary)
//! and `markdown` (the BENCHMARKS.md document). The
//! things being measured (mmkit and the peers behind one interface, the
//! fragmentation recipes, the contiguous-range workload) are the
//! `mmkit-bench` crate's; this directory must not grow its own.

mod buddy;
mod bulk;
mod contig;
pub mod harness;
pub mod latency;
pub mod markdown;
mod nbd;
mod pcp;
mod quicklist;
pub mod report;
pub mod summary;
mod zram;
mod zsmalloc;
mod zswap;
pub mod zswap_kernel;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::Args;
use harness::{BenchError, Machine, Settings, SuiteReport};
use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Told each case name just before the case runs.
pub type Progress<'a> = dyn FnMut(&str) + 'a;

/// A suite's entry point.
pub type SuiteFn = fn(&Settings, &mut Progress<'_>) -> Result<SuiteReport, BenchError>;

/// One benchmark suite.
#[derive(Clone, Copy)]
pub struct Suite {
    /// Name on the command line and in results.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// Runs every case; calls `progress` with each case name before it runs.
    pub run: SuiteFn,
    /// Which implementation each case is compared with, where it is not
    /// `mmkit`.
    pub baselines: summary::Baselines,
    /// The suite's line in the closing summary.
    pub headline: Option<summary::Headline>,
}

/// Every suite, in the order `mmkit bench` runs them.
pub const SUITES: &[Suite] = &[
    buddy::SUITE,
    pcp::SUITE,
    bulk::SUITE,
    contig::SUITE,
    quicklist::SUITE,
    zsmalloc::SUITE,
    zram::SUITE,
    nbd::SUITE,
    zswap::SUITE,
];

/// Suites that run only when named, and why: `nbd` starts servers and
/// clients as other processes and needs nbdkit, fio and the plugin built;
/// `zswap` swaps a child process to a kernel zram device it hot-adds. A
/// run without names says it left them out and how to run them.
pub const NAMED_ONLY: &[(&str, &str)] = &[
    (
        "nbd",
        "it starts nbdkit servers and fio and nbdinfo clients as other processes (needs nbdkit, libnbd-bin \
         and fio installed, and the plugin built by cargo build --release)",
    ),
    (
        "zswap",
        "it swaps a child process in a memory cgroup to a kernel zram device it hot-adds (the kernel rows need \
         root; without it they are skipped)",
    ),
];

/// Whether `name` runs only when named.
fn named_only(name: &str) -> bool {
    NAMED_ONLY.iter().any(|(n, _)| *n == name)
}

/// Names of every suite, for argument validation and help.
pub fn suite_names() -> Vec<&'static str> {
    SUITES.iter().map(|s| s.name).collect()
}

/// `mmkit bench`'s arguments, exactly as the command line takes them.
#[derive(Clone, Debug, Args)]
pub struct BenchArgs {
    /// Suites to run; when none is given, all but `nbd` and `zswap`, which run only when named
    /// (the summary then says they were left out and how to run them).
    #[arg(value_name = "SUITE", value_parser = suite_parser())]
    pub suites: Vec<String>,
    /// Print one JSON document instead of tables.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the Markdown document BENCHMARKS.md is made of (header with
    /// command, commit, date and machine; a table per suite).
    #[arg(long)]
    pub markdown: bool,
    /// Timed runs per case and implementation; the median is reported.
    #[arg(
        short,
        long,
        value_name = "R",
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub runs: u32,
    /// Small maps and few iterations: a smoke test for CI, not a measurement.
    #[arg(long)]
    pub quick: bool,
}

impl BenchArgs {
    /// The timing knobs every suite gets.
    pub fn settings(&self) -> Settings {
        Settings { runs: self.runs as usize, quick: self.quick }
    }
}

/// The `SUITE` argument's values: every suite name, with its one-line help.
fn suite_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(SUITES.iter().map(|s| PossibleValue::new(s.name).help(s.about)))
}

/// Runs the selected suites and returns what to print on stdout. Progress
/// goes to stderr when stderr is a terminal.
///
/// # Errors
/// An unknown suite name, or the first suite that fails.
pub fn run(args: &BenchArgs) -> Result<String, BenchError> {
    let selected = select(&args.suites)?;
    let left_out: Vec<summary::LeftOut> = if args.suites.is_empty() {
        NAMED_ONLY.iter().map(|&(suite, why)| summary::LeftOut { suite, why }).collect()
    } else {
        Vec::new()
    };
    let settings = args.settings();
    let machine = Machine::detect();
    let show_progress = std::io::stderr().is_terminal();
    let mut reports = Vec::with_capacity(selected.len());
    let mut summary_lines = Vec::new();
    for (index, suite) in selected.iter().enumerate() {
        let started = Instant::now();
        let position = format!("suite {} of {}: {}", index + 1, selected.len(), suite.name);
        let mut progress = |case: &str| {
            if show_progress {
                let mut err = std::io::stderr().lock();
                let _ = writeln!(err, "[{position}, {:6.1} s] {case}", started.elapsed().as_secs_f64());
            }
        };
        let mut report = (suite.run)(&settings, &mut progress)?;
        summary::fill_baselines(&mut report.cases, suite.baselines);
        if let Some(headline) = &suite.headline {
            summary_lines.push(summary::summary_line(&report, headline));
        }
        reports.push(report);
    }
    Ok(if args.json {
        let mut text = harness::to_json(&reports, &summary_lines, &left_out, &machine, settings);
        text.push('\n');
        text
    } else if args.markdown {
        let provenance = markdown::Provenance::detect();
        markdown::to_markdown(&reports, &summary_lines, &left_out, &machine, settings, &provenance)
    } else {
        let mut text = reports.iter().map(|r| harness::to_table(r, &machine)).collect::<Vec<_>>().join("\n");
        if !summary_lines.is_empty() {
            text.push('\n');
            text.push_str(&summary::to_text(&summary_lines, &left_out));
        }
        text
    })
}

/// The suites named in `names` (each once, in registry order), or all but
/// the [`NAMED_ONLY`] ones.
fn select(names: &[String]) -> Result<Vec<Suite>, BenchError> {
    if let Some(unknown) = names.iter().find(|n| !suite_names().contains(&n.as_str())) {
        return Err(BenchError(format!("unknown suite `{unknown}`; suites: {}", suite_names().join(", "))));
    }
    let chosen = |s: &&Suite| {
        if names.is_empty() {
            !named_only(s.name)
        } else {
            names.iter().any(|n| n == s.name)
        }
    };
    Ok(SUITES.iter().filter(chosen).copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        assert_eq!(select(&[]).unwrap().len(), SUITES.len() - NAMED_ONLY.len());
        assert!(select(&[]).unwrap().iter().all(|s| s.name != "nbd"));
        assert_eq!(select(&["nbd".into()]).unwrap()[0].name, "nbd");
        let twice = select(&["buddy".into(), "buddy".into()]).unwrap();
        assert_eq!(twice.len(), 1);
        assert!(select(&["nope".into()]).is_err());
    }
}
