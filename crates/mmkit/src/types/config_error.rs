//! The parts of the typed errors that name a knob or an index: which
//! builder tunable or range was refused, and which CPU, node or zone a call
//! named that the map lacks. Plain values beside `error`, which re-exports
//! them; nothing here touches the allocator.
#![deny(unsafe_code)]

use core::fmt;

/// A knob of [`MemoryMapBuilder`](crate::MemoryMapBuilder) that
/// [`BuildError::BadTunable`](crate::BuildError::BadTunable) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tunable {
    /// `vm.min_free_kbytes`: 0 ..= `i32::MAX` as in Linux, and below the
    /// map's low memory (at or above it no allocation could succeed).
    MinFreeKbytes,
    /// `vm.watermark_scale_factor`: 1 ..= 3000 (Linux's sysctl bounds).
    WatermarkScaleFactor,
    /// `vm.watermark_boost_factor`: 0 ..= `i32::MAX` (an `int` sysctl).
    WatermarkBoostFactor,
    /// An entry of `vm.lowmem_reserve_ratio`: 0 ..= `i32::MAX`.
    LowmemReserveRatio,
    /// `vm.percpu_pagelist_high_fraction`: 0, or 8 ..= `i32::MAX`.
    PercpuPagelistHighFraction,
}

impl Tunable {
    /// The sysctl's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::MinFreeKbytes => "min_free_kbytes",
            Self::WatermarkScaleFactor => "watermark_scale_factor",
            Self::WatermarkBoostFactor => "watermark_boost_factor",
            Self::LowmemReserveRatio => "lowmem_reserve_ratio",
            Self::PercpuPagelistHighFraction => "percpu_pagelist_high_fraction",
        }
    }

    /// The values accepted, in words.
    pub fn allowed(self) -> &'static str {
        match self {
            Self::MinFreeKbytes => "0..=2147483647 and below the map's low memory",
            Self::WatermarkScaleFactor => "1..=3000",
            Self::WatermarkBoostFactor | Self::LowmemReserveRatio => "0..=2147483647",
            Self::PercpuPagelistHighFraction => "0 or 8..=2147483647",
        }
    }
}

/// Which list of ranges a [`BuildError::BadRange`](crate::BuildError::BadRange) came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeKind {
    /// [`MemoryMapBuilder::hole`](crate::MemoryMapBuilder::hole).
    Hole,
    /// [`MemoryMapBuilder::reserved`](crate::MemoryMapBuilder::reserved).
    Reserved,
}

impl RangeKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Hole => "hole",
            Self::Reserved => "reserved range",
        }
    }
}

/// What is wrong with a hole or reserved range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadRangeReason {
    /// `start > end`.
    Reversed,
    /// Part of the range lies outside the span of the map's zones.
    OutsideMap,
}

impl fmt::Display for BadRangeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Reversed => "start above end",
            Self::OutsideMap => "outside the map's zones",
        })
    }
}

/// A call named a CPU, node or zone the map does not have (Linux's
/// `-EINVAL`). Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexError {
    /// CPU at or above `nr_cpus`.
    NoSuchCpu {
        /// The CPU given.
        cpu: usize,
        /// CPUs the allocator has.
        nr_cpus: usize,
    },
    /// Node at or above `nr_nodes`.
    NoSuchNode {
        /// The node given.
        nid: usize,
        /// Highest node id + 1.
        nr_nodes: usize,
    },
    /// Zone index at or above the number of zones.
    NoSuchZone {
        /// The index given.
        zone: usize,
        /// Zones the map has.
        nr_zones: usize,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchCpu { cpu, nr_cpus } => write!(f, "no cpu {cpu} (the allocator has {nr_cpus})"),
            Self::NoSuchNode { nid, nr_nodes } => write!(f, "no node {nid} (the map has {nr_nodes})"),
            Self::NoSuchZone { zone, nr_zones } => write!(f, "no zone {zone} (the map has {nr_zones})"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for IndexError {}
