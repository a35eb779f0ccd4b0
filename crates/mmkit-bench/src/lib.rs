//! # mmkit-bench — what mmkit's benchmarks measure
//!
//! The implementations under test and the states they are measured in,
//! shared by `mmkit bench` (the command line's `cli/src/bench/`) and the
//! criterion benches in this crate's `benches/`:
//! - [`subjects`]: mmkit and its peers (`buddy_system_allocator`, mimalloc,
//!   the system allocator) behind one page-granular interface,
//!   [`subjects::PageAlloc`], and the alloc+free loops written once over it;
//! - [`heap`]: safe wrappers over `GlobalAlloc` for the heap peers (the only
//!   `unsafe` of the crate);
//! - [`fragment`]: deterministic fragmentation recipes;
//! - [`contig`]: a map prepared for the contiguous-range workload
//!   (`alloc_contig_range`, `free_contig_range`, `cma_alloc`).
//!
//! Owns the things being measured, not the measuring: timing, medians,
//! ratios and reports are the caller's (the command line's harness, or
//! criterion). Uses mmkit's public API only and must not reach into its
//! internals; test scaffolding shared with mmkit's tests lives in
//! `mmkit-testkit`, not here.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod contig;
pub mod fragment;
#[allow(unsafe_code)] // GlobalAlloc calls, each with a SAFETY comment.
pub mod heap;
pub mod subjects;

use std::fmt;

/// A benchmark that could not run (setup failed, an allocation failed),
/// with a message saying what and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchError(pub String);

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

impl BenchError {
    /// Wraps any displayable error with what was being done.
    pub fn context(what: &str, err: impl fmt::Display) -> Self {
        BenchError(format!("{what}: {err}"))
    }
}

/// The README's and the guides' examples, compiled and run as doctests
/// here, where every crate is in reach, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
#[doc = include_str!("../../../docs/page-allocator.md")]
#[doc = include_str!("../../../docs/fast-paths.md")]
#[doc = include_str!("../../../docs/quicklists.md")]
#[doc = include_str!("../../../docs/zsmalloc-zswap.md")]
#[doc = include_str!("../../../docs/zram-nbd.md")]
#[doc = include_str!("../../../docs/benchmarking.md")]
#[doc = include_str!("../../../docs/trace-replay.md")]
#[doc = include_str!("../../../docs/architecture.md")]
#[doc = include_str!("../../../docs/known-gaps.md")]
struct ReadmeExamples;
