//! `X86Frames`: a page source as the `x86_64` crate's frame allocator
//! (feature `x86_64`). Frames are unique, aligned and sized as asked, go
//! back on deallocation, and a bad deallocation changes nothing.
#![cfg(feature = "x86_64")]

use mmkit::{FreeError, Gfp, MemoryMapBuilder, Report, X86Frames};
use std::collections::HashSet;
use x86_64::structures::paging::{FrameAllocator, FrameDeallocator, PhysFrame, Size1GiB, Size2MiB, Size4KiB};
use x86_64::PhysAddr;

#[test]
fn frames_are_unique_aligned_and_go_back() {
    let mm = MemoryMapBuilder::with_memory(256 << 20).nr_cpus(2).build().unwrap();
    let before = mm.nr_free_pages() + mm.nr_pcp_pages();
    let mut frames = X86Frames::new(&mm, Gfp::KERNEL).unwrap();
    let mut small: Vec<PhysFrame<Size4KiB>> = Vec::new();
    let mut huge: Vec<PhysFrame<Size2MiB>> = Vec::new();
    for _ in 0..16 {
        huge.push(frames.allocate_frame().unwrap());
        for _ in 0..64 {
            small.push(frames.allocate_frame().unwrap());
        }
    }
    let mut seen = HashSet::new();
    for f in &small {
        assert!(seen.insert(f.start_address().as_u64() >> 12), "{f:?} twice");
    }
    for f in &huge {
        assert_eq!(f.start_address().as_u64() % (2 << 20), 0);
        for page in 0..512 {
            assert!(seen.insert((f.start_address().as_u64() >> 12) + page), "{f:?} overlaps another frame");
        }
    }
    let none: Option<PhysFrame<Size1GiB>> = frames.allocate_frame();
    assert!(none.is_none(), "no 1 GiB block in a map whose top order is 10");
    for f in small {
        // SAFETY: the trait's contract holds: nothing uses the frame.
        unsafe { frames.deallocate_frame(f) };
    }
    for f in huge {
        frames.try_deallocate(f).unwrap();
    }
    mm.drain_all_pages();
    assert_eq!(mm.nr_free_pages() + mm.nr_pcp_pages(), before);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_bad_deallocation_changes_nothing() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    let mut frames = X86Frames::new(&mm, Gfp::KERNEL).unwrap();
    let frame: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
    frames.try_deallocate(frame).unwrap();
    assert!(matches!(frames.try_deallocate(frame), Err(FreeError::DoubleFree(_) | FreeError::NotAllocated(_))));
    // SAFETY: the trait's contract holds: nothing uses the frame; the double
    // free is refused inside.
    unsafe { frames.deallocate_frame(frame) };
    let far = PhysFrame::<Size4KiB>::from_start_address(PhysAddr::new(1 << 40)).unwrap();
    assert!(matches!(frames.try_deallocate(far), Err(FreeError::OutOfRange(_))));
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn only_4_kib_pages_make_frames_and_a_pinned_cpu_is_a_source_too() {
    let mm = MemoryMapBuilder::new().page_size(16384).add_pc_node(0, 0, 64 << 20).build().unwrap();
    assert!(X86Frames::new(&mm, Gfp::KERNEL).is_none());
    let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    let mut frames = X86Frames::new(mm.pin_cpu(0).unwrap(), Gfp::KERNEL).unwrap();
    let f: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
    frames.try_deallocate(f).unwrap();
}
