//! `X86Frames`: a page source as the `x86_64` crate's frame allocator
//! (feature `x86_64`). Frames are unique, aligned and sized as asked, go
//! back on deallocation, and a bad deallocation changes nothing.
#![cfg(feature = "x86_64")]

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{FreeError, Gfp, MemoryMapBuilder, Report, X86Frames};
use std::collections::HashSet;
use x86_64::structures::paging::{FrameAllocator, FrameDeallocator, PhysFrame, Size1GiB, Size2MiB, Size4KiB};
use x86_64::PhysAddr;

#[test]
fn frames_are_unique_aligned_and_go_back() {
    let mm = MemoryMapBuilder::with_memory(256 << 20).nr_cpus(2).build().unwrap();
    let before = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
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
        // SAFETY: nothing uses the frame.
        unsafe { frames.try_deallocate(f) }.unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(), before);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_bad_deallocation_changes_nothing() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    let mut frames = X86Frames::new(&mm, Gfp::KERNEL).unwrap();
    let frame: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
    // SAFETY: nothing uses the frame.
    unsafe { frames.try_deallocate(frame) }.unwrap();
    assert!(matches!(
        // SAFETY: nothing uses the frame; the double free is refused inside.
        unsafe { frames.try_deallocate(frame) },
        Err(FreeError::DoubleFree(_) | FreeError::NotAllocated(_))
    ));
    // SAFETY: the trait's contract holds: nothing uses the frame; the double
    // free is refused inside.
    unsafe { frames.deallocate_frame(frame) };
    let far = PhysFrame::<Size4KiB>::from_start_address(PhysAddr::new(1 << 40)).unwrap();
    // SAFETY: nothing uses the frame; it is outside the map and refused.
    let refused = unsafe { frames.try_deallocate(far) };
    assert!(matches!(refused, Err(FreeError::OutOfRange(_))));
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn only_4_kib_pages_make_frames_and_a_pinned_cpu_is_a_source_too() {
    let mm = MemoryMapBuilder::new().page_size(16384).add_pc_node(0, 0, 64 << 20).build().unwrap();
    assert!(X86Frames::new(&mm, Gfp::KERNEL).is_none());
    let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    let mut frames = X86Frames::new(Cpus::new(&mm).pin_cpu(0).unwrap(), Gfp::KERNEL).unwrap();
    let f: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
    // SAFETY: nothing uses the frame.
    unsafe { frames.try_deallocate(f) }.unwrap();
}

/// On the old adapter every safe free path freed a frame it had handed out
/// (a live page table, say), and the next `allocate_frame` returned the
/// same frame: the `unsafe impl FrameAllocator` broke its promise. Now
/// each one is refused, the next frames differ, and only the adapter's own
/// (unsafe) deallocation gives the frame back.
#[test]
fn safe_frees_of_a_handed_out_frame_are_refused_and_it_is_never_handed_out_twice() {
    use mmkit::Pfn;
    let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(1).build().unwrap();
    let mut frames = X86Frames::new(&mm, Gfp::KERNEL).unwrap();
    let table: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
    let huge: PhysFrame<Size2MiB> = frames.allocate_frame().unwrap();
    let pfn = Pfn(table.start_address().as_u64() >> 12);
    let huge_pfn = Pfn(huge.start_address().as_u64() >> 12);
    let owned = |e| matches!(e, Err(FreeError::Owned { .. }));
    assert!(owned(mm.free_pages(pfn, 0)));
    assert!(owned(mm.put_page(pfn)));
    assert!(owned(mm.free_pages(huge_pfn, 9)));
    assert!(mm.free_pages_bulk(&[pfn]).is_err());
    assert!(mm.free_frozen_pages(pfn, 0).is_err());
    // The range free refuses an owned page before touching anything, and
    // no bare-PFN call takes a reference or sets a flag on it.
    let tag = Blocks::new(&mm).page_owner(pfn);
    assert!(tag.is_some());
    assert!(owned(mmkit::Contig::new(&mm).free_contig_range(pfn, 1).map(drop)));
    assert!(matches!(mm.get_page(pfn), Err(mmkit::PageError::Owned { .. })));
    assert!(mm.set_page_flags(pfn, mmkit::PageFlags::LRU).is_err());
    assert_eq!(Blocks::new(&mm).page_owner(pfn), tag, "still the adapter's");
    // A guard's block cannot be freed behind its back (it carries the
    // map's guard tag), so it is never reallocated as a frame meanwhile.
    let guard = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap();
    assert!(owned(mm.free_pages(guard.pfn(), 0)));
    let guarded = guard.pfn();
    let mut meanwhile = Vec::new();
    for _ in 0..64 {
        let f: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
        assert_ne!(f.start_address().as_u64() >> 12, guarded.0, "a guarded page handed out as a frame");
        meanwhile.push(f);
    }
    drop(guard);
    // Another adapter of the same map cannot give the frame back either.
    let mut other = X86Frames::new(&mm, Gfp::KERNEL).unwrap();
    // SAFETY: the call is refused; nothing is freed.
    assert!(unsafe { other.try_deallocate(table) }.is_err());
    // Nor is a plain page of the map adopted and freed through the adapter.
    let plain = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    let plain_frame = PhysFrame::<Size4KiB>::from_start_address(PhysAddr::new(plain.0 << 12)).unwrap();
    // SAFETY: refused; nothing is freed.
    assert!(unsafe { frames.try_deallocate(plain_frame) }.is_err());
    mm.free_pages(plain, 0).unwrap();
    let mut seen = HashSet::new();
    for _ in 0..256 {
        let f: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
        assert_ne!(f, table, "a live frame handed out again");
        assert!(seen.insert(f));
    }
    // SAFETY: nothing uses these frames.
    unsafe {
        frames.try_deallocate(table).unwrap();
        frames.try_deallocate(huge).unwrap();
        for f in seen {
            frames.deallocate_frame(f);
        }
        for f in meanwhile {
            frames.try_deallocate(f).unwrap();
        }
    }
    let _ = (frames.into_inner(), other.into_inner());
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}
