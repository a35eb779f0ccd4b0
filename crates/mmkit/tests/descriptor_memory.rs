//! The descriptor table in memory the embedder lends
//! (`MemoryMapBuilder::descriptor_memory`): a 1 GiB map builds in it,
//! whatever the memory held and however it is aligned; memory that is too
//! small is refused with the size needed; the sizes agree with `build`.

use core::mem::MaybeUninit;
use mmkit::Cpus;
use mmkit::{BuildError, Gfp, MemoryMapBuilder, Pfn, Report};

/// `bytes` of leaked memory filled with `fill`, starting `offset` bytes
/// into the allocation (to test alignment).
fn lent(bytes: usize, fill: u8, offset: usize) -> &'static mut [MaybeUninit<u8>] {
    let memory = Vec::leak(vec![MaybeUninit::new(fill); bytes + offset]);
    &mut memory[offset..]
}

#[test]
fn a_1_gib_map_builds_in_lent_memory_that_held_garbage() {
    let builder = MemoryMapBuilder::with_memory(1 << 30).nr_cpus(2);
    let bytes = builder.descriptor_table_bytes().unwrap();
    assert!(bytes >= (1 << 30) / 4096 * 16, "16 bytes a page: {bytes}");
    for offset in [0, 1, 7] {
        let builder = MemoryMapBuilder::with_memory(1 << 30).nr_cpus(2);
        let mm = builder.descriptor_memory(lent(bytes, 0xa5, offset)).build().unwrap();
        Report::new(&mm).check_invariants().unwrap();
        // Every page can be taken and given back: garbage left in any
        // descriptor would show here.
        let mut held: Vec<Pfn> = Vec::new();
        while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::DMA32, 9) {
            held.push(pfn);
        }
        assert!(held.len() > 400, "{} order-9 blocks", held.len());
        for pfn in held {
            mm.free_pages(pfn, 9).unwrap();
        }
        Cpus::new(&mm).drain_all_pages();
        Report::new(&mm).check_invariants().unwrap();
    }
}

#[test]
fn too_little_memory_is_refused_with_the_size_needed() {
    let needed = MemoryMapBuilder::with_memory(64 << 20).descriptor_table_bytes().unwrap();
    let built = MemoryMapBuilder::with_memory(64 << 20).descriptor_memory(lent(needed - 16, 0, 0)).build();
    assert_eq!(built.err(), Some(BuildError::DescriptorMemoryTooSmall { needed, given: needed - 16 }));
    let built = MemoryMapBuilder::with_memory(64 << 20).descriptor_memory(lent(0, 0, 0)).build();
    assert!(matches!(built, Err(BuildError::DescriptorMemoryTooSmall { given: 0, .. })));
}

#[test]
fn the_size_asked_for_is_enough_at_every_alignment() {
    for memory in [16 << 20, 100 << 20, 5 << 30] {
        let needed = MemoryMapBuilder::with_memory(memory).descriptor_table_bytes().unwrap();
        for offset in [0, 1, 3, 8, 15] {
            let built = MemoryMapBuilder::with_memory(memory).descriptor_memory(lent(needed, 0xff, offset)).build();
            assert!(built.is_ok(), "{memory} bytes at offset {offset}: {:?}", built.err());
        }
    }
}

#[test]
fn sizes_need_zones_and_a_valid_geometry() {
    assert_eq!(MemoryMapBuilder::new().descriptor_table_bytes(), Err(BuildError::NoZones));
    let bad = MemoryMapBuilder::with_memory(16 << 20).section_order(0);
    assert!(matches!(bad.descriptor_table_bytes(), Err(BuildError::BadGeometry(_))));
}
