//! `mmkit zram`: mmkit's zram device outside the process — `serve` runs
//! nbdkit with the `mmkit-nbdkit` plugin, `ctl` talks to a served device's
//! control socket, `train-dict` trains a zstd dictionary for
//! `algorithm_params`.
//!
//! Owns the subcommand list only; each subcommand is its own module, and
//! `nbdkit` (starting and stopping the server) is shared with the `nbd`
//! benchmark.

pub mod ctl;
pub mod nbdkit;
pub mod serve;
pub mod train;

use clap::{Args, Subcommand};

/// `mmkit zram`'s arguments.
#[derive(Clone, Debug, Args)]
pub struct ZramArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ZramCommand,
}

/// `mmkit zram`'s subcommands.
#[derive(Clone, Debug, Subcommand)]
pub enum ZramCommand {
    /// Serve a compressed RAM device over NBD (nbdkit with mmkit's plugin),
    /// in the foreground; prints the NBD URI when ready.
    Serve(Box<serve::ServeArgs>),
    /// Show or set an attribute of a served device through its control
    /// socket (mm_stat, io_stat, compact, idle all, writeback huge, …).
    Ctl(ctl::CtlArgs),
    /// Train a zstd dictionary on 4 KiB pages of files or directories, for
    /// `--algorithm-params "algo=zstd dict=PATH"`.
    TrainDict(train::TrainArgs),
}
