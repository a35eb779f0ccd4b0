//! The peer: the same trace replayed into `buddy_system_allocator`'s
//! `FrameAllocator` in policy mode (order and count only: no migratetypes,
//! CPUs or GFP flags), for speed and order-9 fragmentation next to mmkit.
//!
//! Owns the peer's live-block map (by kernel PFN, with the same odd-event
//! rules as the engine) and an occupancy count per aligned 512-page range.
//! For a buddy allocator that always merges, the free blocks of order ≥ 9
//! are exactly the completely free aligned 512-page ranges, which gives
//! its unusable free space index without reading its free lists. Must not
//! touch mmkit's allocator or the engine's tables.

use super::engine::{Ev, Op, MAX_ORDER};
use mmkit_bench::subjects::{names, BsaFrames};
use serde::Serialize;

/// Pages per range for the order-9 index.
const RANGE_ORDER: u32 = 9;

/// The peer's results.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PeerReport {
    /// Crate name.
    pub name: &'static str,
    /// Events per second of the peer's replay loop (same events as mmkit's
    /// loop, timed the same way).
    pub loop_events_per_sec: f64,
    /// Peer loop time / mmkit loop time: above 1, mmkit is faster.
    pub ratio_vs_mmkit: f64,
    /// Allocations the peer could not serve.
    pub failures: u64,
    /// Pages live at the end.
    pub live_pages: u64,
    /// Free pages at the end.
    pub free_pages: u64,
    /// Unusable free space index for order 9 at the end, 0..1.
    pub unusable_index_order9: f64,
    /// Its time average, at the same event counts as mmkit's samples.
    pub unusable_index_order9_mean: f64,
    /// (events, order-9 unusable index) at each sample, for plots.
    #[serde(skip)]
    pub index_samples: Vec<(u64, f64)>,
}

/// `FrameAllocator` replaying a trace.
pub struct Peer {
    frames: Box<BsaFrames>,
    kmin: u64,
    /// Per kernel PFN: (frame + 1, order); frame 0 means not live.
    live: Vec<(u64, u8)>,
    first: u64,
    pages: u64,
    used: Vec<u32>,
    live_pages: u64,
    failures: u64,
    /// Events applied.
    pub events: u64,
    /// (events, order-9 unusable index) at each [`sample`](Self::sample).
    samples: Vec<(u64, f64)>,
}

impl Peer {
    /// A peer owning frames `first..first + pages` (`first` aligned to 512
    /// pages) for kernel PFNs `kpfns`.
    pub fn new(first: u64, pages: u64, kpfns: std::ops::Range<u64>) -> Self {
        let mut frames = Box::new(BsaFrames::new());
        frames.add_frame(first as usize, (first + pages) as usize);
        // Written at setup, as the engine's table is, so that neither loop
        // takes page faults for its bookkeeping.
        let mut live = Vec::with_capacity((kpfns.end - kpfns.start) as usize);
        live.resize(live.capacity(), (0, 0));
        std::hint::black_box(&mut live);
        Self {
            frames,
            kmin: kpfns.start,
            live,
            first,
            pages,
            used: vec![0; pages.div_ceil(1 << RANGE_ORDER) as usize],
            live_pages: 0,
            failures: 0,
            events: 0,
            samples: Vec::new(),
        }
    }

    /// Applies one event.
    #[inline]
    pub fn apply(&mut self, ev: &Ev) {
        self.events += 1;
        let k = ev.pfn.wrapping_sub(self.kmin) as usize;
        if k >= self.live.len() {
            return;
        }
        match ev.op {
            Op::FailedAlloc => {}
            Op::Free => {
                if self.live[k].0 != 0 {
                    self.release(k);
                }
            }
            Op::Alloc => {
                if self.live[k].0 != 0 {
                    self.release(k);
                }
                match self.frames.alloc(1 << ev.order) {
                    Some(frame) => {
                        self.live[k] = (frame as u64 + 1, ev.order);
                        self.book(frame as u64, ev.order, true);
                    }
                    None => self.failures += 1,
                }
            }
        }
    }

    fn release(&mut self, k: usize) {
        let (frame, order) = self.live[k];
        self.live[k] = (0, 0);
        self.frames.dealloc((frame - 1) as usize, 1 << order);
        self.book(frame - 1, order, false);
    }

    fn book(&mut self, frame: u64, order: u8, alloc: bool) {
        let pages = 1u32 << order.min(MAX_ORDER as u8);
        let per_range = pages.min(1 << RANGE_ORDER);
        let first = ((frame - self.first) >> RANGE_ORDER) as usize;
        let ranges = (pages >> RANGE_ORDER).max(1) as usize;
        for used in self.used.iter_mut().skip(first).take(ranges) {
            *used = if alloc { *used + per_range } else { used.saturating_sub(per_range) };
        }
        if alloc {
            self.live_pages += u64::from(pages);
        } else {
            self.live_pages -= u64::from(pages);
        }
    }

    /// Records the order-9 unusable index now (for the time average).
    pub fn sample(&mut self) {
        let (_, index) = self.index();
        self.samples.push((self.events, index));
    }

    /// Free pages and the order-9 unusable index now.
    fn index(&self) -> (u64, f64) {
        let free = self.pages - self.live_pages;
        // An always-merging buddy's free blocks of order >= 9 are exactly the
        // wholly free aligned ranges; the rest of the free pages is smaller.
        let whole = self.used.iter().filter(|&&u| u == 0).count() as u64;
        let mut blocks = [0u64; RANGE_ORDER as usize + 1];
        blocks[RANGE_ORDER as usize] = whole;
        blocks[0] = free.saturating_sub(whole << RANGE_ORDER);
        (free, f64::from(mmkit::procfs::unusable_index(&blocks, RANGE_ORDER)) / 1000.0)
    }

    /// Results, given the loop times of the peer and of mmkit.
    pub fn report(&self, events: u64, peer_secs: f64, mmkit_secs: f64) -> PeerReport {
        let (free, index) = self.index();
        let mean = if self.samples.is_empty() {
            index
        } else {
            self.samples.iter().map(|s| s.1).sum::<f64>() / self.samples.len() as f64
        };
        PeerReport {
            name: names::BSA,
            loop_events_per_sec: if peer_secs > 0.0 { events as f64 / peer_secs } else { 0.0 },
            ratio_vs_mmkit: if mmkit_secs > 0.0 { peer_secs / mmkit_secs } else { 0.0 },
            failures: self.failures,
            live_pages: self.live_pages,
            free_pages: free,
            unusable_index_order9: index,
            unusable_index_order9_mean: mean,
            index_samples: self.samples.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(op: Op, pfn: u64, order: u8) -> Ev {
        Ev { pfn, gfp: 0, cpu: 0, order, op }
    }

    #[test]
    fn index_counts_whole_free_ranges() {
        let mut peer = Peer::new(1024, 2048, 0..4096);
        let r = peer.report(0, 0.0, 0.0);
        assert_eq!((r.free_pages, r.unusable_index_order9), (2048, 0.0));
        // Four pages in one range, then four order-9 blocks: three fit.
        for i in 0..4 {
            peer.apply(&ev(Op::Alloc, 100 + i, 0));
        }
        for i in 0..4 {
            peer.apply(&ev(Op::Alloc, 200 + i, 9));
        }
        let r = peer.report(8, 1.0, 0.5);
        assert_eq!(r.live_pages, 4 + 3 * 512);
        assert_eq!(r.failures, 1, "only three order-9 blocks fit beside the pages");
        assert_eq!(r.unusable_index_order9, 1.0, "no whole range is free");
        assert_eq!(r.ratio_vs_mmkit, 2.0);
        peer.apply(&ev(Op::Free, 200, 9));
        peer.apply(&ev(Op::Free, 100, 0));
        peer.apply(&ev(Op::Free, 999, 0)); // unseen: ignored
        let r = peer.report(0, 0.0, 0.0);
        assert_eq!(r.free_pages, 2048 - 3 - 1024);
        assert_eq!(r.unusable_index_order9, ((1021 - 512) * 1000 / 1021) as f64 / 1000.0);
    }
}
