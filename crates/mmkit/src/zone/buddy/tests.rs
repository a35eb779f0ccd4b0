//! Unit tests of the buddy free area: splits, merges, isolation, and the
//! non-empty mask against the lists it summarises.
use super::*;
use crate::mem::page::PageTable;
use alloc::vec;
use alloc::vec::Vec;

struct Fixture {
    pages: PageTable,
    blocks: PageblockMap,
}

impl Fixture {
    fn new(n: usize) -> Self {
        Self {
            pages: PageTable::try_new_zeroed(n).unwrap(),
            blocks: PageblockMap::try_new(n, 2, MigrateType::Movable).unwrap(),
        }
    }
    fn cx(&self, max_order: u32) -> BuddyCtx<'_> {
        BuddyCtx {
            pages: self.pages.descs(),
            blocks: &self.blocks,
            start: 0,
            end: self.pages.len() as u32,
            max_order,
            pageblock_order: 2,
        }
    }
}

#[test]
fn chunk_orders_follow_alignment_and_size() {
    assert_eq!(chunk_order(0, 16, 10), 4);
    assert_eq!(chunk_order(4, 16, 10), 2);
    assert_eq!(chunk_order(8, 3, 10), 1);
    assert_eq!(chunk_order(1 << 12, 1 << 12, 10), 10);
    assert_eq!(chunk_order(7, 100, 10), 0);
}

#[test]
fn freeing_every_page_merges_to_max_order() {
    let f = Fixture::new(64);
    let cx = f.cx(4);
    let mut area = FreeArea::new(4);
    for i in 0..64 {
        area.free_one(cx, i, 0, Placement::Auto);
    }
    assert_eq!(area.free_pages(), 64);
    assert_eq!(area.nr_free(4), 4);
    for o in 0..4 {
        assert_eq!(area.nr_free(o), 0, "order {o} left unmerged");
    }
}

#[test]
fn split_and_take_back() {
    let f = Fixture::new(16);
    let cx = f.cx(4);
    let mut area = FreeArea::new(4);
    area.free_range(cx, 0, 16, Placement::Tail);
    let a = area.rmqueue_smallest(cx, 0, MigrateType::Movable).unwrap();
    assert_eq!(a, 0);
    assert_eq!(area.free_pages(), 15);
    assert_eq!((0..4).map(|o| area.nr_free(o)).collect::<Vec<_>>(), vec![1, 1, 1, 1]);
    area.free_one(cx, a, 0, Placement::Auto);
    assert_eq!(area.nr_free(4), 1);
    assert!(area.rmqueue_smallest(cx, 0, MigrateType::Unmovable).is_none());
}

#[test]
fn take_page_leaves_the_rest_free() {
    let f = Fixture::new(16);
    let cx = f.cx(4);
    let mut area = FreeArea::new(4);
    area.free_range(cx, 0, 16, Placement::Tail);
    assert!(area.take_page(cx, 5));
    assert!(!area.take_page(cx, 5), "already taken");
    assert_eq!(area.free_pages(), 15);
    assert_eq!(area.enclosing_free_block(cx, 5), None);
    assert_eq!(area.enclosing_free_block(cx, 4), Some((4, 0)));
    assert_eq!(area.enclosing_free_block(cx, 12), Some((8, 3)));
}

#[test]
fn isolated_blocks_do_not_merge_with_other_types() {
    let f = Fixture::new(16);
    let cx = f.cx(4);
    f.blocks.set(4, MigrateType::Isolate);
    let mut area = FreeArea::new(4);
    area.free_range(cx, 0, 8, Placement::Tail);
    assert_eq!(area.nr_blocks(2, MigrateType::Movable), 1);
    assert_eq!(area.nr_blocks(2, MigrateType::Isolate), 1);
    let f = Fixture::new(16);
    let cx = f.cx(4);
    f.blocks.set(4, MigrateType::Unmovable);
    let mut area = FreeArea::new(4);
    area.free_range(cx, 0, 8, Placement::Tail);
    // Page 4's pageblock is freed second, so its buddy adopts its type.
    assert_eq!(area.nr_blocks(3, MigrateType::Unmovable), 1, "pcp types merge");
    assert_eq!(f.blocks.get(0), MigrateType::Unmovable, "buddy adopted the type");
}

#[test]
fn split_isolate_and_remerge_pageblocks() {
    let f = Fixture::new(16);
    let cx = f.cx(4);
    let mut area = FreeArea::new(4);
    area.free_range(cx, 0, 16, Placement::Tail);
    assert!(area.split_to_pageblocks(cx, 8));
    assert_eq!(area.nr_blocks(2, MigrateType::Movable), 2);
    assert_eq!(area.nr_blocks(3, MigrateType::Movable), 1);
    assert!(!area.split_to_pageblocks(cx, 8), "already pageblock-sized");
    f.blocks.set(8, MigrateType::Isolate);
    assert_eq!(area.move_freepages_block(cx, 8, MigrateType::Isolate), 4);
    f.blocks.set(8, MigrateType::Movable);
    area.move_freepages_block(cx, 8, MigrateType::Movable);
    for pb in [0, 4, 8, 12] {
        area.remerge_pageblock(cx, pb);
    }
    assert_eq!(area.nr_free(4), 1, "one block again");
    assert_eq!(area.free_pages(), 16);
}

#[test]
fn take_range_returns_the_outside_parts() {
    let f = Fixture::new(16);
    let cx = f.cx(4);
    let mut area = FreeArea::new(4);
    area.free_range(cx, 0, 16, Placement::Tail);
    area.take_range(cx, 3, 6);
    assert_eq!(area.free_pages(), 13);
    assert_eq!(area.enclosing_free_block(cx, 0), Some((0, 1)));
    assert_eq!(area.enclosing_free_block(cx, 2), Some((2, 0)));
    assert_eq!(area.enclosing_free_block(cx, 3), None);
    assert_eq!(area.enclosing_free_block(cx, 5), None);
    assert_eq!(area.enclosing_free_block(cx, 6), Some((6, 1)));
    assert_eq!(area.enclosing_free_block(cx, 9), Some((8, 3)));
}

#[test]
fn merge_stops_at_zone_edge() {
    let f = Fixture::new(16);
    let mut cx = f.cx(4);
    cx.start = 4;
    let mut area = FreeArea::new(4);
    area.free_range(cx, 4, 12, Placement::Tail);
    assert_eq!(area.nr_free(2), 1);
    assert_eq!(area.nr_free(3), 1);
    assert_eq!(area.free_pages(), 12);
}

/// Checks every list against its count and its bit in the non-empty mask,
/// and the page counters against the lists.
fn check_lists(area: &FreeArea, cx: BuddyCtx<'_>) {
    let mut by_type = [0u64; MIGRATE_TYPES];
    for order in 0..=cx.max_order {
        for mt in MigrateType::ALL {
            let blocks = area.iter_list(cx, order, mt).count() as u64;
            assert_eq!(blocks, area.nr_blocks(order, mt), "count of ({order}, {mt:?})");
            assert_eq!(blocks > 0, area.has_blocks(order, mt), "mask bit of ({order}, {mt:?})");
            by_type[mt as usize] += blocks << order;
        }
    }
    for mt in MigrateType::ALL {
        assert_eq!(by_type[mt as usize], area.free_pages_of(mt), "pages of {mt:?}");
        assert_eq!(area.orders_of(mt) >> (cx.max_order + 1), 0, "bits above max order for {mt:?}");
    }
    assert_eq!(by_type.iter().sum::<u64>(), area.free_pages());
}

#[test]
fn nonempty_mask_follows_random_edits() {
    const CHUNK: u32 = 16;
    let f = Fixture::new(64 * CHUNK as usize);
    let cx = f.cx(4);
    let mut area = FreeArea::new(4);
    let mut rng = mmkit_testkit::XorShift64::new(0x6d61_736b);
    // One free block at most per 16-page chunk, at its start, so blocks of
    // order <= 4 never overlap.
    let mut free: Vec<bool> = vec![false; 64];
    for step in 0..20_000 {
        let chunk = rng.index(free.len());
        let idx = chunk as u32 * CHUNK;
        let mt = MigrateType::ALL[rng.index(MIGRATE_TYPES)];
        match (free[chunk], rng.below(3)) {
            (false, _) => {
                let order = rng.below(5) as u32;
                area.add(cx, idx, order, mt, rng.coin());
                free[chunk] = true;
            }
            (true, 0) => area.move_to(cx, idx, mt),
            (true, _) => {
                area.del(cx, idx);
                free[chunk] = false;
            }
        }
        if step % 7 == 0 {
            check_lists(&area, cx);
        }
    }
    check_lists(&area, cx);
}

#[test]
fn rmqueue_smallest_takes_the_lowest_non_empty_order() {
    let f = Fixture::new(64);
    let cx = f.cx(4);
    let mut area = FreeArea::new(4);
    area.add(cx, 32, 4, MigrateType::Movable, false);
    area.add(cx, 8, 3, MigrateType::Unmovable, false);
    area.add(cx, 4, 2, MigrateType::Movable, false);
    assert_eq!(area.orders_of(MigrateType::Movable), 0b1_0100);
    // Order 1: the order-2 block splits, not the order-4 one.
    assert_eq!(area.rmqueue_smallest(cx, 1, MigrateType::Movable), Some(4));
    assert_eq!(area.orders_of(MigrateType::Movable), 0b1_0010);
    assert_eq!(area.rmqueue_smallest(cx, 3, MigrateType::Movable), Some(32));
    assert_eq!(area.orders_of(MigrateType::Movable), 0b0_1010);
    assert_eq!(area.rmqueue_smallest(cx, 4, MigrateType::Movable), None);
    check_lists(&area, cx);
}
