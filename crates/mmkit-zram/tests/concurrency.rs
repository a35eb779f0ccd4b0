//! Four threads do mixed operations on overlapping pages; every page
//! carries a version stamp that names its writer, and every read checks
//! that the page is one writer's whole page: nothing lost, nothing torn.

use mmkit::{Backing, HugePages, MemoryMapBuilder};
use mmkit_testkit::XorShift64;
use mmkit_zram::{Algorithm, Zram, ZramConfig, PAGE_SIZE};
use std::sync::Arc;

const PAGES: u64 = 64;
const THREADS: u64 = 4;

/// A page stamped with `(thread, version)`: the stamp repeated, mixed with
/// compressible and incompressible stretches that depend on the stamp.
fn stamped(thread: u64, version: u64) -> Vec<u8> {
    let stamp = (thread << 56 | version).to_le_bytes();
    let mut page = vec![0u8; PAGE_SIZE];
    for (i, chunk) in page.chunks_exact_mut(8).enumerate() {
        if i % 4 == 0 || version % 3 == 0 {
            chunk.copy_from_slice(&stamp);
        } else {
            let x = (thread << 56 | version).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(i as u32);
            chunk.copy_from_slice(&x.to_le_bytes());
        }
    }
    page
}

/// Whether `page` is a whole stamped page (or never written / discarded).
fn whole(page: &[u8]) -> bool {
    if page.iter().all(|&b| b == 0) {
        return true;
    }
    let stamp = u64::from_le_bytes(page[..8].try_into().unwrap());
    page == stamped(stamp >> 56, stamp & ((1 << 56) - 1))
}

#[test]
fn no_page_is_lost_or_torn() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    let zram = Zram::new(
        mm,
        ZramConfig {
            disksize: PAGES * PAGE_SIZE as u64,
            algorithm: Algorithm::Lz4,
            mem_limit: 0,
            ..ZramConfig::default()
        },
    )
    .unwrap();
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let zram = &zram;
            s.spawn(move || {
                let mut rng = XorShift64::new(0xabc ^ thread);
                let mut page = vec![0u8; PAGE_SIZE];
                for version in 1..=20_000u64 {
                    let index = rng.next_u64() % PAGES;
                    let offset = index * PAGE_SIZE as u64;
                    match rng.next_u64() % 10 {
                        0..=3 => zram.write(offset, &stamped(thread, version)).unwrap(),
                        4 => zram.discard(offset, PAGE_SIZE as u64).unwrap(),
                        5 => zram.slot_free_notify(index as usize),
                        _ => {
                            zram.read(offset, &mut page).unwrap();
                            assert!(whole(&page), "page {index} is torn");
                        }
                    }
                }
            });
        }
    });
    zram.pool().zs_free_deferred_flush();
    let mut page = vec![0u8; PAGE_SIZE];
    for index in 0..PAGES {
        zram.read(index * PAGE_SIZE as u64, &mut page).unwrap();
        assert!(whole(&page));
    }
    zram.pool().check_invariants().unwrap();
    zram.reset();
    assert_eq!(zram.pool().zs_get_total_pages(), 0);
}
