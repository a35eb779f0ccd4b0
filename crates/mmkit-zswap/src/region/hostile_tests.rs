//! A region used as a hostile or careless program would: signal handlers
//! of its own that touch the region while a load is under way, thread-local
//! destructors, a `kill -BUS`, a chaining handler on a small alternate
//! stack, `errno`, regions dropped while another region faults, a forked
//! child, the program's own `madvise`/`munmap` on region memory, and a raw
//! fault near the end of a thread's stack. Each
//! case that could crash or hang runs in a child process (a re-run of this
//! binary, or a fork) so that a failure is a failed test, not a dead run.

use super::os::testing;
use super::os::Os;
use super::tests::{region, word, zswap};
use super::*;
use std::time::{Duration, Instant};

const CHILD: &str = "MMKIT_ZSWAP_REGION_HOSTILE_CHILD";

/// Runs test `name` of this binary in a child with `CHILD=1`; its exit
/// code (`None`: killed by a signal).
fn run_child(name: &str) -> (Option<i32>, String) {
    run_child_with(name, "1")
}

/// Runs test `name` of this binary in a child with `CHILD=mode`.
fn run_child_with(name: &str, mode: &str) -> (Option<i32>, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .output()
        .unwrap();
    let text =
        format!("{:?}\n{}\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

fn in_child() -> bool {
    std::env::var(CHILD).is_ok()
}

/// A region resolving raw faults in the faulting thread, filled with
/// `word(p, 1)` on every page and evicted; `None` where that mode is not
/// to be had (the caller skips).
fn evicted_sigbus_region(z: &Arc<Zswap>, pages: usize, budget: usize) -> Option<SwapRegion> {
    let r = region(z, RegionConfig { fault_in_thread: true, ..RegionConfig::new(pages * PAGE_SIZE, budget) })?;
    if !r.resolves_faults_in_thread() {
        eprintln!("skipped: no UFFD_FEATURE_SIGBUS here");
        return None;
    }
    for p in 0..pages {
        r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
    }
    r.reclaim(0).unwrap();
    Some(r)
}

/// Skips (exit 3 in the child, a message in the parent).
fn skipped(code: Option<i32>) -> bool {
    if code == Some(3) {
        eprintln!("skipped: no SIGBUS mode here");
    }
    code == Some(3)
}

#[test]
fn a_signal_handler_that_touches_the_region_may_land_during_a_load() {
    // The base loaded into a thread-local RefCell: a SIGALRM whose handler
    // touched the region while the thread was loading found it borrowed,
    // and the process aborted. Loads now run with the program's signals
    // blocked, and the handler's fault is resolved once the load is done.
    let name = "region::hostile_tests::a_signal_handler_that_touches_the_region_may_land_during_a_load";
    if in_child() {
        let z = zswap(1024);
        let pages = 256;
        let Some(r) = evicted_sigbus_region(&z, pages, 8) else { std::process::exit(3) };
        testing::read_on_alarm_at(r.as_ptr() as usize + 200 * PAGE_SIZE);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let loader = testing::this_thread();
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Relaxed) {
                    testing::alarm(loader);
                    std::thread::sleep(Duration::from_micros(20));
                }
            });
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut p = 0;
            while Instant::now() < deadline || testing::alarm_reads() < 100 {
                p = (p * 7 + 13) % pages;
                assert_eq!(r.read_u64(p * PAGE_SIZE).unwrap(), word(p, 1));
            }
            stop.store(true, Relaxed);
        });
        testing::read_on_alarm_at(0);
        println!("reads in the handler: {}", testing::alarm_reads());
        std::process::exit(0);
    }
    let (code, out) = run_child(name);
    if !skipped(code) {
        assert_eq!(code, Some(0), "{out}");
    }
}

/// The region a thread-local's destructor uses.
static LAST_REGION: std::sync::Mutex<Option<Arc<SwapRegion>>> = std::sync::Mutex::new(None);

thread_local! {
    /// A thread-local whose destructor uses [`LAST_REGION`] (once armed).
    static LAST_WORDS: LastWords = const { LastWords(std::cell::Cell::new(false)) };
}

struct LastWords(std::cell::Cell<bool>);

impl Drop for LastWords {
    fn drop(&mut self) {
        if !self.0.get() {
            return;
        }
        let Some(r) = LAST_REGION.lock().unwrap().clone() else { return };
        // An accessor load and a raw fault, after (or before) the other
        // thread-locals of the thread are gone.
        assert_eq!(r.read_u64(7 * PAGE_SIZE).unwrap(), word(7, 1));
        assert_eq!(r.shared.os.load_u64(9 * PAGE_SIZE), word(9, 1));
    }
}

#[test]
fn thread_local_destructors_may_use_the_region() {
    // The base's load buffer was a thread-local: an accessor or a raw touch
    // from another thread-local's destructor found it destroyed (a panic
    // in a destructor: the process aborted).
    let name = "region::hostile_tests::thread_local_destructors_may_use_the_region";
    if in_child() {
        let z = zswap(256);
        let Some(r) = evicted_sigbus_region(&z, 64, 4) else { std::process::exit(3) };
        let r = Arc::new(r);
        *LAST_REGION.lock().unwrap() = Some(r.clone());
        for first in [true, false] {
            r.reclaim(0).unwrap();
            let r = &r;
            std::thread::scope(|s| {
                s.spawn(move || {
                    // Registered before the loads' thread-locals, or after.
                    if first {
                        LAST_WORDS.with(|w| w.0.set(true));
                    }
                    for p in 0..32 {
                        assert_eq!(r.read_u64(p * PAGE_SIZE).unwrap(), word(p, 1));
                    }
                    if !first {
                        LAST_WORDS.with(|w| w.0.set(true));
                    }
                    r.reclaim(0).unwrap();
                });
            });
        }
        std::process::exit(0);
    }
    let (code, out) = run_child(name);
    if !skipped(code) {
        assert_eq!(code, Some(0), "{out}");
    }
}

#[test]
fn a_sigbus_sent_by_a_process_leaves_the_regions_handler_in_place() {
    // `kill -BUS` is no fault: chained to std's handler (which resets the
    // action to the default before it returns), it left the base's regions
    // without a handler, and the next raw touch of an evicted page killed
    // the process.
    let name = "region::hostile_tests::a_sigbus_sent_by_a_process_leaves_the_regions_handler_in_place";
    if in_child() {
        let z = zswap(256);
        let Some(r) = evicted_sigbus_region(&z, 64, 4) else { std::process::exit(3) };
        for _ in 0..3 {
            testing::send_sigbus_to_self();
            assert!(testing::sigbus_has_a_handler());
            for p in 0..64 {
                assert_eq!(r.shared.os.load_u64(p * PAGE_SIZE), word(p, 1));
            }
        }
        std::process::exit(0);
    }
    let (code, out) = run_child(name);
    if !skipped(code) {
        assert_eq!(code, Some(0), "{out}");
    }
}

/// glibc's `SIGSTKSZ` before 2.34, what programs size alternate stacks by.
const DEFAULT_ALTERNATE_STACK: usize = 8192;

#[test]
fn a_chaining_handler_on_a_default_alternate_stack_resolves_faults() {
    // Language runtimes install SA_ONSTACK handlers that chain: ours then
    // runs on an alternate stack of SIGSTKSZ. The base needed 20-24 KiB
    // (its eviction's page buffer and compression) and overflowed it.
    let name = "region::hostile_tests::a_chaining_handler_on_a_default_alternate_stack_resolves_faults";
    if in_child() {
        let z = zswap(1024);
        let pages = 256;
        let Some(r) = evicted_sigbus_region(&z, pages, 16) else { std::process::exit(3) };
        // MMKIT_ALT_STACK: another size, to measure the need.
        let size =
            std::env::var("MMKIT_ALT_STACK").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_ALTERNATE_STACK);
        let stack = testing::AlternateStack::new(size);
        testing::install_chaining_handler_on_alternate_stack();
        for round in 0..4u64 {
            for p in 0..pages {
                // Reads and writes, at random and in runs: loads, clean
                // evictions and hand-offs in the handler.
                let p = if round % 2 == 0 { p } else { (p * 37 + 11) % pages };
                let v = r.shared.os.load_u64(p * PAGE_SIZE);
                assert_eq!(v, word(p, 1));
                if p % 4 == 0 {
                    r.shared.os.store_u64(p * PAGE_SIZE + 8, round);
                }
            }
        }
        println!("alternate stack used: {} bytes", stack.used());
        assert!(r.stats().faults_in_thread > 0);
        std::process::exit(0);
    }
    let (code, out) = run_child(name);
    if !skipped(code) {
        assert_eq!(code, Some(0), "{out}");
        eprintln!("{}", out.lines().find(|l| l.contains("alternate stack used")).unwrap_or("?"));
    }
}

#[test]
fn errno_survives_a_fault_resolved_in_the_faulting_thread() {
    let z = zswap(1024);
    let pages = 256;
    let Some(r) = evicted_sigbus_region(&z, pages, 8) else { return };
    let r = &r;
    std::thread::scope(|s| {
        for t in 0..2usize {
            s.spawn(move || {
                for round in 0..4usize {
                    for k in 0..pages {
                        // Two threads on the same pages: races, hand-offs.
                        let p = (k * 31 + round + t) % pages;
                        testing::set_errno(4242);
                        let v = r.shared.os.load_u64(p * PAGE_SIZE);
                        assert_eq!(testing::errno(), 4242, "page {p}");
                        assert_eq!(v, word(p, 1));
                    }
                }
            });
        }
    });
    assert!(r.stats().faults_in_thread > 0);
}

#[test]
fn dropping_a_region_waits_for_its_own_faults_only() {
    // The base counted handlers in flight process-wide: with threads
    // faulting in one region, dropping another waited until none was in
    // the handler at once (102 s with six threads).
    let z = zswap(4096);
    let pages = 512;
    let Some(busy) = evicted_sigbus_region(&z, pages, 4) else { return };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let busy = &busy;
    let slowest = std::thread::scope(|s| {
        for t in 0..4usize {
            let stop = &stop;
            s.spawn(move || {
                let mut p = t;
                while !stop.load(Relaxed) {
                    p = (p * 13 + 7) % pages;
                    assert_eq!(busy.shared.os.load_u64(p * PAGE_SIZE), word(p, 1));
                }
            });
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut slowest = Duration::ZERO;
        for _ in 0..10 {
            let z2 = zswap(64);
            let other = evicted_sigbus_region(&z2, 16, 4).unwrap();
            assert_eq!(other.shared.os.load_u64(3 * PAGE_SIZE), word(3, 1));
            let start = Instant::now();
            drop(other);
            slowest = slowest.max(start.elapsed());
        }
        stop.store(true, Relaxed);
        slowest
    });
    assert!(slowest < Duration::from_secs(2), "a drop took {slowest:?}");
}

#[test]
fn a_forked_child_is_refused_and_the_parent_goes_on() {
    // The base let a forked child's calls load and evict through the
    // userfaultfd it inherited, into the parent's memory.
    for fault_in_thread in [true, false] {
        let z = zswap(256);
        // No background reclaimer: its last batch may still be counting
        // after `reclaim` returns, and the counts below must be the child's.
        let config =
            RegionConfig { fault_in_thread, background_reclaim: false, ..RegionConfig::new(32 * PAGE_SIZE, 8) };
        let Some(r) = region(&z, config) else { return };
        for p in 0..32 {
            r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
        }
        r.reclaim(4).unwrap();
        let before = r.stats();
        let code = testing::in_forked_child(|| {
            let forked = |e| matches!(e, Err(RegionError::Forked));
            let all = forked(r.read_u64(0).map(drop))
                && forked(r.read_u64(31 * PAGE_SIZE).map(drop))
                && forked(r.write_u64(PAGE_SIZE, 9))
                && forked(r.reclaim(0).map(drop))
                && forked(r.pin(0, 8, false).map(drop))
                && forked(r.read(0, &mut [0u8; 16]));
            if all {
                0
            } else {
                1
            }
        });
        assert_eq!(code, Some(0), "fault_in_thread {fault_in_thread}");
        let after = r.stats();
        assert_eq!((after.swap_ins, after.evictions), (before.swap_ins, before.evictions));
        for p in 0..32 {
            assert_eq!(r.read_u64(p * PAGE_SIZE).unwrap(), word(p, 1), "page {p}");
            assert_eq!(r.shared.os.load_u64(p * PAGE_SIZE), word(p, 1), "page {p}");
            r.write_u64(p * PAGE_SIZE, word(p, 2)).unwrap();
        }
        assert_eq!(r.mapped_pages().unwrap() as u64, r.stats().resident);
    }
}

#[test]
fn a_page_the_program_dropped_is_reloaded_not_refaulted_for_ever() {
    // MADV_DONTNEED on a resident page: the base saw it resident, and the
    // raw touch faulted for ever (and `reclaim` deadlocked on it). Now the
    // touch reloads it: its last stored copy, or zeros (what the kernel
    // gives after MADV_DONTNEED) when it never had one.
    for fault_in_thread in [true, false] {
        let code = testing::in_forked_child(|| {
            let z = zswap(256);
            let config = RegionConfig { fault_in_thread, ..RegionConfig::new(16 * PAGE_SIZE, 8) };
            let Some(r) = region(&z, config) else { return 3 };
            let at = |p: usize| r.as_ptr().wrapping_add(p * PAGE_SIZE);
            r.write_u64(3 * PAGE_SIZE, 33).unwrap(); // dirty, never stored
            r.write_u64(5 * PAGE_SIZE, 55).unwrap();
            r.reclaim(0).unwrap(); // page 5 stored
            assert_eq!(r.read_u64(5 * PAGE_SIZE).unwrap(), 55); // back, clean
            r.write_u64(3 * PAGE_SIZE, 33).unwrap();
            r.write_u64(6 * PAGE_SIZE, 66).unwrap();
            for p in [3, 5, 6] {
                testing::madvise(at(p), PAGE_SIZE, libc::MADV_DONTNEED);
            }
            let raw3 = r.shared.os.load_u64(3 * PAGE_SIZE);
            let raw5 = r.shared.os.load_u64(5 * PAGE_SIZE);
            // Page 6 untouched: eviction finds it gone.
            r.reclaim(0).unwrap();
            let ok = raw3 == 33 && raw5 == 55 && r.read_u64(6 * PAGE_SIZE).unwrap() == 0;
            let ok = ok && r.stats().program_drops >= 3;
            // A write after the drop lands and stays.
            testing::madvise(at(5), PAGE_SIZE, libc::MADV_DONTNEED);
            r.shared.os.store_u64(5 * PAGE_SIZE, 77);
            r.reclaim(0).unwrap();
            let ok = ok && r.read_u64(5 * PAGE_SIZE).unwrap() == 77;
            if ok {
                0
            } else {
                eprintln!("{raw3} {raw5} {:?}", r.stats());
                1
            }
        });
        if code == Some(3) {
            return eprintln!("skipped: userfaultfd unavailable");
        }
        assert_eq!(code, Some(0), "fault_in_thread {fault_in_thread}");
    }
}

#[test]
fn fault_around_stops_at_a_memory_area_boundary() {
    // madvise on part of the region splits its memory area; a copy may not
    // cross the split, and the base's fault-around copy failed whole,
    // failing the page asked for too (LoadFailed; a raw touch died).
    for fault_in_thread in [true, false] {
        let z = zswap(256);
        let config = RegionConfig { fault_in_thread, ..RegionConfig::new(32 * PAGE_SIZE, 16) };
        let Some(r) = region(&z, config) else { return };
        for p in 0..32 {
            r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
        }
        r.reclaim(0).unwrap();
        testing::madvise(r.as_ptr().wrapping_add(4 * PAGE_SIZE), 8 * PAGE_SIZE, libc::MADV_RANDOM);
        for p in 0..32 {
            assert_eq!(r.read_u64(p * PAGE_SIZE).unwrap(), word(p, 1), "page {p}");
        }
        r.reclaim(0).unwrap();
        for p in 0..32 {
            assert_eq!(r.shared.os.load_u64(p * PAGE_SIZE), word(p, 1), "page {p}");
        }
        assert_eq!(r.stats().load_failures, 0);
        assert!(r.stats().fault_around_pages > 0, "{:?}", r.stats());
    }
}

#[test]
fn a_partial_munmap_is_an_error_not_a_crash() {
    // The base took a failed zero-fill (the page unmapped) for a load, and
    // `read_u64` then read unmapped memory: a segfault in safe code.
    let code = testing::in_forked_child(|| {
        let z = zswap(256);
        let Some(r) = region(&z, RegionConfig::new(16 * PAGE_SIZE, 8)) else { return 3 };
        for p in [0, 13] {
            r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
        }
        r.reclaim(0).unwrap();
        testing::munmap(r.as_ptr().wrapping_add(8 * PAGE_SIZE), 4 * PAGE_SIZE);
        let failed = |e| matches!(e, Err(RegionError::LoadFailed { .. }));
        let ok = failed(r.read_u64(9 * PAGE_SIZE).map(drop))
            && failed(r.write_u64(10 * PAGE_SIZE, 1))
            && r.read_u64(0).unwrap() == word(0, 1)
            && r.read_u64(13 * PAGE_SIZE).unwrap() == word(13, 1)
            && r.read_u64(5 * PAGE_SIZE).unwrap() == 0;
        i32::from(!ok)
    });
    if code != Some(3) {
        assert_eq!(code, Some(0));
    }
}

/// Recurses until less than `margin` bytes of the thread's stack (whose
/// lowest usable byte is `low`) are left under this frame, then runs
/// `at_the_end` there.
#[inline(never)]
fn descend(low: usize, margin: usize, at_the_end: &mut dyn FnMut() -> u64) -> u64 {
    let pad = std::hint::black_box([1u8; 128]);
    let here = std::ptr::addr_of!(pad) as usize;
    if here.saturating_sub(low) <= margin {
        return at_the_end();
    }
    descend(low, margin, at_the_end).wrapping_add(u64::from(std::hint::black_box(pad)[0]))
}

#[test]
fn a_raw_fault_near_the_end_of_a_threads_stack_is_resolved() {
    // The base resolved a fault on the faulting thread's own stack and
    // needed about 9 KiB of it (release; more in a debug build): a thread
    // deep in a recursion that touched an evicted page with less left died
    // of a stack overflow inside the handler. The handler now moves to a
    // stack of its own at once, and with SA_ONSTACK even the kernel's
    // signal frame lands on the thread's alternate stack where it has one
    // (Rust's threads do). Without one (a thread of C code), what is left
    // must hold the kernel's frame and the handler's first few hundred
    // bytes (MMKIT_STACK_MARGIN measures it).
    let name = "region::hostile_tests::a_raw_fault_near_the_end_of_a_threads_stack_is_resolved";
    if let Ok(mode) = std::env::var(CHILD) {
        let alternate = mode == "alternate";
        let default_margin = if alternate { 1536 } else { 8 << 10 };
        let margin = std::env::var("MMKIT_STACK_MARGIN").ok().and_then(|m| m.parse().ok()).unwrap_or(default_margin);
        let z = zswap(1024);
        let Some(r) = evicted_sigbus_region(&z, 64, 8) else { std::process::exit(3) };
        let r = &r;
        std::thread::scope(|s| {
            let t = std::thread::Builder::new().stack_size(256 << 10);
            t.spawn_scoped(s, move || {
                if !alternate {
                    testing::disable_alternate_stack();
                }
                let (low, _) = testing::stack_bounds();
                let mut round = 0;
                for _ in 0..8 {
                    descend(low, margin, &mut || {
                        round += 1;
                        // A missing page read, a write to it (clean: a
                        // write-protect fault), a missing page written.
                        let p = (round * 3) % 64;
                        assert_eq!(r.shared.os.load_u64(p * PAGE_SIZE), word(p, 1));
                        r.shared.os.store_u64(p * PAGE_SIZE + 8, round as u64);
                        let q = (p + 32) % 64;
                        r.shared.os.store_u64(q * PAGE_SIZE + 16, round as u64);
                        r.shared.os.load_u64(q * PAGE_SIZE)
                    });
                    r.reclaim(0).unwrap();
                }
            })
            .unwrap();
        });
        let s = r.stats();
        assert!(s.faults_in_thread >= 24, "{s:?}");
        println!("deepest use of the handler's own stacks: {} bytes", super::os::stack::deepest_use());
        std::process::exit(0);
    }
    for mode in ["alternate", "none"] {
        let (code, out) = run_child_with(name, mode);
        if skipped(code) {
            return;
        }
        assert_eq!(code, Some(0), "{mode}: {out}");
        eprintln!("{mode}: {}", out.lines().find(|l| l.contains("deepest use")).unwrap_or("?"));
    }
}
