//! Quicklists against a model: random alloc / free / trim / drain sequences
//! over several lists and CPUs, checked after every step (pages conserved,
//! no page held twice, ctor and dtor counts exact, every page handed out in
//! its list's state), and a multi-threaded stress over real memory.

use mmkit::Cpus;
use mmkit::{Backing, FreeError, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn, Report};
use mmkit_quicklist::{PageFn, QuicklistError, Quicklists, FRACTION_OF_NODE_MEM};
use mmkit_testkit::XorShift64;
use proptest::prelude::*;
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Arc;

const LISTS: usize = 3;
/// List 2 has a constructor that writes this at byte 8 and byte 4095.
const CTOR_MARK: u8 = 0xc3;

#[derive(Clone, Debug)]
enum Op {
    Alloc { list: usize, cpu: usize },
    Free { nth: usize, cpu: usize },
    FreeTwice { nth: usize },
    FreeThroughAllocator { nth: usize },
    Trim { list: usize, cpu: usize, min_pages: u64, max_free: u64 },
    Drain { list: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..LISTS, 0..2usize).prop_map(|(list, cpu)| Op::Alloc { list, cpu }),
        4 => (any::<usize>(), 0..2usize).prop_map(|(nth, cpu)| Op::Free { nth, cpu }),
        1 => any::<usize>().prop_map(|nth| Op::FreeTwice { nth }),
        1 => any::<usize>().prop_map(|nth| Op::FreeThroughAllocator { nth }),
        1 => (0..LISTS, 0..2usize, 0..40u64, 0..20u64)
            .prop_map(|(list, cpu, min_pages, max_free)| Op::Trim { list, cpu, min_pages, max_free }),
        1 => (0..LISTS).prop_map(|list| Op::Drain { list }),
    ]
}

fn byte(mm: &PageAllocator, pfn: Pfn, offset: usize) -> u8 {
    // SAFETY: the test holds the page (allocated to it and not freed).
    unsafe { mm.page_address(pfn).unwrap().as_ptr().add(offset).read() }
}

fn in_list_state(mm: &PageAllocator, pfn: Pfn, list: usize) -> bool {
    (0..4096).all(|i| {
        let want = if list == 2 && (i == 8 || i == 4095) { CTOR_MARK } else { 0 };
        byte(mm, pfn, i) == want
    })
}

thread_local! {
    static CPU: Cell<usize> = const { Cell::new(0) };
}

fn current() -> usize {
    CPU.with(|c| c.get())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn quicklists_match_the_model(ops in prop::collection::vec(op(), 1..120)) {
        let mm = Arc::new(MemoryMapBuilder::with_memory(8 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(2)
            .cpu_id_fn(current)
            .build()
            .unwrap());
        Cpus::new(&mm).drain_all_pages();
        let start = Report::new(&mm).nr_free_pages();
        let ctor_calls = Cell::new(0u64);
        let dtor_calls = Cell::new(0u64);
        let ctor = |page: &mut [u8]| {
            ctor_calls.set(ctor_calls.get() + 1);
            page[8] = CTOR_MARK;
            page[4095] = CTOR_MARK;
        };
        let dtor = |_: &mut [u8]| dtor_calls.set(dtor_calls.get() + 1);
        let ql = Quicklists::new(Arc::clone(&mm), LISTS).unwrap();
        let mut held: Vec<(Pfn, usize)> = Vec::new();
        // Model: pages cached per (cpu, list), as a stack.
        let mut cached = vec![vec![Vec::<Pfn>::new(); LISTS]; 2];
        let mut misses_with_ctor = 0u64;
        let mut destroyed = 0u64;
        for op in ops {
            match op {
                Op::Alloc { list, cpu } => {
                    CPU.with(|c| c.set(cpu));
                    let ctor_arg: Option<PageFn<'_>> = if list == 2 { Some(&ctor) } else { None };
                    let pfn = ql.quicklist_alloc(list, Gfp::KERNEL, ctor_arg).unwrap();
                    match cached[cpu][list].pop() {
                        Some(expected) => prop_assert_eq!(pfn, expected, "a hit pops the last page cached"),
                        None => misses_with_ctor += u64::from(list == 2),
                    }
                    prop_assert!(in_list_state(&mm, pfn, list), "page {} handed out in the wrong state", pfn);
                    prop_assert!(held.iter().all(|&(p, _)| p != pfn), "page {} held twice", pfn);
                    held.push((pfn, list));
                }
                Op::Free { nth, cpu } if !held.is_empty() => {
                    CPU.with(|c| c.set(cpu));
                    let (pfn, list) = held.swap_remove(nth % held.len());
                    ql.quicklist_free_page(list, Some(&dtor), pfn).unwrap();
                    cached[cpu][list].push(pfn);
                }
                Op::FreeTwice { nth } if !held.is_empty() => {
                    let (pfn, list) = held[nth % held.len()];
                    let cpu = current();
                    ql.quicklist_free_page(list, Some(&dtor), pfn).unwrap();
                    cached[cpu][list].push(pfn);
                    held.retain(|&(p, _)| p != pfn);
                    let size = ql.quicklist_total_size();
                    prop_assert_eq!(
                        ql.quicklist_free_page(list, Some(&dtor), pfn),
                        Err(QuicklistError::Free(FreeError::DoubleFree(pfn)))
                    );
                    prop_assert_eq!(ql.quicklist_total_size(), size);
                }
                Op::FreeThroughAllocator { nth } if !held.is_empty() => {
                    let (pfn, _) = held[nth % held.len()];
                    prop_assert_eq!(mm.free_pages(pfn, 0), Err(FreeError::Owned { pfn, owner: ql.owner().unwrap() }));
                }
                Op::Trim { list, cpu, min_pages, max_free } => {
                    CPU.with(|c| c.set(cpu));
                    let have = cached[cpu][list].len() as u64;
                    let keep = min_pages.max(Report::new(&mm).node_free_pages(0).unwrap() / FRACTION_OF_NODE_MEM);
                    let expect = if have <= min_pages { 0 } else { have.saturating_sub(keep).min(max_free) };
                    let freed = ql.quicklist_trim(list, Some(&dtor), min_pages, max_free).unwrap();
                    prop_assert_eq!(freed, expect);
                    for _ in 0..freed {
                        cached[cpu][list].pop();
                    }
                    destroyed += freed;
                }
                Op::Drain { list } => {
                    let freed = ql.quicklist_drain(list, Some(&dtor)).unwrap();
                    prop_assert_eq!(freed, (cached[0][list].len() + cached[1][list].len()) as u64);
                    cached[0][list].clear();
                    cached[1][list].clear();
                    destroyed += freed;
                }
                _ => {}
            }
            let model_cached: usize = cached.iter().flatten().map(Vec::len).sum();
            prop_assert_eq!(ql.quicklist_total_size(), model_cached as u64);
            for (cpu, lists) in cached.iter().enumerate() {
                for (list, pages) in lists.iter().enumerate() {
                    prop_assert_eq!(ql.quicklist_size(cpu, list), Some(pages.len()));
                }
            }
            Cpus::new(&mm).drain_all_pages();
            prop_assert_eq!(Report::new(&mm).nr_free_pages() + model_cached as u64 + held.len() as u64, start);
            prop_assert_eq!(ctor_calls.get(), misses_with_ctor);
            prop_assert_eq!(dtor_calls.get(), destroyed);
            let all: HashSet<Pfn> = held.iter().map(|&(p, _)| p).chain(cached.iter().flatten().flatten().copied()).collect();
            prop_assert_eq!(all.len(), held.len() + model_cached, "a page is both held and cached");
        }
        for (pfn, list) in held.drain(..) {
            ql.quicklist_free_page(list, None, pfn).unwrap();
        }
        drop(ql);
        Cpus::new(&mm).drain_all_pages();
        prop_assert_eq!(Report::new(&mm).nr_free_pages(), start);
        Report::new(&mm).check_invariants().unwrap();
    }
}

/// Threads on real CPUs allocate from the quicklists, check the page is
/// zero, fill it with their own pattern, check the pattern, zero it again
/// and free it. A page given to two threads at once would show the other's
/// pattern (or a non-zero byte on allocation).
#[test]
fn threads_never_share_a_quicklist_page() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(64 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(2)
            .build()
            .unwrap(),
    );
    Cpus::new(&mm).drain_all_pages();
    let start = Report::new(&mm).nr_free_pages();
    let ql = Quicklists::new(Arc::clone(&mm), 2).unwrap();
    std::thread::scope(|s| {
        for thread in 0..4u64 {
            let (mm, ql) = (&mm, &ql);
            s.spawn(move || {
                let mut random = XorShift64::new(thread.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
                let mut mine: Vec<(Pfn, usize)> = Vec::new();
                for round in 0..4000u64 {
                    let rng = random.next_u64();
                    if mine.len() < 32 && (rng % 3 != 0 || mine.is_empty()) {
                        let list = (rng >> 8) as usize % 2;
                        let pfn = ql.quicklist_alloc(list, Gfp::KERNEL, None).unwrap();
                        let words = page_words(mm, pfn);
                        assert!(words.iter().all(|w| w.load() == 0), "page {pfn} not zero on allocation");
                        let tag = (thread << 56) | round;
                        words.iter().for_each(|w| w.store(tag));
                        mine.push((pfn, list));
                    } else {
                        let (pfn, list) = mine.swap_remove((rng >> 16) as usize % mine.len());
                        let words = page_words(mm, pfn);
                        let tag = words[0].load();
                        assert_eq!(tag >> 56, thread, "page {pfn} was written by another thread");
                        assert!(words.iter().all(|w| w.load() == tag), "page {pfn} changed under its owner");
                        words.iter().for_each(|w| w.store(0));
                        ql.quicklist_free_page(list, None, pfn).unwrap();
                    }
                    if round % 500 == 0 {
                        ql.quicklist_trim(list_of(round), None, 4, 16).unwrap();
                    }
                }
                for (pfn, list) in mine {
                    page_words(mm, pfn).iter().for_each(|w| w.store(0));
                    ql.quicklist_free_page(list, None, pfn).unwrap();
                }
            });
        }
    });
    drop(ql);
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), start);
    Report::new(&mm).check_invariants().unwrap();
}

fn list_of(round: u64) -> usize {
    (round / 500) as usize % 2
}

/// Eight words spread over a page, read and written volatile.
struct Word(*mut u64);

impl Word {
    fn load(&self) -> u64 {
        // SAFETY: the word lies in a page the calling thread holds.
        unsafe { self.0.read_volatile() }
    }
    fn store(&self, value: u64) {
        // SAFETY: as above.
        unsafe { self.0.write_volatile(value) }
    }
}

fn page_words(mm: &PageAllocator, pfn: Pfn) -> Vec<Word> {
    let base = mm.page_address(pfn).unwrap().as_ptr() as *mut u64;
    // SAFETY: offsets stay inside the 4 KiB page.
    (0..8).map(|i| Word(unsafe { base.add(i * 64 + 7) })).collect()
}
