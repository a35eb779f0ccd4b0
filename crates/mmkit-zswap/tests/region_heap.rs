//! A program whose global allocator's heap is a `SwapRegion`: every
//! allocation of the program's threads (boxes, vectors, strings, maps) is
//! region memory, touched raw, faulted in and evicted under a budget far
//! below the live heap, while the allocator holds its own lock across
//! those touches. The region's handler thread and the region's own calls
//! must then never wait for that lock while a faulting thread waits for
//! them: the allocator serves what the region's own code allocates
//! ([`SwapRegion::in_region_call`]) from the system allocator.
//!
//! Each case runs in a child process (a re-run of this binary) under a
//! watchdog, so that a hang or a crash is a failed test with the child's
//! output, not a stuck run.

use mmkit::{Backing, HugePages, MemoryMapBuilder};
use mmkit_zswap::{RegionConfig, RegionError, SwapFile, SwapRegion, Zswap, ZswapParams};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Size classes of the heap: 16 bytes to 64 KiB, powers of two.
const CLASSES: usize = 13;
const LARGEST: usize = 16 << (CLASSES - 1);

/// A global allocator whose heap is a region's memory once armed (the
/// system allocator before, and for what it cannot hold): a bump pointer
/// and a free list per size class, under one spin lock. The free lists
/// are threaded through the freed blocks, so the allocator itself touches
/// region memory raw with its lock held.
struct RegionHeap {
    lock: AtomicBool,
    base: AtomicUsize,
    end: AtomicUsize,
    next: AtomicUsize,
    free: [AtomicUsize; CLASSES],
    /// Whether allocations made by the region's own code go to the system
    /// allocator (the documented contract) or to the region too.
    serve_region_code_elsewhere: AtomicBool,
    allocated: AtomicU64,
}

#[global_allocator]
static HEAP: RegionHeap = RegionHeap {
    lock: AtomicBool::new(false),
    base: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    next: AtomicUsize::new(0),
    free: [const { AtomicUsize::new(0) }; CLASSES],
    serve_region_code_elsewhere: AtomicBool::new(true),
    allocated: AtomicU64::new(0),
};

fn class_of(layout: Layout) -> usize {
    let size = layout.size().max(layout.align()).max(16).next_power_of_two();
    size.trailing_zeros() as usize - 4
}

impl RegionHeap {
    fn lock(&self) {
        while self.lock.swap(true, Acquire) {
            std::thread::yield_now();
        }
    }

    fn unlock(&self) {
        self.lock.store(false, Release);
    }

    fn holds(&self, ptr: *mut u8) -> bool {
        let p = ptr as usize;
        let base = self.base.load(Acquire);
        base != 0 && p >= base && p < self.end.load(Acquire)
    }

    /// Makes `len` bytes at `base` the heap.
    fn arm(&self, base: *mut u8, len: usize) {
        self.end.store(base as usize + len, Release);
        self.next.store(base as usize, Release);
        self.base.store(base as usize, Release);
    }
}

// SAFETY: blocks handed out are either the system allocator's or disjoint
// blocks of the armed heap (the bump pointer only grows; a freed block goes
// on its class's list and is handed out again only from it), each aligned
// to its class's size, which is at least the layout's size and alignment.
unsafe impl GlobalAlloc for RegionHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let cooperative = self.serve_region_code_elsewhere.load(Relaxed);
        if self.base.load(Acquire) == 0
            || layout.size().max(layout.align()) > LARGEST
            || (cooperative && SwapRegion::in_region_call())
        {
            // SAFETY: the caller's layout, passed on.
            return unsafe { System.alloc(layout) };
        }
        let class = class_of(layout);
        let size = 16usize << class;
        self.lock();
        let head = self.free[class].load(Relaxed);
        let block = if head != 0 {
            // SAFETY: a block on the list holds the next block's address in
            // its first word (written by `dealloc`); region memory, touched
            // raw: it may fault and be loaded by the region.
            let next = unsafe { std::ptr::read_volatile(head as *const usize) };
            self.free[class].store(next, Relaxed);
            head
        } else {
            let at = self.next.load(Relaxed).next_multiple_of(size);
            if at + size > self.end.load(Relaxed) {
                self.unlock();
                // SAFETY: as above.
                return unsafe { System.alloc(layout) };
            }
            self.next.store(at + size, Relaxed);
            at
        };
        self.unlock();
        self.allocated.fetch_add(1, Relaxed);
        block as *mut u8
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !self.holds(ptr) {
            // SAFETY: a block of the system allocator's, with its layout.
            return unsafe { System.dealloc(ptr, layout) };
        }
        let class = class_of(layout);
        self.lock();
        // SAFETY: the block is the caller's to give back, at least 16
        // bytes; its first word links it into the list (a raw touch of
        // region memory under the lock).
        unsafe { std::ptr::write_volatile(ptr.cast::<usize>(), self.free[class].load(Relaxed)) };
        self.free[class].store(ptr as usize, Relaxed);
        self.unlock();
    }
}

const CHILD: &str = "MMKIT_ZSWAP_REGION_HEAP_CHILD";

/// One object of a thread's working set: a vector, a string and a box.
type Object = (Vec<u64>, String, Box<[u64; 24]>);

/// What one object of a thread's working set holds, derived from its key.
fn fill(key: u64) -> Object {
    let len = (key % 1500) as usize + 1;
    let v = (0..len as u64).map(|k| key.wrapping_mul(31).wrapping_add(k)).collect();
    let s = format!("object {key} {}", "x".repeat((key % 300) as usize));
    let b = Box::new([key ^ 0x5a5a; 24]);
    (v, s, b)
}

fn verify(key: u64, object: &Object) {
    let (v, s, b) = fill(key);
    assert!(object.0 == v, "vector of {key}");
    assert!(object.1 == s, "string of {key}");
    assert!(*object.2 == *b, "box of {key}");
}

/// The child: a region as the heap, threads churning objects over it for
/// `seconds`, each verified before it is dropped.
fn churn(cooperative: bool, seconds: u64) {
    HEAP.serve_region_code_elsewhere.store(cooperative, Relaxed);
    let mm = MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
    let z = Arc::new(Zswap::new(Arc::new(mm), SwapFile::create_temp(16384).unwrap(), ZswapParams::default()).unwrap());
    let budget = 96;
    let region = match SwapRegion::new(z, RegionConfig::new(64 << 20, budget)) {
        Ok(r) => r,
        Err(RegionError::Userfaultfd(why)) => {
            eprintln!("skipped: userfaultfd unavailable: {why}");
            std::process::exit(3);
        }
        Err(e) => panic!("region: {e}"),
    };
    if !region.resolves_faults_in_thread() {
        eprintln!("skipped: no UFFD_FEATURE_SIGBUS here");
        std::process::exit(3);
    }
    let region: &'static SwapRegion = Box::leak(Box::new(region));
    HEAP.arm(region.as_ptr(), region.len());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let rounds: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..3u64)
            .map(|t| {
                s.spawn(move || {
                    let mut live: BTreeMap<u64, Object> = BTreeMap::new();
                    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                    let mut rounds = 0u64;
                    while Instant::now() < deadline {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let slot = state % 96;
                        let key = state >> 8 << 8 | t;
                        if let Some((old_key, object)) = live.iter().nth(slot as usize % (live.len() + 1)) {
                            verify(*old_key, object);
                            let old_key = *old_key;
                            live.remove(&old_key);
                        }
                        live.insert(key, fill(key));
                        rounds += 1;
                    }
                    for (key, object) in &live {
                        verify(*key, object);
                    }
                    rounds
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let s = region.stats();
    eprintln!(
        "rounds {rounds}, heap allocations {}, faults in thread {}, handoffs {}, evictions {}, resident {} of {budget}",
        HEAP.allocated.load(Relaxed),
        s.faults_in_thread,
        s.handoffs,
        s.evictions,
        s.resident
    );
    assert!(s.faults_in_thread > 1000 && s.evictions > 1000, "{s:?}");
    std::process::exit(0);
}

/// Runs test `name` in a child with `CHILD=mode`; kills it after `limit`.
fn run_child(name: &str, mode: &str, limit: Duration) -> (Option<i32>, String) {
    use std::io::Read;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut out);
    let _ = child.stderr.take().unwrap().read_to_string(&mut out);
    match status {
        None => (None, format!("hung: killed after {limit:?}\n{out}")),
        Some(status) => (status.code(), format!("{status}\n{out}")),
    }
}

/// What the child printed of its run.
fn summary(out: &str) -> &str {
    out.lines().find_map(|l| l.split_once("rounds ").map(|(_, r)| r)).unwrap_or("?")
}

/// Test `name`: in the child, the churn (the allocator serving the
/// region's own allocations elsewhere when `cooperative`); in the parent,
/// the child's exit code and output, or `None` where the child skipped.
fn churn_in_a_child(name: &str, cooperative: bool) -> Option<(Option<i32>, String)> {
    let mode = if cooperative { "cooperative" } else { "plain" };
    if std::env::var(CHILD).as_deref() == Ok(mode) {
        churn(cooperative, 4);
    }
    let (code, out) = run_child(name, mode, Duration::from_secs(60));
    if code == Some(3) {
        eprintln!("{out}");
        return None;
    }
    Some((code, out))
}

#[test]
fn a_program_whose_heap_is_a_region_runs_and_keeps_its_data() {
    // The base hung within a second: the handler thread's eviction
    // allocated (zswap's compression buffer, zsmalloc's lists) from the
    // heap, in pages it was evicting or behind the lock of the allocator a
    // faulting thread held while it waited for a hand-off. Served from
    // elsewhere while `in_region_call` says so, it never waits on the
    // program's lock.
    let Some((code, out)) = churn_in_a_child("a_program_whose_heap_is_a_region_runs_and_keeps_its_data", true) else {
        return;
    };
    assert_eq!(code, Some(0), "{out}");
    eprintln!("rounds {}", summary(&out));
}

#[test]
fn a_heap_that_also_serves_the_regions_own_allocations_ends_with_a_message() {
    // Not supported, but never a silent hang: the region's own code faults
    // on its metadata in the region, and the process ends saying why.
    let name = "a_heap_that_also_serves_the_regions_own_allocations_ends_with_a_message";
    let Some((code, out)) = churn_in_a_child(name, false) else { return };
    if code == Some(0) {
        // No fault of the region's own code came (its allocations stayed
        // resident): the run is right as it is.
        return eprintln!("no fault in the region's own code this time: rounds {}", summary(&out));
    }
    assert!(out.contains("the region's own code touched region memory"), "{out}");
    assert!(out.contains("SIGABRT") || out.contains("signal: 6"), "{out}");
}
