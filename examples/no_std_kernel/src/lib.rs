//! A kernel's physical frame allocator on mmkit, `#![no_std]`, with its
//! page descriptors in the memory it manages.
//!
//! A kernel meets the page allocator before it has a heap big enough for
//! one descriptor per frame (16 bytes per 4 KiB page: 4 MiB for 1 GiB).
//! Linux solves this with memblock: it takes `mem_map` out of the physical
//! memory it is about to manage and marks those frames reserved. [`boot`]
//! does the same with mmkit: from the boot loader's usable regions (any
//! number of them, in any order) it builds one node, turns every gap
//! into a hole, takes the first frames of a
//! region big enough for the descriptor table, reserves them and lends
//! their mapping to
//! [`MemoryMapBuilder::descriptor_memory`]. What else the map needs (zones,
//! per-CPU state, a byte per pageblock) is a few KiB from `alloc`, which an
//! early bump heap covers.
//!
//! ```
//! use core::mem::MaybeUninit;
//! use mmkit::Gfp;
//!
//! // 1 GiB of RAM with a gap at 640 KiB..1 MiB, as a PC's firmware leaves it.
//! let regions = [0x1000..0xa_0000, 0x10_0000..1 << 30];
//! // The kernel's direct map of a physical range; here, leaked heap memory.
//! let direct_map = |frames: core::ops::Range<u64>| -> &'static mut [MaybeUninit<u8>] {
//!     Vec::leak(vec![MaybeUninit::uninit(); ((frames.end - frames.start) * 4096) as usize])
//! };
//! let boot = mmkit_example_no_std::boot(&regions, direct_map).unwrap();
//! let frame = boot.mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
//! assert!(!boot.descriptor_frames.contains(&frame.0));
//! boot.mm.free_pages(frame, 0).unwrap();
//! ```
#![no_std]

use core::mem::MaybeUninit;
use core::ops::Range;
use mmkit::{BuildError, MemoryMapBuilder, PageAllocator};

/// Frame size: 4 KiB, mmkit's default geometry.
pub const FRAME_SIZE: u64 = 4096;

/// A built frame allocator and the frames its descriptors occupy.
pub struct Boot {
    /// The allocator over every usable frame but the descriptors'.
    pub mm: PageAllocator,
    /// The frames holding the descriptor table, reserved in `mm` so that it
    /// never hands them out.
    pub descriptor_frames: Range<u64>,
}

/// Why [`boot`] failed.
#[derive(Debug, PartialEq, Eq)]
pub enum BootError {
    /// No usable region.
    NoMemory,
    /// No region holds the descriptor table (`frames` frames).
    NoRoomForDescriptors {
        /// Frames the table needs.
        frames: u64,
    },
    /// mmkit refused the layout.
    Build(BuildError),
}

/// Builds a frame allocator over `regions` (usable physical memory, byte
/// ranges, as the boot loader reports it; partial frames are dropped),
/// with its descriptor table in the first frames of the first region that
/// can hold it. `map` gives the kernel's mapping of a frame range (its
/// direct map), which becomes the table's for good.
///
/// # Errors
/// [`BootError`]: no usable region, none big enough for the table, or a
/// layout mmkit refuses.
pub fn boot(
    regions: &[Range<u64>],
    map: impl FnOnce(Range<u64>) -> &'static mut [MaybeUninit<u8>],
) -> Result<Boot, BootError> {
    let frames = |r: &Range<u64>| r.start.div_ceil(FRAME_SIZE)..r.end / FRAME_SIZE;
    let usable = || regions.iter().map(frames).filter(|f| f.start < f.end);
    let lowest = usable().map(|f| f.start).min().ok_or(BootError::NoMemory)?;
    let highest = usable().map(|f| f.end).max().ok_or(BootError::NoMemory)?;
    // One node from the lowest to the highest frame, split into zones by
    // the PC's DMA and DMA32 limits; the gaps between regions are holes.
    let mut builder =
        MemoryMapBuilder::new().add_pc_node(0, lowest, (highest - lowest) * FRAME_SIZE).nr_cpus(1).cpu_id_fn(|| 0);
    // Every frame of the span outside every region is a hole, however
    // many regions there are and in whatever order (overlaps allowed): a
    // walk from the lowest frame that skips to the end of the regions
    // covering it, or else marks the gap to the next region's start. No
    // table of regions, so no limit on their number (a real UEFI map has
    // well over 32).
    let mut cursor = lowest;
    while cursor < highest {
        match usable().filter(|f| f.start <= cursor && cursor < f.end).map(|f| f.end).max() {
            Some(end) => cursor = end,
            None => {
                let next = usable().map(|f| f.start).filter(|&s| s > cursor).min().unwrap_or(highest);
                builder = builder.hole(cursor..next);
                cursor = next;
            }
        }
    }
    let bytes = builder.descriptor_table_bytes().map_err(BootError::Build)? as u64;
    let needed = bytes.div_ceil(FRAME_SIZE);
    let home =
        usable().find(|f| f.end - f.start >= needed).ok_or(BootError::NoRoomForDescriptors { frames: needed })?;
    let descriptor_frames = home.start..home.start + needed;
    let mm = builder
        .reserved(descriptor_frames.clone())
        .descriptor_memory(map(descriptor_frames.clone()))
        .build()
        .map_err(BootError::Build)?;
    Ok(Boot { mm, descriptor_frames })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use mmkit::{Gfp, Pfn, Report};
    use std::vec::Vec;

    fn direct_map(frames: Range<u64>) -> &'static mut [MaybeUninit<u8>] {
        Vec::leak(std::vec![MaybeUninit::new(0xa5); ((frames.end - frames.start) * FRAME_SIZE) as usize])
    }

    #[test]
    fn a_1_gib_machine_boots_with_its_descriptors_in_its_own_memory() {
        let regions = [0x1000..0xa_0000, 0x10_0000..0x3fe0_0000, 0x3ff0_0000..1 << 30];
        let boot = boot(&regions, direct_map).unwrap();
        // 16 bytes per frame of the span (4 MiB, 1024 frames) and the
        // alignment slack, a frame more.
        assert_eq!(boot.descriptor_frames.end - boot.descriptor_frames.start, 1025);
        assert!(boot.descriptor_frames.start >= 0x100, "the first region is too small for it");
        let mm = &boot.mm;
        Report::new(mm).check_invariants().unwrap();
        let usable: u64 = regions.iter().map(|r| (r.end / FRAME_SIZE) - r.start.div_ceil(FRAME_SIZE)).sum();
        assert_eq!(Report::new(mm).nr_free_pages(), usable - 1025, "every usable frame is free but the descriptors'");
        // Every frame the allocator hands out is usable and none holds
        // descriptors.
        let mut held: Vec<Pfn> = Vec::new();
        while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::DMA32, 0) {
            assert!(!boot.descriptor_frames.contains(&pfn.0), "frame {pfn} holds descriptors");
            let byte = pfn.0 * FRAME_SIZE;
            assert!(regions.iter().any(|r| r.contains(&byte)), "frame {pfn} is not usable memory");
            held.push(pfn);
        }
        // All but the watermark reserves.
        assert!(held.len() as u64 > usable * 95 / 100, "{} frames of {usable}", held.len());
        mm.free_pages_bulk(&held).unwrap();
        Report::new(mm).check_invariants().unwrap();
    }

    /// A boot map with more usable regions than the old fixed table of 32
    /// (given out of order): the regions past the 32nd were never walked,
    /// so the gaps between them were handed out as RAM. Every frame the
    /// allocator hands out must lie in a region.
    #[test]
    fn every_gap_of_a_map_with_many_regions_is_a_hole() {
        // 1 MiB regions every 2 MiB from 16 MiB up, listed backwards, and a
        // big region first for the descriptors.
        let mut regions: Vec<Range<u64>> = std::vec![0x1000..0x80_0000];
        regions.extend((0..80u64).rev().map(|i| (16 << 20) + (i << 21)..(16 << 20) + (i << 21) + (1 << 20)));
        let boot = boot(&regions, direct_map).unwrap();
        let mm = &boot.mm;
        Report::new(mm).check_invariants().unwrap();
        let usable: u64 = regions.iter().map(|r| (r.end / FRAME_SIZE) - r.start.div_ceil(FRAME_SIZE)).sum();
        let descriptors = boot.descriptor_frames.end - boot.descriptor_frames.start;
        assert_eq!(Report::new(mm).nr_free_pages(), usable - descriptors, "only usable frames are free");
        let mut held: Vec<Pfn> = Vec::new();
        while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::DMA32, 0) {
            let byte = pfn.0 * FRAME_SIZE;
            assert!(regions.iter().any(|r| r.contains(&byte)), "frame {pfn} is a firmware gap");
            held.push(pfn);
        }
        mm.free_pages_bulk(&held).unwrap();
        Report::new(mm).check_invariants().unwrap();
    }

    #[test]
    fn no_room_for_the_table_is_an_error() {
        // Regions of 16 frames each spread over 4 GiB: the table needs
        // about 4000 frames.
        let regions: Vec<Range<u64>> = (0..64u64).map(|i| i << 26..(i << 26) + 16 * FRAME_SIZE).collect();
        let refused = boot(&regions, direct_map).err();
        assert!(matches!(refused, Some(BootError::NoRoomForDescriptors { frames: 4000.. })), "{refused:?}");
        assert_eq!(boot(&[], direct_map).err(), Some(BootError::NoMemory));
    }
}
