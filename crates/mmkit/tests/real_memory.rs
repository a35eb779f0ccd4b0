//! Proves, with real memory behind the PFNs, that no byte of an allocated
//! block is ever shared with another live block: every page of every block
//! carries a pattern unique to (pfn, word, seed), written after allocation
//! and verified just before the block is freed, over several rounds of
//! random orders, random GFP flags and random free order, single-threaded
//! and with two threads at once (per-CPU lists on, as by default). At the
//! end all pages are free again and the invariants hold.

use mmkit::Cpus;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn, Report};
use mmkit_testkit::XorShift64;
use std::sync::Arc;

const GFPS: [Gfp; 6] = [
    Gfp::KERNEL,
    Gfp::HIGHUSER_MOVABLE,
    Gfp::KERNEL.union(Gfp::RECLAIMABLE),
    Gfp::ATOMIC,
    Gfp::KERNEL.union(Gfp::COMP),
    Gfp::KERNEL.union(Gfp::DMA32),
];

fn real_map(bytes: u64) -> PageAllocator {
    MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).build().unwrap()
}

#[derive(Clone, Copy)]
struct Block {
    pfn: Pfn,
    order: u32,
    seed: u64,
}

fn word(pfn: u64, j: usize, seed: u64) -> u64 {
    (pfn << 20) ^ (j as u64).rotate_left(40) ^ seed
}

/// The first word of page `pfn` and the page's length in words.
fn page_words(mm: &PageAllocator, pfn: u64) -> (*mut u64, usize) {
    let words = mm.geometry().page_size() as usize / 8;
    let ptr = mm.page_address(Pfn(pfn)).expect("real memory").as_ptr();
    assert_eq!(ptr as usize % 8, 0);
    (ptr.cast::<u64>(), words)
}

fn write(mm: &PageAllocator, b: Block) {
    for pfn in b.pfn.0..b.pfn.0 + (1 << b.order) {
        let (ptr, len) = page_words(mm, pfn);
        // SAFETY: the page is inside the mapping, page-aligned, allocated
        // to this caller and touched by no one else until it is freed.
        let page = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        for (j, w) in page.iter_mut().enumerate() {
            *w = word(pfn, j, b.seed);
        }
    }
}

fn verify(mm: &PageAllocator, b: Block) {
    for pfn in b.pfn.0..b.pfn.0 + (1 << b.order) {
        let (ptr, len) = page_words(mm, pfn);
        // SAFETY: as in `write`; the block is still allocated.
        let page = unsafe { std::slice::from_raw_parts(ptr, len) };
        for (j, &w) in page.iter().enumerate() {
            let want = word(pfn, j, b.seed);
            assert_eq!(w, want, "pfn {pfn:#x} word {j} of order-{} block {} overwritten", b.order, b.pfn);
        }
    }
}

/// Allocates random blocks until `target` pages are in use (or memory
/// runs short); writes each block's pattern.
fn fill(mm: &PageAllocator, rng: &mut XorShift64, live: &mut Vec<Block>, used: &mut u64, target: u64) {
    let mut failures = 0;
    while *used < target && failures < 64 {
        let r = rng.next_u64();
        let order = if r & 3 == 0 { (r >> 8) as u32 % 11 } else { (r >> 8).trailing_zeros().min(10) };
        let gfp = GFPS[rng.index(GFPS.len())];
        match mm.alloc_pages(gfp | Gfp::NOWARN, order) {
            Ok(pfn) => {
                assert_eq!(pfn.0 % (1 << order), 0);
                let b = Block { pfn, order, seed: rng.next_u64() };
                write(mm, b);
                live.push(b);
                *used += 1 << order;
            }
            Err(_) => failures += 1,
        }
    }
}

fn free_random(mm: &PageAllocator, rng: &mut XorShift64, live: &mut Vec<Block>, used: &mut u64, keep: usize) {
    while live.len() > keep {
        let b = live.swap_remove(rng.index(live.len()));
        verify(mm, b);
        mm.free_pages(b.pfn, b.order).unwrap();
        *used -= 1 << b.order;
    }
}

#[test]
fn patterns_survive_random_allocation_rounds() {
    let mm = real_map(64 << 20);
    let initial = Report::new(&mm).nr_free_pages();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(initial, managed);
    let mut rng = XorShift64::new(0x9e37_79b9_7f4a_7c15);
    let mut live = Vec::new();
    let mut used = 0;
    let report = Report::new(&mm);
    for round in 0..4 {
        fill(&mm, &mut rng, &mut live, &mut used, managed / 2);
        assert!(used >= managed / 2, "round {round}: only {used} pages");
        let pcp: u64 = report.zone_snapshots().iter().map(|z| z.pcp_pages).sum();
        assert_eq!(Report::new(&mm).nr_free_pages() + pcp, initial - used);
        // Free a random half, refill, then verify and free everything.
        let half = live.len() / 2;
        free_random(&mm, &mut rng, &mut live, &mut used, half);
        fill(&mm, &mut rng, &mut live, &mut used, managed / 2);
        report.check_invariants().unwrap();
        free_random(&mm, &mut rng, &mut live, &mut used, 0);
        assert_eq!(used, 0);
        Cpus::new(&mm).drain_all_pages();
        assert_eq!(Report::new(&mm).nr_free_pages(), initial, "round {round}");
        report.check_invariants().unwrap();
    }
    // All free again: DMA and DMA32 are back to their boot-time blocks.
    assert_eq!(
        report.buddyinfo(),
        concat!(
            "Node 0, zone      DMA      1      1      1      1      1      1      1      1      1      1      3 \n",
            "Node 0, zone    DMA32      0      0      0      0      0      0      0      0      0      0     12 \n",
        )
    );
}

#[test]
fn patterns_survive_two_threads() {
    let mm = Arc::new(real_map(64 << 20));
    let initial = Report::new(&mm).nr_free_pages();
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let mm = Arc::clone(&mm);
            std::thread::spawn(move || {
                let mut rng = XorShift64::new(0x1234_5678 + t * 0x9999);
                let mut live = Vec::new();
                let mut used = 0;
                for _ in 0..40 {
                    fill(&mm, &mut rng, &mut live, &mut used, 2048);
                    let keep = live.len() / 3;
                    free_random(&mm, &mut rng, &mut live, &mut used, keep);
                }
                free_random(&mm, &mut rng, &mut live, &mut used, 0);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Report::new(&mm).check_invariants().unwrap();
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), initial);
    Report::new(&mm).check_invariants().unwrap();
}
