//! The radix page table against a `HashMap` model: random map / unmap /
//! translate sequences, then a full teardown that must give every table
//! page back (none leaked, none cached twice), with and without quicklists.

use mmkit::Cpus;
use mmkit::{Backing, HugePages, MemoryMapBuilder, Pfn, Report};
use mmkit_quicklist::pagetable::{Level, MapError, PageTables, TableSource, USER_VA_END};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Op {
    Map { va: u64, pfn: u64 },
    Unmap { va: u64 },
    Translate { va: u64 },
}

/// Addresses clustered in a few regions (so tables are shared and emptied)
/// plus some anywhere in the user half.
fn address() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (0..4u64, 0..64u64).prop_map(|(region, page)| region * (1 << 30) + (1 << 39) * region + page * 4096),
        1 => (0..USER_VA_END / 4096).prop_map(|page| page * 4096),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (address(), 0..1u64 << 40).prop_map(|(va, pfn)| Op::Map { va, pfn }),
        3 => address().prop_map(|va| Op::Unmap { va }),
        2 => (address(), 0..4096u64).prop_map(|(va, off)| Op::Translate { va: va + off }),
    ]
}

fn run(ops: Vec<Op>, quicklists: bool) -> Result<(), TestCaseError> {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(32 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(1)
            .cpu_id_fn(|| 0)
            .build()
            .unwrap(),
    );
    Cpus::new(&mm).drain_all_pages();
    let start = Report::new(&mm).nr_free_pages();
    {
        let tables =
            PageTables::new(Arc::clone(&mm), if quicklists { TableSource::Quicklists } else { TableSource::Allocator })
                .unwrap();
        let mut space = tables.new_address_space().unwrap();
        let mut model: HashMap<u64, u64> = HashMap::new();
        for op in ops {
            match op {
                Op::Map { va, pfn } => {
                    let got = space.map(va, Pfn(pfn));
                    match model.get(&va) {
                        Some(&old) => prop_assert_eq!(got, Err(MapError::AlreadyMapped { va, pfn: Pfn(old) })),
                        None => {
                            prop_assert_eq!(got, Ok(()));
                            model.insert(va, pfn);
                        }
                    }
                }
                Op::Unmap { va } => {
                    let got = space.unmap(va);
                    match model.remove(&va) {
                        Some(pfn) => prop_assert_eq!(got, Ok(Pfn(pfn))),
                        None => prop_assert_eq!(got, Err(MapError::NotMapped(va))),
                    }
                }
                Op::Translate { va } => {
                    prop_assert_eq!(space.translate(va), model.get(&(va & !4095)).map(|&p| Pfn(p)));
                }
            }
            prop_assert_eq!(space.nr_mapped(), model.len() as u64);
        }
        // The table count is exactly what the live mappings need.
        let mut needed: [std::collections::HashSet<u64>; 3] = Default::default();
        for &va in model.keys() {
            needed[0].insert(va >> 39);
            needed[1].insert(va >> 30);
            needed[2].insert(va >> 21);
        }
        prop_assert_eq!(space.nr_tables(), 1 + needed.iter().map(|s| s.len() as u64).sum::<u64>());
        let mut vas: Vec<u64> = model.keys().copied().collect();
        vas.sort_unstable();
        for va in vas {
            prop_assert_eq!(space.unmap(va), Ok(Pfn(model[&va])));
        }
        prop_assert_eq!(space.nr_tables(), 1, "every emptied table went back");
        drop(space);
        for level in Level::ALL {
            let s = tables.level_stats(level);
            prop_assert_eq!(s.count, s.freed, "{} tables leaked", level.name());
        }
    }
    Cpus::new(&mm).drain_all_pages();
    prop_assert_eq!(Report::new(&mm).nr_free_pages(), start, "table pages leaked");
    Report::new(&mm).check_invariants().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn page_table_matches_a_hashmap_with_quicklists(ops in prop::collection::vec(op(), 1..200)) {
        run(ops, true)?;
    }

    #[test]
    fn page_table_matches_a_hashmap_without_quicklists(ops in prop::collection::vec(op(), 1..100)) {
        run(ops, false)?;
    }
}

#[test]
fn bad_addresses_are_refused() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    let tables = PageTables::new(Arc::clone(&mm), TableSource::Quicklists).unwrap();
    let mut space = tables.new_address_space().unwrap();
    assert_eq!(space.map(4097, Pfn(1)), Err(MapError::NotPageAligned(4097)));
    assert_eq!(space.map(USER_VA_END, Pfn(1)), Err(MapError::NotUserAddress(USER_VA_END)));
    assert_eq!(space.map(0, Pfn(1 << 40)), Err(MapError::PfnTooLarge(Pfn(1 << 40))));
    assert_eq!(space.unmap(8192), Err(MapError::NotMapped(8192)));
    assert_eq!(space.translate(u64::MAX), None);
    assert_eq!(space.translate(USER_VA_END + 4096), None, "the kernel half maps nothing here");
    assert_eq!(space.nr_tables(), 1);
}

#[test]
fn a_recycled_pgd_needs_no_constructor() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(16 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(1)
            .cpu_id_fn(|| 0)
            .build()
            .unwrap(),
    );
    let tables = PageTables::new(Arc::clone(&mm), TableSource::Quicklists).unwrap();
    for round in 0..5u64 {
        let mut space = tables.new_address_space().unwrap();
        space.map(round * 4096, Pfn(7)).unwrap();
    }
    let pgd_list = tables.quicklists().stats(Level::Pgd.index());
    assert_eq!((pgd_list.misses, pgd_list.hits), (1, 4), "one pgd constructed, reused four times");
    assert_eq!(tables.level_stats(Level::Pte).count, 5);
    assert_eq!(tables.quicklists().stats(Level::Pte.index()).hits, 4);
}

#[test]
fn table_pages_cannot_be_freed_behind_the_tables_back() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    let tables = PageTables::new(Arc::clone(&mm), TableSource::Allocator).unwrap();
    let mut space = tables.new_address_space().unwrap();
    space.map(0, Pfn(3)).unwrap();
    // Every allocated page that is not the caller's is a table page.
    let mut refused = 0;
    for pfn in mm.start_pfn().0..mm.end_pfn().0 {
        if let Err(mmkit::FreeError::Owned { .. }) = mm.free_pages(Pfn(pfn), 0) {
            refused += 1;
        }
    }
    assert_eq!(refused, 4 + mmkit_quicklist::pagetable::KERNEL_TABLES, "pgd, pud, pmd, pte and the kernel tables");
    assert_eq!(space.translate(0), Some(Pfn(3)));
}
