//! `PageSource`: one random sequence of operations run through the trait on
//! the shared API, a CPU handle and a pinned CPU, each against the
//! live-block model (no page handed out twice; every page accounted for
//! and the invariants after every step, or for the pinned CPU, whose lists
//! the checker cannot walk, once its handle is dropped), plus the calls a pinned CPU gained for
//! it: `put_page` and `free_pages_bulk` of its own `LOCAL` pages and the
//! refusal of another pinned CPU's.

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{FreeError, Gfp, PageAllocator, PageSource, Pfn, Report};
use proptest::prelude::*;

mod live_blocks;
use live_blocks::{two_zone_map, LiveBlocks};

#[derive(Clone, Debug)]
enum Op {
    Alloc { order: u32 },
    Free { pick: usize },
    Put { pick: usize },
    Bulk { n: usize },
    FreeBulk { n: usize },
    Block { order: u32, byte: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![Just(0u32), Just(0), Just(1), Just(3)].prop_map(|order| Op::Alloc { order }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Put { pick }),
        1 => (1..40usize).prop_map(|n| Op::Bulk { n }),
        1 => (1..40usize).prop_map(|n| Op::FreeBulk { n }),
        1 => (0..3u32, any::<u8>()).prop_map(|(order, byte)| Op::Block { order, byte }),
    ]
}

/// `pinned`: the checker cannot walk a pinned CPU's lists, so only the
/// model's own checks run until the handle is dropped (then `settle`).
fn run(source: &mut impl PageSource, ops: &[Op], pinned: bool) {
    let mut model = LiveBlocks::default();
    let owner = Blocks::new(source.allocator()).new_owner_key().unwrap();
    for op in ops {
        match *op {
            Op::Alloc { order } => {
                if let Ok(pfn) = source.alloc_pages(Gfp::KERNEL, order) {
                    model.insert(source.allocator(), pfn, order);
                }
            }
            Op::Free { pick } => {
                if let Some((pfn, order)) = model.take(pick) {
                    source.free_pages(pfn, order).unwrap();
                    assert!(source.free_pages(pfn, order).is_err(), "a second free of {pfn} is refused");
                }
            }
            Op::Put { pick } => {
                if let Some((pfn, order)) = model.take(pick) {
                    // put_page frees order-0 pages and compound pages only;
                    // a plain higher-order block is freed by order.
                    if order == 0 {
                        source.put_page(pfn).unwrap();
                    } else {
                        source.free_pages(pfn, order).unwrap();
                    }
                }
            }
            Op::Bulk { n } => {
                let mut slots = vec![None; n];
                let filled = source.alloc_pages_bulk(Gfp::KERNEL, &mut slots);
                assert!(slots[..filled].iter().all(Option::is_some));
                for pfn in slots.into_iter().flatten() {
                    model.insert(source.allocator(), pfn, 0);
                }
            }
            Op::FreeBulk { n } => {
                let picked: Vec<(Pfn, u32)> = (0..n).filter_map(|i| model.take(i)).collect();
                let pfns: Vec<Pfn> = picked.iter().map(|&(pfn, _)| pfn).collect();
                assert_eq!(source.free_pages_bulk(&pfns), Ok(pfns.len()));
            }
            Op::Block { order, byte } => {
                if let Ok(mut block) = source.alloc_block(&owner, Gfp::KERNEL, order) {
                    if let Some(bytes) = Blocks::new(source.allocator()).block_bytes_mut(&mut block) {
                        bytes.fill(byte);
                    }
                    if let Some(bytes) = Blocks::new(source.allocator()).block_bytes(&block) {
                        assert!(bytes.iter().all(|&b| b == byte));
                    }
                    source.free_block(block).unwrap();
                }
            }
        }
        if !pinned {
            model.check(source.allocator());
        }
    }
    for (pfn, order) in std::mem::take(&mut model.live) {
        source.free_pages(Pfn(pfn), order).unwrap();
    }
}

fn settle(mm: &PageAllocator) {
    assert_eq!(Cpus::new(mm).drain_all_pages(), 0);
    Report::new(mm).check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(mm).nr_free_pages(), managed, "every page came back");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn every_source_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        let mm = two_zone_map().nr_cpus(2).build().unwrap();
        run(&mut &mm, &ops, false);
        settle(&mm);
        run(&mut Cpus::new(&mm).cpu(1).unwrap(), &ops, false);
        settle(&mm);
        {
            let mut pinned = Cpus::new(&mm).pin_cpu(0).unwrap();
            run(&mut pinned, &ops, true);
        }
        settle(&mm);
    }
}

#[test]
fn a_pinned_cpu_puts_and_bulk_frees_its_own_pages_and_refuses_anothers() {
    let mm = two_zone_map().nr_cpus(2).build().unwrap();
    let mut cpu0 = Cpus::new(&mm).pin_cpu(0).unwrap();
    let mut cpu1 = Cpus::new(&mm).pin_cpu(1).unwrap();
    let mine: Vec<Pfn> = (0..8).map(|_| cpu0.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    let theirs = cpu1.alloc_pages(Gfp::KERNEL, 0).unwrap();
    // Another pinned CPU's LOCAL page is refused and stays theirs.
    assert!(matches!(cpu0.put_page(theirs), Err(FreeError::CpuLocal { cpu: 1, .. })));
    let refused = cpu0.free_pages_bulk(&[mine[0], theirs]).unwrap_err();
    assert_eq!((refused.done, refused.failed), (1, 1));
    cpu0.put_page(mine[1]).unwrap();
    assert_eq!(cpu0.free_pages_bulk(&mine[2..]), Ok(6));
    cpu1.free_pages(theirs, 0).unwrap();
    drop((cpu0, cpu1));
    settle(&mm);
}
