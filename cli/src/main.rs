//! The `mmkit` command line: argument parsing (clap derive), dispatch to the
//! subcommands, and exit codes.
//!
//! Owns the user-facing surface only: `info` lives in `info`, `bench` in
//! `bench`, `replay` in `replay`, `SIZE` parsing in `size`. Exit codes: 0
//! success, 1 a benchmark or replay failed while running, 2 bad arguments
//! or unusable input (clap's own usage errors included).
#![deny(unsafe_code)]

mod bench;
mod info;
mod replay;
mod size;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Args, Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "mmkit",
    version,
    about = "Linux's page allocator as a library: /proc-style views, benchmarks and trace replay",
    after_help = "Exit status: 0 success, 1 a benchmark or replay failed, 2 bad arguments or input."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build a metadata-only memory map and print buddyinfo, pagetypeinfo,
    /// the zones and vmstat as a freshly booted machine would show them.
    Info(InfoCmd),
    /// Benchmark mmkit against peer allocators (buddy_system_allocator,
    /// mimalloc, the system allocator) and print medians and ratios.
    Bench(BenchCmd),
    /// Replay a recorded trace of Linux's page allocator (perf script text
    /// or the compact format; plain, xz or zstd) and report placement
    /// quality, fragmentation and events per second.
    Replay(ReplayCmd),
}

#[derive(Debug, Args)]
struct ReplayCmd {
    /// The trace file.
    #[arg(value_name = "TRACE")]
    trace: std::path::PathBuf,
    /// Who decides where blocks go.
    #[arg(long, value_enum, default_value = "policy")]
    mode: replay::engine::Mode,
    /// Memory of the replay (policy mode): bytes or K/M/G/T. Default: the
    /// trace's PFN span. The report gives the trace's peak of live pages,
    /// e.g. to replay under pressure at 1.25x that peak.
    #[arg(long, value_name = "SIZE", value_parser = size::parse_size)]
    memory: Option<u64>,
    /// Turn mobility grouping off (Linux's page_group_by_mobility_disabled).
    #[arg(long)]
    no_grouping: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Write PREFIX-free-by-order.png and PREFIX-pageblocks.png.
    #[arg(long, value_name = "PREFIX")]
    plot: Option<std::path::PathBuf>,
    /// Replay the same events into a peer allocator too (policy mode, order
    /// and count only) and compare speed and order-9 fragmentation.
    #[arg(long, value_name = "PEER", value_parser = ["buddy_system_allocator"])]
    peer: Option<String>,
    /// Metric samples taken through the replay.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    samples: u32,
    /// Replay only the first N events.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
    /// Check that no page is handed out twice and the allocator's invariants
    /// at the end (slower); exit 1 if either fails.
    #[arg(long)]
    check: bool,
    /// Parse the whole trace into memory (16 bytes per event) before the
    /// replay, so that the replay loop is timed alone with warm caches
    /// (default: stream in chunks of 65536 events, constant memory).
    #[arg(long)]
    preload: bool,
}

#[derive(Debug, Args)]
struct InfoCmd {
    /// Total memory, split evenly over the nodes: bytes or K/M/G/T/P
    /// (powers of 1024), e.g. 4G, 512M, 1T.
    #[arg(
        short,
        long,
        value_name = "SIZE",
        default_value = "4G",
        value_parser = size::parse_size
    )]
    memory: u64,
    /// Number of NUMA nodes, laid out one after another in physical memory.
    #[arg(
        short,
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=mmkit::MAX_NUMNODES as i64)
    )]
    nodes: u16,
}

#[derive(Debug, Args)]
struct BenchCmd {
    /// Suites to run; all of them when none is given.
    #[arg(value_name = "SUITE", value_parser = suite_parser())]
    suites: Vec<String>,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Timed runs per case and implementation; the median is reported.
    #[arg(
        short,
        long,
        value_name = "R",
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    runs: u32,
    /// Small maps and few iterations: a smoke test for CI, not a measurement.
    #[arg(long)]
    quick: bool,
}

fn suite_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(bench::SUITES.iter().map(|s| PossibleValue::new(s.name).help(s.about)))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Info(cmd) => {
            let args = info::InfoArgs { memory: cmd.memory, nodes: usize::from(cmd.nodes) };
            match info::run(args) {
                Ok(text) => print(&text),
                Err(info::InfoError(msg)) => fail(&msg, 2),
            }
        }
        Command::Bench(cmd) => {
            let args = bench::BenchArgs {
                suites: cmd.suites,
                json: cmd.json,
                settings: bench::harness::Settings { runs: cmd.runs as usize, quick: cmd.quick },
            };
            match bench::run(&args) {
                Ok(text) => print(&text),
                Err(e) => fail(&e.0, 1),
            }
        }
        Command::Replay(cmd) => {
            let args = replay::ReplayArgs {
                trace: cmd.trace,
                mode: cmd.mode,
                memory: cmd.memory,
                no_grouping: cmd.no_grouping,
                peer: cmd.peer.is_some(),
                samples: cmd.samples,
                limit: cmd.limit,
                check: cmd.check,
                preload: cmd.preload,
                plot: cmd.plot,
                progress: replay::want_progress(cmd.json),
            };
            match replay::run(&args, cmd.json) {
                Ok(text) => print(&text),
                Err(replay::ReplayError::Usage(msg)) => fail(&msg, 2),
                Err(replay::ReplayError::Failed(msg)) => fail(&msg, 1),
            }
        }
    }
}

/// Writes `text` to stdout; a closed pipe (`mmkit info | head`) is not an
/// error worth a panic.
fn print(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(&format!("writing output: {e}"), 1),
    }
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_sizes_and_rejects_garbage() {
        let cli = Cli::try_parse_from(["mmkit", "info", "--memory", "512M"]).unwrap();
        let Command::Info(cmd) = cli.command else { panic!("not info") };
        assert_eq!(cmd.memory, 512 << 20);
        let err = Cli::try_parse_from(["mmkit", "info", "--memory", "banana"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let err = Cli::try_parse_from(["mmkit", "info", "--memory", "99999999999999T"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let err = Cli::try_parse_from(["mmkit", "info", "--nodes", "0"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn default_memory_is_4g() {
        let cli = Cli::try_parse_from(["mmkit", "info"]).unwrap();
        let Command::Info(cmd) = cli.command else { panic!("not info") };
        assert_eq!(cmd.memory, 4 << 30);
        assert_eq!(cmd.nodes, 1);
    }

    #[test]
    fn bench_arguments() {
        let cli = Cli::try_parse_from(["mmkit", "bench", "buddy", "--json", "--runs", "3"]).unwrap();
        let Command::Bench(cmd) = cli.command else { panic!("not bench") };
        assert_eq!(cmd.suites, vec!["buddy"]);
        assert!(cmd.json && !cmd.quick);
        assert_eq!(cmd.runs, 3);
        assert!(Cli::try_parse_from(["mmkit", "bench", "nosuch"]).is_err());
        assert!(Cli::try_parse_from(["mmkit", "bench", "--runs", "0"]).is_err());
    }
}
