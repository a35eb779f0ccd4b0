//! The owned-block API that layers above the allocator live on: owner
//! tags the free paths respect, unique handles with byte access, hand-out
//! and take-back with exactly one winner.

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{
    Backing, BlockError, Contig, CopyMigrator, FreeError, Gfp, HugePages, MemoryMapBuilder, MigrateType, PageAllocator,
    PageFlags, Pfn, Report,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn real(bytes: u64) -> PageAllocator {
    MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).nr_cpus(2).build().unwrap()
}

#[test]
fn a_map_issues_fifteen_distinct_keys_and_reuses_only_clean_tags() {
    let mm = real(16 << 20);
    let blocks = Blocks::new(&mm);
    let keys: Vec<_> = (0..15).map(|_| blocks.new_owner_key().unwrap()).collect();
    let mut tags: Vec<u8> = keys.iter().map(|k| k.owner().id()).collect();
    tags.sort_unstable();
    assert_eq!(tags, (1..=15).collect::<Vec<u8>>());
    assert_eq!(blocks.new_owner_key().unwrap_err(), mmkit::OwnerTagsExhausted);
    let mut keys = keys.into_iter();
    // A key whose tag no page carries frees the tag for the next key.
    let clean = keys.next().unwrap();
    let clean_tag = clean.owner();
    assert!(blocks.release_owner_key(clean));
    let again = blocks.new_owner_key().unwrap();
    assert_eq!(again.owner(), clean_tag);
    // A key whose handed-out page is still out retires its tag: the next
    // holder of the tag must not be able to take that page back.
    let dirty = keys.next().unwrap();
    let pfn = blocks.hand_out_block(blocks.alloc_block(&dirty, Gfp::KERNEL, 0).unwrap()).unwrap();
    assert!(!blocks.release_owner_key(dirty));
    assert_eq!(blocks.new_owner_key().unwrap_err(), mmkit::OwnerTagsExhausted, "the tag is retired");
    assert_eq!(mm.free_pages(pfn, 0).unwrap_err(), FreeError::Owned { pfn, owner: blocks.page_owner(pfn).unwrap() });
    Report::new(&mm).check_invariants().unwrap();
}

/// The old API took a `PageOwner` made by `PageOwner::new`, so anyone could
/// name a layer's tag and take its handed-out page back. Now only the key
/// the map issued takes it back; another key of the map, or the same tag's
/// key of another map, is refused and the page stays where it was.
#[test]
fn only_the_issuing_key_takes_a_handed_out_block_back() {
    let mm = real(16 << 20);
    let other_map = real(16 << 20);
    let (key, thief) = (Blocks::new(&mm).new_owner_key().unwrap(), Blocks::new(&mm).new_owner_key().unwrap());
    let foreign = Blocks::new(&other_map).new_owner_key().unwrap();
    assert_eq!(foreign.owner(), key.owner(), "the same tag number, in another map");
    let pfn = Blocks::new(&mm).hand_out_block(Blocks::new(&mm).alloc_block(&key, Gfp::KERNEL, 0).unwrap()).unwrap();
    assert_eq!(
        Blocks::new(&mm).take_back_block(&thief, pfn, 0).unwrap_err(),
        FreeError::Owned { pfn, owner: key.owner() }
    );
    assert_eq!(Blocks::new(&mm).take_back_block(&foreign, pfn, 0).unwrap_err(), FreeError::ForeignOwnerKey(pfn));
    assert_eq!(Blocks::new(&mm).alloc_block(&foreign, Gfp::KERNEL, 0).unwrap_err(), mmkit::AllocError::ForeignOwnerKey);
    let block = Blocks::new(&mm).take_back_block(&key, pfn, 0).unwrap();
    Blocks::new(&mm).free_block(block).unwrap();
    assert!(Blocks::new(&mm).release_owner_key(key));
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_block_has_bytes_its_holder_alone_writes() {
    let mm = real(16 << 20);
    let blocks = Blocks::new(&mm);
    let key = blocks.new_owner_key().unwrap();
    let free_before = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let mut block = blocks.alloc_block(&key, Gfp::KERNEL | Gfp::ZERO, 2).unwrap();
    assert_eq!(block.nr_pages(), 4);
    assert_eq!(blocks.page_owner(block.pfn()), Some(key.owner()));
    let bytes = blocks.block_bytes_mut(&mut block).unwrap();
    assert_eq!(bytes.len(), 4 * 4096);
    assert!(bytes.iter().all(|&b| b == 0), "__GFP_ZERO");
    bytes[16383] = 0xa5;
    assert_eq!(blocks.block_bytes(&block).unwrap()[16383], 0xa5);
    // The address-based view agrees.
    let addr = mm.page_address(block.pfn()).unwrap();
    assert_eq!(mm.address_to_pfn(addr.as_ptr()), Some(block.pfn()));
    blocks.free_block(block).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(), free_before);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn the_plain_free_paths_refuse_an_owned_block_and_change_nothing() {
    let mm = real(16 << 20);
    let blocks = Blocks::new(&mm);
    let key = blocks.new_owner_key().unwrap();
    let block = blocks.alloc_block(&key, Gfp::KERNEL, 0).unwrap();
    let pfn = block.pfn();
    let owned = Err(FreeError::Owned { pfn, owner: key.owner() });
    assert_eq!(mm.free_pages(pfn, 0), owned);
    assert_eq!(mm.put_page(pfn), owned);
    assert_eq!(mm.free_frozen_pages(pfn, 0), owned);
    assert!(mm.get_page(pfn).is_err(), "a frozen block gains no reference");
    // The range frees refuse an owned page before touching anything,
    // held (frozen) or handed out (see the quicklist tests).
    assert_eq!(Contig::new(&mm).free_contig_range(pfn, 1).map(drop), owned);
    assert_eq!(Contig::new(&mm).free_contig_frozen_range(pfn, 1).map(drop), owned);
    assert_eq!(blocks.page_owner(pfn), Some(key.owner()));
    blocks.free_block(block).unwrap();
    assert_eq!(blocks.page_owner(pfn), None);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn hand_out_and_take_back_have_one_winner() {
    let mm = real(16 << 20);
    let blocks = Blocks::new(&mm);
    let key = blocks.new_owner_key().unwrap();
    let other = blocks.new_owner_key().unwrap();
    let pfn = blocks.hand_out_block(blocks.alloc_block(&key, Gfp::KERNEL, 0).unwrap()).unwrap();
    assert_eq!(mm.free_pages(pfn, 0), Err(FreeError::Owned { pfn, owner: key.owner() }));
    assert_eq!(blocks.take_back_block(&other, pfn, 0).unwrap_err(), FreeError::Owned { pfn, owner: key.owner() });
    assert_eq!(
        blocks.take_back_block(&key, pfn, 1).unwrap_err(),
        FreeError::WrongOrder { pfn, allocated: 0, given: 1 }
    );
    let block = blocks.take_back_block(&key, pfn, 0).unwrap();
    assert_eq!(blocks.take_back_block(&key, pfn, 0).unwrap_err(), FreeError::DoubleFree(pfn));
    blocks.free_block(block).unwrap();
    assert_eq!(blocks.take_back_block(&key, pfn, 0).unwrap_err(), FreeError::DoubleFree(pfn));
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn take_back_adopts_a_plain_page_unless_it_is_shared_or_flagged() {
    let mm = real(16 << 20);
    let blocks = Blocks::new(&mm);
    let key = blocks.new_owner_key().unwrap();
    let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.get_page(pfn).unwrap();
    assert_eq!(blocks.take_back_block(&key, pfn, 0).unwrap_err(), FreeError::RefcountMismatch { pfn, refcount: 2 });
    assert_eq!(blocks.page_owner(pfn), None, "the mark is undone");
    mm.put_page(pfn).unwrap();
    mm.set_page_flags(pfn, PageFlags::LRU).unwrap();
    assert_eq!(blocks.take_back_block(&key, pfn, 0).unwrap_err(), FreeError::FlagsSet { pfn, flags: PageFlags::LRU });
    mm.clear_page_flags(pfn, PageFlags::LRU).unwrap();
    let block = blocks.take_back_block(&key, pfn, 0).unwrap();
    assert_eq!(blocks.page_owner(pfn), Some(key.owner()));
    blocks.free_block(block).unwrap();
    assert_eq!(blocks.take_back_block(&key, Pfn(u64::MAX), 0).unwrap_err(), FreeError::OutOfRange(Pfn(u64::MAX)));
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn another_allocators_block_is_handed_back_untouched() {
    let a = real(8 << 20);
    let key = Blocks::new(&a).new_owner_key().unwrap();
    let b = real(8 << 20);
    let mut block = Blocks::new(&a).alloc_block(&key, Gfp::KERNEL, 0).unwrap();
    assert!(Blocks::new(&b).block_bytes(&block).is_none());
    assert!(Blocks::new(&b).block_bytes_mut(&mut block).is_none());
    let block = match Blocks::new(&b).free_block(block) {
        Err(BlockError::Foreign(block)) => block,
        other => panic!("expected the block back, got {other:?}"),
    };
    let block = match Blocks::new(&b).hand_out_block(block) {
        Err(BlockError::Foreign(block)) => block,
        other => panic!("expected the block back, got {other:?}"),
    };
    Blocks::new(&a).free_block(block).unwrap();
    Report::new(&a).check_invariants().unwrap();
    Report::new(&b).check_invariants().unwrap();
}

#[test]
fn a_metadata_only_map_gives_blocks_without_bytes() {
    let mm = MemoryMapBuilder::with_memory(8 << 20).build().unwrap();
    let blocks = Blocks::new(&mm);
    let key = blocks.new_owner_key().unwrap();
    let block = blocks.alloc_block(&key, Gfp::KERNEL, 0).unwrap();
    assert!(blocks.block_bytes(&block).is_none());
    blocks.free_block(block).unwrap();
}

#[test]
fn the_default_migrator_refuses_an_owned_block() {
    let mm = MemoryMapBuilder::with_memory(64 << 20)
        .backing(Backing::RealMemory(HugePages::None))
        .migrator(CopyMigrator::new(|_, _, _| {}))
        .build()
        .unwrap();
    let blocks = Blocks::new(&mm);
    let key = blocks.new_owner_key().unwrap();
    let block = blocks.alloc_block(&key, Gfp::HIGHUSER_MOVABLE, 0).unwrap();
    let pb = 1u64 << mm.geometry().pageblock_order;
    let start = Pfn(block.pfn().0 & !(pb - 1));
    let err =
        Contig::new(&mm).alloc_contig_range(start, Pfn(start.0 + pb), MigrateType::Movable, Gfp::KERNEL).unwrap_err();
    assert!(matches!(err, mmkit::ContigError::Busy { .. }), "{err:?}");
    assert_eq!(blocks.page_owner(block.pfn()), Some(key.owner()));
    blocks.free_block(block).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn racing_take_backs_of_one_page_have_exactly_one_winner() {
    let mm = Arc::new(real(16 << 20));
    let key = Arc::new(Blocks::new(&mm).new_owner_key().unwrap());
    for _ in 0..200 {
        let pfn = Blocks::new(&mm).hand_out_block(Blocks::new(&mm).alloc_block(&key, Gfp::KERNEL, 0).unwrap()).unwrap();
        let wins = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (mm, wins, key) = (mm.clone(), wins.clone(), key.clone());
                std::thread::spawn(move || {
                    if let Ok(block) = Blocks::new(&mm).take_back_block(&key, pfn, 0) {
                        wins.fetch_add(1, Ordering::Relaxed);
                        Blocks::new(&mm).free_block(block).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(wins.load(Ordering::Relaxed), 1);
    }
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn threads_write_and_verify_patterns_in_their_own_blocks() {
    let mm = Arc::new(real(32 << 20));
    let key = Arc::new(Blocks::new(&mm).new_owner_key().unwrap());
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let (mm, key) = (mm.clone(), key.clone());
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for round in 0..200u32 {
                    let mut block = Blocks::new(&mm).alloc_block(&key, Gfp::KERNEL, round % 3).unwrap();
                    let tag = t ^ round as u8;
                    Blocks::new(&mm).block_bytes_mut(&mut block).unwrap().fill(tag);
                    held.push((block, tag));
                    if round % 2 == 1 {
                        let (block, tag) = held.swap_remove(0);
                        assert!(Blocks::new(&mm).block_bytes(&block).unwrap().iter().all(|&b| b == tag));
                        Blocks::new(&mm).free_block(block).unwrap();
                    }
                }
                for (block, tag) in held {
                    assert!(Blocks::new(&mm).block_bytes(&block).unwrap().iter().all(|&b| b == tag));
                    Blocks::new(&mm).free_block(block).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

/// A take-back that races the free of a frozen page (refcount 0, no
/// owner: what a block is between its owner clearing its mark and the
/// free claiming it) must never mark it: the free would then find an
/// owned page, report it bad and leak it. Found by two racing take-backs
/// of one handed-out block, where the loser marked the winner's block in
/// that window.
#[test]
fn a_take_back_racing_a_frozen_free_never_marks_the_page() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).nr_cpus(1).build().unwrap());
    let key = Blocks::new(&mm).new_owner_key().unwrap();
    let latest = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let taker = {
        let (mm, latest, stop) = (mm.clone(), latest.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let pfn = Pfn(latest.load(Ordering::Relaxed));
                assert!(Blocks::new(&mm).take_back_block(&key, pfn, 0).is_err(), "a frozen page is never taken back");
            }
        })
    };
    for _ in 0..200_000 {
        let pfn = mm.alloc_frozen_pages(Gfp::KERNEL, 0).unwrap();
        latest.store(pfn.0, Ordering::Relaxed);
        mm.free_frozen_pages(pfn, 0).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    taker.join().unwrap();
    assert_eq!(Report::new(&mm).stats().bad_pages, 0);
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

/// A `BlockStack` keeps only PFNs, but takes only blocks of its own key,
/// order and map, and gives back exactly the blocks pushed onto it.
#[test]
fn block_stacks_hold_only_their_own_kind() {
    use mmkit::BlockStack;
    let mm = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
    let other_map = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
    let key = Blocks::new(&mm).new_owner_key().unwrap();
    let other_key = Blocks::new(&mm).new_owner_key().unwrap();
    let foreign_key = Blocks::new(&other_map).new_owner_key().unwrap();
    let mut stack = BlockStack::with_capacity(&key, 0, 4);

    let a = Blocks::new(&mm).alloc_block(&key, Gfp::KERNEL, 0).unwrap();
    let b = Blocks::new(&mm).alloc_block(&key, Gfp::KERNEL, 0).unwrap();
    let (pa, pb) = (a.pfn(), b.pfn());
    stack.push(a).unwrap();
    stack.push(b).unwrap();
    // Another order, another key of the same map, another map's block of
    // the same number: each handed back unchanged.
    let wrong_order = stack.push(Blocks::new(&mm).alloc_block(&key, Gfp::KERNEL, 1).unwrap()).unwrap_err();
    let wrong_key = stack.push(Blocks::new(&mm).alloc_block(&other_key, Gfp::KERNEL, 0).unwrap()).unwrap_err();
    let foreign = stack.push(Blocks::new(&other_map).alloc_block(&foreign_key, Gfp::KERNEL, 0).unwrap()).unwrap_err();
    assert_eq!(stack.len(), 2);
    assert_eq!(stack.pfns(), &[pa, pb]);
    assert_eq!(stack.get(0).map(|b| b.pfn()), Some(pa));
    assert!(stack.get(2).is_none());
    assert!(stack.insert(3, Blocks::new(&mm).alloc_block(&key, Gfp::KERNEL, 0).unwrap()).is_err_and(|c| Blocks::new(
        &mm
    )
    .free_block(c)
    .is_ok()));

    // Moves in and out keep every block exactly once.
    let mut top = stack.split_off(1);
    assert_eq!((stack.pfns(), top.pfns()), (&[pa][..], &[pb][..]));
    assert!(stack.append(&mut top));
    assert!(top.is_empty());
    let mut strangers = BlockStack::new(&other_key, 0);
    strangers.push(wrong_key).unwrap();
    assert!(!stack.append(&mut strangers), "another kind's stack is refused");
    assert_eq!(strangers.len(), 1);
    let b = stack.remove(1).unwrap();
    assert_eq!(b.pfn(), pb);
    assert!(stack.remove(1).is_none());
    stack.insert(0, b).unwrap();
    assert_eq!(stack.pfns(), &[pb, pa]);

    // A default stack takes nothing.
    let mut inert = BlockStack::default();
    let back = inert.push(stack.pop().unwrap()).unwrap_err();
    assert!(inert.is_empty());

    for block in [back, stack.pop().unwrap(), strangers.pop().unwrap(), wrong_order] {
        Blocks::new(&mm).free_block(block).unwrap();
    }
    Blocks::new(&other_map).free_block(foreign).unwrap();
    assert!(stack.pop().is_none());
    assert!(Blocks::new(&mm).release_owner_key(key) && Blocks::new(&mm).release_owner_key(other_key));
    Report::new(&mm).check_invariants().unwrap();
}
