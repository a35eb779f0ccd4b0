//! The `mmkit` command line: the top-level parser (clap derive), dispatch to
//! the subcommands, and exit codes.
//!
//! Owns the list of commands and the exit codes only: each command's
//! arguments and work live in its own module (`info`, `bench/`,
//! `replay/`, `zram/`), `SIZE` parsing in `size`; this file must not grow
//! flags or command logic. Exit codes: 0 success (also `zram serve`
//! stopped by SIGINT or SIGTERM), 1 a benchmark, replay, server or control
//! request failed while running, 2 bad arguments or unusable input (clap's
//! own usage errors included).
#![deny(unsafe_code)]

mod bench;
mod info;
mod paths;
mod replay;
mod size;
mod zram;

use clap::{Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "mmkit",
    version,
    about = "Linux's page allocator as a library: /proc-style views, benchmarks and trace replay",
    after_help = "Exit status: 0 success, 1 a benchmark, replay, server or control request failed, 2 bad arguments or input."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build a metadata-only memory map and print buddyinfo, pagetypeinfo,
    /// the zones and vmstat as a freshly booted machine would show them.
    Info(info::InfoArgs),
    /// Benchmark mmkit against peer allocators (buddy_system_allocator,
    /// mimalloc, the system allocator) and print medians and ratios.
    Bench(bench::BenchArgs),
    /// Replay a recorded trace of Linux's page allocator (perf script text
    /// or the compact format; plain, xz or zstd) and report placement
    /// quality, fragmentation and events per second.
    Replay(replay::ReplayArgs),
    /// Write a trace in mmkit's binary format (8-byte records with the
    /// first pass's summary), which `mmkit replay` reads without parsing.
    Convert(replay::cache::ConvertArgs),
    /// mmkit's zram as a block device for other programs: serve it over NBD
    /// (nbdkit) and control it like the kernel's sysfs attributes.
    Zram(zram::ZramArgs),
    /// Internal: the kernel side of `mmkit bench zswap` (a child that joins
    /// a memory cgroup and runs the access loop on its parent's commands).
    #[command(name = "__zswap-access", hide = true)]
    ZswapAccess {
        /// The cgroup's `cgroup.procs` file.
        #[arg(long)]
        procs: String,
        /// Bytes of the buffer.
        #[arg(long)]
        bytes: u64,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Info(args) => match info::run(args) {
            Ok(text) => print(&text),
            Err(info::InfoError(msg)) => fail(&msg, 2),
        },
        Command::Bench(args) => match bench::run(&args) {
            Ok(text) => print(&text),
            Err(e) => fail(&e.0, 1),
        },
        Command::Replay(args) => match replay::run(&args) {
            Ok(text) => print(&text),
            Err(replay::ReplayError::Usage(msg)) => fail(&msg, 2),
            Err(replay::ReplayError::Failed(msg)) => fail(&msg, 1),
        },
        Command::Convert(args) => match replay::cache::convert(&args) {
            Ok(text) => print(&text),
            Err(msg) => fail(&msg, 2),
        },
        Command::ZswapAccess { procs, bytes } => match bench::zswap_kernel::child_main(&procs, bytes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(msg) => fail(&msg, 1),
        },
        Command::Zram(args) => match args.command {
            zram::ZramCommand::Serve(args) => match zram::serve::run(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(zram::serve::ServeError::Usage(msg)) => fail(&msg, 2),
                Err(zram::serve::ServeError::Failed(msg)) => fail(&msg, 1),
            },
            zram::ZramCommand::Ctl(args) => match zram::ctl::run(&args) {
                Ok(text) => print(&text),
                Err(e) => fail(e.message(), e.exit_code()),
            },
            zram::ZramCommand::TrainDict(args) => match zram::train::run(&args) {
                Ok(text) => print(&text),
                Err(zram::train::TrainError::Usage(msg)) => fail(&msg, 2),
                Err(zram::train::TrainError::Failed(msg)) => fail(&msg, 1),
            },
        },
    }
}

/// Writes `text` to stdout; a closed pipe (`mmkit info | head`) is not an
/// error worth a panic. When stdout was the command's output file
/// (`mmkit convert TRACE /dev/stdout`), the text goes to stderr instead,
/// so that it is not mixed into the data.
fn print(text: &str) -> ExitCode {
    if paths::output::stdout_is_an_output() {
        eprint!("{text}");
        return ExitCode::SUCCESS;
    }
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
