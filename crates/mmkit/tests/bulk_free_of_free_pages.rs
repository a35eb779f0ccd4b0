//! A bulk free of pages that are free (heads or pages inside a free buddy
//! block) is refused page by page and changes nothing, also when the PFN
//! came from another map: the case the `two_maps` fuzz target checks.

use mmkit::Cpus;
use mmkit::{Gfp, MemoryMapBuilder, Pfn, Report, ZoneType};

#[test]
fn bulk_free_of_never_allocated_pages_is_refused() {
    let mm =
        MemoryMapBuilder::with_memory(8 << 20).nr_cpus(2).cpu_id_fn(|| 0).hooks(mmkit::QuietHooks).build().unwrap();
    Cpus::new(&mm).drain_all_pages();
    let before = Report::new(&mm).nr_free_pages();
    for pfn in [0u64, 1, 31, 32, 512, 1024, 1056, 1500, 2000, 2047] {
        match mm.free_pages_bulk(&[Pfn(pfn)]) {
            Ok(done) => panic!("bulk free of free page {pfn} accepted ({done} done)"),
            Err(e) => assert_eq!(e.done, 0, "pfn {pfn}: {e:?}"),
        }
        assert_eq!(Report::new(&mm).nr_free_pages(), before, "pfn {pfn} changed the free count");
        Report::new(&mm).check_invariants().unwrap();
    }
}

#[test]
fn another_maps_block_is_refused_whole() {
    let a = MemoryMapBuilder::with_memory(8 << 20).nr_cpus(2).cpu_id_fn(|| 0).hooks(mmkit::QuietHooks).build().unwrap();
    let b = MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 1024..3072)
        .pageblock_order(6)
        .max_page_order(8)
        .nr_cpus(1)
        .cpu_id_fn(|| 0)
        .hooks(mmkit::QuietHooks)
        .build()
        .unwrap();
    Cpus::new(&a).drain_all_pages();
    let x = b.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 5).unwrap();
    let before = Report::new(&a).nr_free_pages();
    let refused = a.free_pages_bulk(&[x, Pfn(33599), Pfn(65535)]).unwrap_err();
    assert_eq!((refused.done, refused.failed), (0, 3), "{refused:?}");
    assert_eq!(Report::new(&a).nr_free_pages(), before);
    Report::new(&a).check_invariants().unwrap();
    b.free_pages(x, 5).unwrap();
    Report::new(&b).check_invariants().unwrap();
}
