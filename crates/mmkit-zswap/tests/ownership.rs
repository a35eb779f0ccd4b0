//! Swap entries are owned tokens of one instance (issue 37): an entry of
//! another instance, alive or dropped, is refused by every call and given
//! back where the call consumes it; and a keeping load racing a store that
//! replaces the entry returns the new bytes, never the swap file's slot.
//! (Forging an entry and freeing one twice do not compile: see the
//! `compile_fail` examples of the crate's entry type.)

use mmkit::{Backing, HugePages, MemoryMapBuilder};
use mmkit_zswap::{KeepEntry, SwapFile, Zswap, ZswapError, ZswapParams, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

fn zswap(slots: u64) -> Zswap {
    let mm = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
    Zswap::new(Arc::new(mm), SwapFile::create_temp(slots).unwrap(), ZswapParams::default()).unwrap()
}

/// A compressible page stamped with `version` in its first word.
fn page(version: u64) -> Vec<u8> {
    let mut p: Vec<u8> = (0..PAGE_SIZE).map(|i| b"zswap keeps pages "[i % 18]).collect();
    p[..8].copy_from_slice(&version.to_ne_bytes());
    p
}

#[test]
fn an_entry_of_another_instance_is_refused_by_every_call_and_given_back() {
    let a = zswap(16);
    let b = zswap(16);
    assert_ne!(a.swap_type(), b.swap_type());
    let ea = a.swap_out(&page(1)).unwrap();
    let eb = b.swap_out(&page(2)).unwrap();
    // Same slot number on both devices: only the swap type tells them apart.
    assert_eq!(ea.offset(), eb.offset());
    let before = b.stats();
    let mut buf = vec![0u8; PAGE_SIZE];
    assert!(matches!(b.zswap_store(&ea, &page(3)), Err(ZswapError::ForeignEntry(_))));
    assert!(matches!(b.zswap_load(&ea, &mut buf), Err(ZswapError::ForeignEntry(_))));
    assert!(matches!(b.zswap_load_keep(&ea, &mut buf), Err(ZswapError::ForeignEntry(_))));
    assert!(matches!(b.zswap_invalidate(&ea), Err(ZswapError::ForeignEntry(_))));
    assert!(matches!(b.zswap_writeback_entry(&ea), Err(ZswapError::ForeignEntry(_))));
    assert!(matches!(b.swap_writepage(&ea, &page(3)), Err(ZswapError::ForeignEntry(_))));
    assert!(matches!(b.swap_in(&ea, &mut buf, KeepEntry::Drop), Err(ZswapError::ForeignEntry(_))));
    assert!(!b.contains(&ea));
    let Err((ZswapError::ForeignEntry(_), ea)) = b.swap_free(ea) else { panic!("a foreign free must be refused") };
    let (freed, foreign) = b.swap_free_batch(vec![ea], mmkit_zswap::ReleaseMode::Sync);
    assert_eq!((freed, foreign.len()), (0, 1), "the batch gives the foreign entry back");
    let ea = foreign.into_iter().next().unwrap();
    assert_eq!(b.stats(), before, "nothing of b changed");
    b.swap_in(&eb, &mut buf, KeepEntry::Keep).unwrap();
    assert_eq!(buf, page(2), "b's own page is untouched");
    a.swap_in(&ea, &mut buf, KeepEntry::Keep).unwrap();
    assert_eq!(buf, page(1), "a's page is still a's");
    a.swap_free(ea).unwrap();
    b.swap_free(eb).unwrap();
    a.check_invariants().unwrap();
    b.check_invariants().unwrap();
}

#[test]
fn an_entry_of_a_dropped_instance_is_refused_by_later_ones() {
    let old = zswap(16);
    let stale = old.swap_out(&page(1)).unwrap();
    drop(old);
    for _ in 0..8 {
        let new = zswap(16);
        let own = new.swap_out(&page(2)).unwrap();
        assert_ne!(new.swap_type(), stale.swap_type(), "swap types are never reused");
        assert!(matches!(new.zswap_load(&stale, &mut vec![0; PAGE_SIZE]), Err(ZswapError::ForeignEntry(_))));
        let mut buf = vec![0u8; PAGE_SIZE];
        new.swap_in(&own, &mut buf, KeepEntry::Keep).unwrap();
        assert_eq!(buf, page(2));
        new.swap_free(own).unwrap();
    }
}

/// Before issue 37, `zswap_load_keep` read the object with the tree lock
/// dropped and answered "not in zswap" when a store had replaced (and
/// freed) it meanwhile; `swap_in` then read the swap file's slot, which
/// the store never wrote. Here the slot of the file holds a marker page
/// that no load may ever return.
#[test]
fn a_keeping_load_racing_a_replacing_store_never_reads_the_stale_file_slot() {
    let z = zswap(4);
    let e = z.alloc_swap_slot().unwrap();
    let marker = vec![0xeeu8; PAGE_SIZE - 1].into_iter().chain([0x11]).collect::<Vec<u8>>();
    z.swap_writepage(&e, &marker).unwrap();
    z.zswap_store(&e, &page(0)).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for v in 1..20_000u64 {
                z.zswap_store(&e, &page(v)).unwrap();
            }
            done.store(true, Relaxed);
        });
        let mut buf = vec![0u8; PAGE_SIZE];
        let mut loads = 0u64;
        while !done.load(Relaxed) || loads < 1000 {
            assert!(z.zswap_load_keep(&e, &mut buf).unwrap(), "the slot always has an entry");
            assert_ne!(buf, marker, "the swap file's stale slot was read");
            let v = u64::from_ne_bytes(buf[..8].try_into().unwrap());
            assert_eq!(buf, page(v), "a whole version, not a mix");
            loads += 1;
        }
    });
    z.swap_free(e).unwrap();
    z.check_invariants().unwrap();
}
