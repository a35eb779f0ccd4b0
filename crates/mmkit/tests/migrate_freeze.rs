//! `CopyMigrator` freezes a block before it copies it (Linux's
//! `folio_ref_freeze`), so a block in flight cannot be adopted by a layer
//! through `take_back_block` meanwhile. Before the freeze, a take-back
//! that landed between the migrator's checks and its copy won as well: the
//! migrator answered `Ok` for a block it could not free (the layer owned it
//! now) and had copied it while the layer could write it.

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{Backing, CopyMigrator, Gfp, HugePages, MemoryMapBuilder, MigrateRequest, Migrator, Report};
use std::sync::Barrier;

#[test]
fn a_block_in_flight_is_either_moved_or_adopted_never_both() {
    let mm = MemoryMapBuilder::with_memory(16 << 20)
        .backing(Backing::RealMemory(HugePages::None))
        .nr_cpus(2)
        .build()
        .unwrap();
    let blocks = Blocks::new(&mm);
    let key = blocks.new_owner_key().unwrap();
    let migrator = CopyMigrator::new(|_, _, _| {});
    let (mut moved, mut adopted) = (0, 0);
    for round in 0..4000u32 {
        let pfn = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
        let request = MigrateRequest { pfn, order: 0, gfp: Gfp::HIGHUSER_MOVABLE, nid: 0 };
        let barrier = Barrier::new(2);
        let (migrated, taken) = std::thread::scope(|s| {
            let mover = s.spawn(|| {
                barrier.wait();
                migrator.migrate_page(&mm, &request)
            });
            barrier.wait();
            if round % 2 == 0 {
                std::hint::spin_loop();
            }
            let taken = blocks.take_back_block(&key, pfn, 0);
            (mover.join().unwrap(), taken)
        });
        match (migrated, taken) {
            (Ok(new), Err(_)) => {
                moved += 1;
                assert_ne!(new, pfn);
                assert_eq!(blocks.page_owner(pfn), None, "the old block went back free");
                mm.free_pages(new, 0).unwrap();
            }
            (Err(_), Ok(block)) => {
                adopted += 1;
                assert_eq!(block.pfn(), pfn);
                blocks.free_block(block).unwrap();
            }
            (Ok(new), Ok(block)) => panic!("round {round}: moved to {new} and adopted as {block:?}"),
            // Both backed off (the take-back marked the block just before
            // the freeze, the move saw the mark and unfroze): still a plain
            // block with its one reference.
            (Err(_), Err(_)) => {
                assert_eq!(blocks.page_owner(pfn), None);
                mm.free_pages(pfn, 0).unwrap();
            }
        }
    }
    assert!(moved + adopted > 0);
    assert_eq!(Report::new(&mm).stats().bad_pages, 0);
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

/// A block frozen for a move refuses adoption: the take-back sees a frozen
/// block (refcount 0) and changes nothing, as it does for any frozen block.
#[test]
fn a_frozen_block_refuses_adoption() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
    let blocks = Blocks::new(&mm);
    let key = blocks.new_owner_key().unwrap();
    let pfn = mm.alloc_frozen_pages(Gfp::KERNEL, 0).unwrap();
    assert!(blocks.take_back_block(&key, pfn, 0).is_err());
    assert_eq!(blocks.page_owner(pfn), None);
    mm.free_frozen_pages(pfn, 0).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}
