//! The `mmkit` command line: argument parsing (clap derive), dispatch to the
//! subcommands, and exit codes.
//!
//! Owns the user-facing surface only: `info` lives in `info`, `bench` in
//! `bench`, `SIZE` parsing in `size`. Exit codes: 0 success, 1 a benchmark
//! failed while running, 2 bad arguments (clap's own usage errors included).
#![deny(unsafe_code)]

mod bench;
mod info;
mod size;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Args, Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "mmkit",
    version,
    about = "Linux's page allocator as a library: /proc-style views and benchmarks",
    after_help = "Exit status: 0 success, 1 a benchmark failed, 2 bad arguments."
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
