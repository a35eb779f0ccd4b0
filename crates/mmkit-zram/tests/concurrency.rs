//! Four threads do 10⁶ mixed operations in total. On the shared pages they
//! overlap: every page carries a stamp naming its writer, its index and a
//! version, and every read checks that the page is one writer's whole page
//! for that index (nothing torn, nothing misplaced). Each thread also owns a
//! few private pages, written whole and in parts, whose exact contents it
//! knows: reading anything else there is a lost write. While they run, one
//! of them marks pages idle, writes idle pages back to a file and
//! recompresses huge ones, so post-processing races the data path.

use mmkit_testkit::XorShift64;
use mmkit_zram::{Algorithm, RecompressParams, WritebackMode, Zram, ZramConfig, PAGE_SIZE};

const SHARED: u64 = 64;
const PRIVATE: u64 = 8;
const THREADS: u64 = 4;
const OPS: u64 = 1_000_000;

/// A page stamped with `(thread, index, version)`: the stamp every fourth
/// word, the rest compressible or not depending on the version.
fn stamped(thread: u64, index: u64, version: u64) -> Vec<u8> {
    let stamp = thread << 56 | index << 40 | version;
    let mut page = vec![0u8; PAGE_SIZE];
    for (i, chunk) in page.chunks_exact_mut(8).enumerate() {
        let word = if i % 4 == 0 || version % 3 == 0 {
            stamp
        } else {
            stamp.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(i as u32)
        };
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    page
}

/// Whether `page` is a whole stamped page of `index` (or never written /
/// discarded).
fn whole(index: u64, page: &[u8]) -> bool {
    if page.iter().all(|&b| b == 0) {
        return true;
    }
    let stamp = u64::from_le_bytes(page[..8].try_into().unwrap());
    let (thread, at, version) = (stamp >> 56, (stamp >> 40) & 0xffff, stamp & ((1 << 40) - 1));
    at == index && page == stamped(thread, index, version)
}

#[test]
fn a_million_mixed_operations_lose_and_tear_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().to_path_buf();
    let backing = dir.join("backing");
    std::fs::write(&backing, vec![0u8; 256 * PAGE_SIZE]).unwrap();
    let pages = SHARED + THREADS * PRIVATE;
    let zram = Zram::with_own_memory(ZramConfig {
        disksize: pages * PAGE_SIZE as u64,
        algorithm: Algorithm::Lz4,
        recomp_algorithms: vec![Algorithm::Zstd { level: 1 }],
        backing_dev: Some(backing),
        ..ZramConfig::default()
    })
    .unwrap();
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let zram = &zram;
            s.spawn(move || {
                let mut rng = XorShift64::new(0xabc ^ thread);
                let mut page = vec![0u8; PAGE_SIZE];
                let first_private = SHARED + thread * PRIVATE;
                let mut mine = vec![vec![0u8; PAGE_SIZE]; PRIVATE as usize];
                for version in 1..=OPS / THREADS {
                    let shared = rng.next_u64() % SHARED;
                    let offset = shared * PAGE_SIZE as u64;
                    let private = rng.next_u64() % PRIVATE;
                    let private_offset = (first_private + private) * PAGE_SIZE as u64;
                    match rng.next_u64() % 16 {
                        0..=4 => zram.open().unwrap().write(offset, &stamped(thread, shared, version)).unwrap(),
                        5 => zram.open().unwrap().discard(offset, PAGE_SIZE as u64).unwrap(),
                        6 if version % 2 == 0 => zram.open().unwrap().slot_free_notify(shared as usize),
                        // A run of shared slots freed at once, as a swap
                        // cluster is, among the writes of the others.
                        6 => {
                            let count = (1 + version % 5).min(SHARED - shared);
                            zram.open().unwrap().slot_free_notify_range(shared as usize, count as usize)
                        }
                        7 => {
                            let data = stamped(thread, first_private + private, version);
                            zram.open().unwrap().write(private_offset, &data).unwrap();
                            mine[private as usize] = data;
                        }
                        8 => {
                            let (start, len) = ((rng.next_u64() % 4000) as usize, 1 + (rng.next_u64() % 96) as usize);
                            let bytes = vec![version as u8; len];
                            zram.open().unwrap().write(private_offset + start as u64, &bytes).unwrap();
                            mine[private as usize][start..start + len].copy_from_slice(&bytes);
                        }
                        9 => {
                            zram.open().unwrap().read(private_offset, &mut page).unwrap();
                            assert!(page == mine[private as usize], "thread {thread} lost a write to its page");
                        }
                        10 if thread == 0 && version % 512 == 0 => {
                            zram.idle_all().unwrap();
                            // The file may fill up; what was written stays.
                            let _ = zram.writeback(WritebackMode::Idle);
                            let _ = zram.recompress(&RecompressParams::default());
                        }
                        _ => {
                            zram.open().unwrap().read(offset, &mut page).unwrap();
                            assert!(whole(shared, &page), "page {shared} is torn or misplaced");
                        }
                    }
                }
                for (i, expected) in mine.iter().enumerate() {
                    zram.open().unwrap().read((first_private + i as u64) * PAGE_SIZE as u64, &mut page).unwrap();
                    assert!(&page == expected, "thread {thread} lost its private page {i}");
                }
            });
        }
    });
    zram.pool().unwrap().zs_free_deferred_flush();
    let mut page = vec![0u8; PAGE_SIZE];
    for index in 0..SHARED {
        zram.open().unwrap().read(index * PAGE_SIZE as u64, &mut page).unwrap();
        assert!(whole(index, &page));
    }
    let bd: Vec<u64> = zram.bd_stat().split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert!(bd[2] > 0, "writeback ran: {bd:?}");
    zram.pool().unwrap().check_invariants().unwrap();
    zram.reset().unwrap();
    assert!(zram.pool().is_none(), "reset drops the pool with its pages");
    assert_eq!(zram.bd_stat().split_whitespace().next(), Some("0"), "reset returns every block");
}
