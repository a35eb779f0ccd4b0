//! Memory back to the OS without being asked: a thread that watches the
//! device's pool and, a [`PAGE_REPORTING_DELAY`] after it shrank by a
//! pageblock or more (a trim, a reset, overwrites that compress better),
//! drains the page allocator's per-CPU lists and runs a free page reporting
//! pass, so that the pages zsmalloc gave back when their zspages emptied
//! leave the process's resident size.
//!
//! It follows Linux's free page reporting (`mm/page_reporting.c`): a free
//! of a block of `page_reporting_order` or more requests a pass
//! (`page_reporting_notify_free`), which runs `PAGE_REPORTING_DELAY` later
//! (`schedule_delayed_work`), once however many frees came meanwhile. Here
//! the request is a shrink of the pool seen by sampling, since zsmalloc's
//! free path must not pay for it. zsmalloc already returns an empty zspage
//! to the page allocator at once (`zs_free`, as Linux's `free_zspage`);
//! what stayed resident after a trim was the allocator's free memory.
//!
//! Owns the thread and when a pass runs; the pass itself is the page
//! allocator's (`Tuning::report_free_pages`).

use mmkit::PAGE_REPORTING_DELAY;
use mmkit::{Cpus, Tuning};
use mmkit_zram::{Zram, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the pool's size is sampled: often enough that a shrink is
/// seen well within one reporting delay.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// Pool pages that must have gone since the last pass for a new one to be
/// requested: one pageblock (2 MiB), the smallest block a pass gives back.
pub const SHRINK_PAGES: u64 = (2 << 20) / PAGE_SIZE as u64;

/// When to run a pass, from samples of the pool's size.
#[derive(Debug)]
pub struct Schedule {
    delay: Duration,
    /// The most pages the pool held since the last pass.
    peak: u64,
    /// When the requested pass is due, if one is.
    due: Option<Instant>,
}

impl Schedule {
    /// A schedule that runs a pass `delay` after the request.
    pub fn new(delay: Duration) -> Self {
        Self { delay, peak: 0, due: None }
    }

    /// Takes one sample (`pages` in the pool at `now`); true when a pass
    /// should run now. A shrink of [`SHRINK_PAGES`] or more below the peak
    /// requests one, due `delay` later; more shrinking meanwhile does not
    /// put it off.
    pub fn sample(&mut self, pages: u64, now: Instant) -> bool {
        self.peak = self.peak.max(pages);
        if self.due.is_none() && self.peak - pages >= SHRINK_PAGES {
            self.due = Some(now + self.delay);
        }
        match self.due {
            Some(due) if now >= due => {
                self.due = None;
                self.peak = pages;
                true
            }
            _ => false,
        }
    }

    /// Forgets everything (the device was reset: a new pool, and the
    /// reset gave the old one's memory back itself).
    pub fn restart(&mut self) {
        self.peak = 0;
        self.due = None;
    }
}

/// The thread; dropping it stops it (at most one sample later).
#[derive(Debug)]
pub struct Reclaimer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reclaimer {
    /// Starts the thread for `zram`, with Linux's reporting delay.
    ///
    /// # Errors
    /// The thread could not be created.
    pub fn start(zram: Arc<Zram>) -> std::io::Result<Self> {
        Self::with_delay(zram, PAGE_REPORTING_DELAY)
    }

    /// As [`start`](Self::start), a pass running `delay` after a shrink.
    ///
    /// # Errors
    /// The thread could not be created.
    pub fn with_delay(zram: Arc<Zram>, delay: Duration) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("mmkit-zram-reclaim".into()).spawn(move || {
            let mut schedule = Schedule::new(delay);
            let mut pool_seen: Option<usize> = None;
            while !stopped.load(Relaxed) {
                std::thread::sleep(SAMPLE_EVERY);
                let Some(pool) = zram.pool() else {
                    schedule.restart();
                    continue;
                };
                // A reset device has a new pool: start over on it.
                let id = Arc::as_ptr(&pool) as usize;
                if pool_seen.replace(id) != Some(id) {
                    schedule.restart();
                }
                if schedule.sample(pool.zs_get_total_pages(), Instant::now()) {
                    let mm = pool.allocator();
                    Cpus::new(mm).drain_all_pages();
                    Tuning::new(mm).report_free_pages();
                }
            }
        })?;
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for Reclaimer {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit::Report;
    use mmkit_zram::ZramConfig;

    #[test]
    fn a_pass_runs_one_delay_after_a_shrink_of_a_pageblock_and_not_for_less() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut s = Schedule::new(Duration::from_secs(2));
        assert!(!s.sample(10_000, at(0)));
        assert!(!s.sample(10_000 - SHRINK_PAGES + 1, at(200)), "less than a pageblock: no request");
        assert!(!s.sample(10_000 - SHRINK_PAGES, at(400)), "requested, due at 2.4 s");
        assert!(!s.sample(100, at(1000)), "more frees do not put it off, nor run it early");
        assert!(s.sample(100, at(2400)), "due");
        assert!(!s.sample(100, at(5000)), "one pass per request");
        assert!(!s.sample(5000, at(5200)));
        assert!(!s.sample(0, at(5400)));
        assert!(s.sample(0, at(7400)), "a new peak and shrink: a new pass");
        s.restart();
        assert!(!s.sample(0, at(9999)));
    }

    #[test]
    fn discarded_pages_are_reported_without_compact() {
        let zram = Arc::new(
            Zram::with_own_memory(ZramConfig { disksize: 64 << 20, ..ZramConfig::default() }).expect("a device"),
        );
        // Pages that compress to about a third: many zspages, all emptied
        // by the discard.
        let page: Vec<u8> = (0..PAGE_SIZE).map(|i| if i % 3 == 0 { (i * 7 % 251) as u8 } else { 0 }).collect();
        let dev = zram.open().unwrap();
        for index in 0..8192u64 {
            let mut p = page.clone();
            p[..8].copy_from_slice(&index.to_le_bytes());
            dev.write(index * PAGE_SIZE as u64, &p).unwrap();
        }
        let pool = zram.pool().unwrap();
        assert!(pool.zs_get_total_pages() > 2 * SHRINK_PAGES);
        let reported_before = Report::new(pool.allocator()).nr_reported_pages();
        let _reclaimer = Reclaimer::with_delay(Arc::clone(&zram), Duration::from_millis(300)).unwrap();
        std::thread::sleep(2 * SAMPLE_EVERY);
        dev.discard(0, 64 << 20).unwrap();
        assert_eq!(pool.zs_get_total_pages(), 0, "zsmalloc gave every emptied zspage back at once");
        let started = Instant::now();
        while Report::new(pool.allocator()).nr_reported_pages() <= reported_before {
            assert!(started.elapsed() < Duration::from_secs(10), "no reporting pass within 10 s");
            std::thread::sleep(SAMPLE_EVERY);
        }
    }
}
