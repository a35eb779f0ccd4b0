//! The replay engine: applies trace events to an mmkit allocator, in
//! `policy` mode (mmkit chooses every block, on the event's CPU's per-CPU
//! lists) or `placed` mode (every block goes exactly where the kernel put
//! it, through `alloc_pages_at`).
//!
//! Owns the map from kernel PFNs to live blocks, the odd-event rules of
//! `../shared/traces/README.md` (frees of unseen blocks, order-10 zone
//! growth, allocations of a still-live block, partial frees), the
//! per-pageblock composition used for the "mixed pageblocks" metric, and
//! the optional double-hand-out check. Must not touch metrics sampling,
//! reports or plots (`metrics`, `report`, `plot`), nor parse text.

use mmkit::gfp::gfp_migratetype;
use mmkit::{AllocError, Gfp, PageAllocator, Pfn, PinnedCpu};
use mmkit::{Cpus, Report};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Blocks compaction moved, as the map's migrator reports them: (old, new,
/// order), and how many so far (read on every allocation, cheaper than the
/// lock).
#[derive(Default)]
pub struct MoveLog {
    /// Moves not yet applied to the engine's tables.
    pub moves: Mutex<Vec<(Pfn, Pfn, u32)>>,
    /// Moves reported so far.
    pub reported: AtomicU64,
}

impl MoveLog {
    /// Records one move (the migrator's callback).
    pub fn record(&self, old: Pfn, new: Pfn, order: u32) {
        if let Ok(mut moves) = self.moves.lock() {
            moves.push((old, new, order));
        }
        self.reported.fetch_add(1, Relaxed);
    }
}

/// Which allocator decides where blocks go (`--mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// mmkit places every block (its anti-fragmentation policy).
    Policy,
    /// Every block goes exactly where the kernel put it.
    Placed,
}

impl Mode {
    /// Name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Policy => "policy",
            Mode::Placed => "placed",
        }
    }
}

/// What an event does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A block was allocated at `pfn`.
    Alloc,
    /// The kernel's allocation failed (no PFN).
    FailedAlloc,
    /// A block at `pfn` was freed.
    Free,
}

/// One event, compact (16 bytes) for the replay loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ev {
    /// Kernel PFN of the block (0 for a failed allocation).
    pub pfn: u64,
    /// Raw GFP bits of an allocation.
    pub gfp: u32,
    /// CPU the event fired on.
    pub cpu: u16,
    /// Block order.
    pub order: u8,
    /// What happened.
    pub op: Op,
}

/// Largest order the engine replays (the map's `MAX_PAGE_ORDER`).
pub const MAX_ORDER: u32 = 10;
/// Orders 0..=MAX_ORDER.
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;

/// Counts of what the replay met.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Events applied.
    pub events: u64,
    /// Allocations replayed (successful or not).
    pub allocs: u64,
    /// Frees replayed (matched or not).
    pub frees: u64,
    /// Allocations that failed in the kernel (skipped), by order.
    pub trace_failed_by_order: [u64; NR_ORDERS],
    /// Frees of blocks the trace never allocated, by order (order 10 not
    /// included: see `zone_growth_frees`).
    pub unseen_frees_by_order: [u64; NR_ORDERS],
    /// Order-10 frees of never-allocated blocks: the kernel growing the zone.
    pub zone_growth_frees: u64,
    /// Allocations of a block the replay still held: its free was not
    /// traced, so it is freed first.
    pub implied_frees: u64,
    /// Frees whose order differs from the live block's (partial frees): the
    /// whole live block is freed.
    pub order_mismatch_frees: u64,
    /// Allocations mmkit could not serve, by order.
    pub failures_by_order: [u64; NR_ORDERS],
    /// Blocks compaction moved (unless `--no-compact`); their live-table
    /// entries now point at the new place.
    pub compaction_moves: u64,
    /// Failed allocations of order 9 or more while at least twice the
    /// request was free on the buddy lists: fragmentation, not shortage.
    pub order9_failures_with_2x_free: u64,
    /// Frees mmkit refused (should stay 0).
    pub free_errors: u64,
    /// Pages held by live blocks now.
    pub live_pages: u64,
    /// Most pages live at once.
    pub peak_live_pages: u64,
}

impl Counts {
    /// All allocation failures of mmkit.
    pub fn failures(&self) -> u64 {
        self.failures_by_order.iter().sum()
    }
    /// All frees of unseen blocks except zone growth.
    pub fn unseen_frees(&self) -> u64 {
        self.unseen_frees_by_order.iter().sum()
    }
}

/// A live block, by kernel PFN, packed in 4 bytes so that the table of a
/// 5 GiB span is 5 MiB: the mmkit PFN's offset in the map (26 bits), the
/// order (4 bits) and the request's mobility (2 bits); `EMPTY` when no
/// block is live there.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Live(u32);

impl Live {
    const EMPTY: Live = Live(u32::MAX);
    #[inline(always)]
    fn new(off: u32, order: u8, mt: u8) -> Live {
        Live(off << 6 | u32::from(order) << 2 | u32::from(mt))
    }
    #[inline(always)]
    fn is_live(self) -> bool {
        self != Live::EMPTY
    }
    #[inline(always)]
    fn off(self) -> u32 {
        self.0 >> 6
    }
    #[inline(always)]
    fn order(self) -> u8 {
        (self.0 >> 2 & 0xf) as u8
    }
    #[inline(always)]
    fn mt(self) -> u8 {
        (self.0 & 3) as u8
    }
}

/// Most pages a replay map may have: offsets are 26 bits (256 GiB).
pub const MAX_MAP_PAGES: u64 = 1 << 26;

/// How the engine allocates.
enum Backend<'a> {
    /// One pinned handle per traced CPU: that CPU's per-CPU lists, as
    /// `Cpus::cpu(n)` gives, without a lock per operation (the
    /// replay is the lists' only user).
    Policy(Vec<PinnedCpu<'a>>),
    /// `alloc_pages_at` on a map without per-CPU lists.
    Placed,
}

/// Replays events into one allocator; see the module doc.
pub struct Engine<'a> {
    mm: &'a PageAllocator,
    backend: Backend<'a>,
    /// Lowest kernel PFN the live table covers.
    kmin: u64,
    live: Vec<Live>,
    /// mmkit's first PFN.
    base: u64,
    pb_order: u32,
    /// Live pages per pageblock and mobility (unmovable, movable, reclaimable).
    pb_live: Vec<[u32; 3]>,
    /// One bit per mmkit page while allocated, when checking hand-outs.
    owned: Option<Vec<u64>>,
    /// Blocks handed out twice (only with the check on).
    pub double_handouts: u64,
    /// With compaction: the migrator's log, and how many moves were applied.
    moves: Option<(Arc<MoveLog>, u64)>,
    /// What happened so far.
    pub counts: Counts,
}

impl<'a> Engine<'a> {
    /// An engine over `mm` for kernel PFNs `kpfns` (half-open). Policy mode
    /// pins every CPU of `mm`. With `check_handouts`, every allocation is
    /// checked against a bitmap of pages already handed out.
    ///
    /// # Errors
    /// A CPU cannot be pinned.
    pub fn new(
        mm: &'a PageAllocator,
        mode: Mode,
        kpfns: std::ops::Range<u64>,
        check_handouts: bool,
    ) -> Result<Self, String> {
        let backend = match mode {
            Mode::Policy => Backend::Policy(
                (0..Cpus::new(mm).nr_cpus())
                    .map(|cpu| {
                        let mut pinned = Cpus::new(mm).pin_cpu(cpu).map_err(|e| e.to_string())?;
                        // The replay models Linux's per-CPU lists page by page.
                        pinned.set_magazine(false);
                        Ok(pinned)
                    })
                    .collect::<Result<_, String>>()?,
            ),
            Mode::Placed => Backend::Placed,
        };
        let base = mm.start_pfn().0;
        let pages = (mm.end_pfn().0 - base) as usize;
        if pages as u64 > MAX_MAP_PAGES {
            return Err(format!("the replay map has {pages} pages; at most {MAX_MAP_PAGES} are supported"));
        }
        // Written element by element (not a zeroed allocation the kernel
        // fills in lazily), so the replay loop does not take the page faults.
        let mut live = Vec::with_capacity((kpfns.end - kpfns.start) as usize);
        live.resize(live.capacity(), Live::EMPTY);
        std::hint::black_box(&mut live);
        let pb_order = mm.geometry().pageblock_order;
        Ok(Self {
            mm,
            backend,
            kmin: kpfns.start,
            live,
            base,
            pb_order,
            pb_live: vec![[0; 3]; pages.div_ceil(1 << pb_order)],
            owned: check_handouts.then(|| vec![0u64; pages.div_ceil(64)]),
            double_handouts: 0,
            moves: None,
            counts: Counts::default(),
        })
    }

    /// Follows the blocks compaction moves: every allocation records its
    /// live-table slot in the block's private word (the migrator carries it
    /// over), and `log` is read after allocations and compaction passes.
    pub fn follow_moves(&mut self, log: Arc<MoveLog>) {
        self.moves = Some((log, 0));
    }

    /// Applies the moves compaction reported since the last call: the live
    /// entry of each moved block points at its new place.
    #[inline]
    pub fn apply_moves(&mut self) {
        if let Some((log, seen)) = &self.moves {
            if log.reported.load(Relaxed) != *seen {
                self.apply_pending_moves();
            }
        }
    }

    /// [`apply_moves`](Self::apply_moves) once there are moves to apply.
    #[cold]
    fn apply_pending_moves(&mut self) {
        let Some((log, seen)) = &mut self.moves else {
            return;
        };
        let moves: Vec<(Pfn, Pfn, u32)> = log.moves.lock().map(|mut m| std::mem::take(&mut *m)).unwrap_or_default();
        *seen += moves.len() as u64;
        // A block may have moved more than once since the last call (direct
        // compaction retries): follow each to where it is now, in the order
        // the moves happened, keyed by where it was when last booked.
        let mut now_at: std::collections::HashMap<u64, (u64, u32)> = std::collections::HashMap::new();
        for (old, new, order) in moves {
            let origin = now_at.remove(&old.0).map_or(old.0, |(origin, _)| origin);
            now_at.insert(new.0, (origin, order));
        }
        for (new, (origin, order)) in now_at {
            let Ok(k) = self.mm.page_private(Pfn(new)) else {
                continue;
            };
            let k = k as usize;
            let Some(&live) = self.live.get(k) else {
                continue;
            };
            if !live.is_live() || u64::from(live.off()) != origin - self.base {
                continue;
            }
            let new_off = (new - self.base) as u32;
            self.account(live.off(), order as u8, live.mt(), false);
            self.live[k] = Live::new(new_off, live.order(), live.mt());
            self.account(new_off, order as u8, live.mt(), true);
            self.counts.compaction_moves += 1;
        }
    }

    /// Live pages per pageblock of the map and mobility (for metrics).
    pub fn pageblock_composition(&self) -> &[[u32; 3]] {
        &self.pb_live
    }

    /// Applies one event.
    #[inline]
    pub fn apply(&mut self, ev: &Ev) {
        self.counts.events += 1;
        match ev.op {
            Op::Alloc => self.alloc(ev),
            Op::Free => self.free(ev),
            Op::FailedAlloc => self.counts.trace_failed_by_order[ev.order as usize] += 1,
        }
    }

    /// First stage of looking ahead: starts loading `ev`'s live-table entry.
    #[inline(always)]
    pub fn prefetch_entry(&self, ev: &Ev) {
        if let Some(k) = self.slot(ev.pfn) {
            mmkit::prefetch(&self.live[k]);
        }
    }

    /// Second stage, a few events later: for a free, the entry is in cache
    /// by now, so start loading the descriptor of the block it will free.
    #[inline(always)]
    pub fn prefetch_block(&self, ev: &Ev) {
        if ev.op != Op::Free {
            return;
        }
        if let Some(k) = self.slot(ev.pfn) {
            let live = self.live[k];
            if live.is_live() {
                self.mm.prefetch_page(Pfn(self.base + u64::from(live.off())));
            }
        }
    }

    /// Index of kernel PFN `pfn` in the live table, if covered.
    #[inline(always)]
    fn slot(&self, pfn: u64) -> Option<usize> {
        let k = pfn.wrapping_sub(self.kmin) as usize;
        (k < self.live.len()).then_some(k)
    }

    #[inline]
    fn alloc(&mut self, ev: &Ev) {
        self.counts.allocs += 1;
        let Some(k) = self.slot(ev.pfn) else {
            self.counts.failures_by_order[ev.order as usize] += 1;
            return;
        };
        if self.live[k].is_live() {
            self.counts.implied_frees += 1;
            self.release(k, ev.cpu);
        }
        let gfp = Gfp::from_bits(ev.gfp);
        let order = u32::from(ev.order);
        let got = match &mut self.backend {
            Backend::Policy(cpus) => {
                let c = fold_cpu(ev.cpu, cpus.len());
                cpus[c].alloc_pages(gfp, order)
            }
            Backend::Placed => match self.mm.alloc_pages_at(Pfn(ev.pfn), order, gfp) {
                Err(AllocError::NotFree(_)) => {
                    self.free_overlapping(k, order, ev.cpu);
                    self.mm.alloc_pages_at(Pfn(ev.pfn), order, gfp)
                }
                other => other,
            },
        };
        match got {
            Ok(pfn) => {
                if self.moves.is_some() {
                    // Direct compaction may have moved blocks out of the way
                    // of this one: book those first. The slot rides in the
                    // private word, so a later move finds it.
                    self.apply_moves();
                    let _ = self.mm.set_page_private(pfn, k as u64);
                }
                let off = (pfn.0 - self.base) as u32;
                let mt = mobility(gfp);
                self.live[k] = Live::new(off, ev.order, mt);
                self.account(off, ev.order, mt, true);
            }
            Err(_) => self.note_failure(order),
        }
    }

    /// Books a failed allocation of `order`.
    #[cold]
    fn note_failure(&mut self, order: u32) {
        self.apply_moves();
        self.counts.failures_by_order[order as usize] += 1;
        if order >= 9 && Report::new(self.mm).nr_free_pages() >= 2 << order {
            self.counts.order9_failures_with_2x_free += 1;
        }
    }

    /// Placed mode: the kernel's block overlaps blocks the replay still
    /// holds (their frees were not traced): free them.
    #[cold]
    fn free_overlapping(&mut self, k: usize, order: u32, cpu: u16) {
        let size = 1usize << order;
        for j in k..(k + size).min(self.live.len()) {
            if self.live[j].is_live() {
                self.counts.implied_frees += 1;
                self.release(j, cpu);
            }
        }
        let pfn = self.kmin + k as u64;
        for o in order + 1..=MAX_ORDER {
            let head = pfn & !((1u64 << o) - 1);
            if let Some(h) = self.slot(head) {
                if self.live[h].is_live() && u32::from(self.live[h].order()) >= o {
                    self.counts.implied_frees += 1;
                    self.release(h, cpu);
                }
            }
        }
    }

    #[inline]
    fn free(&mut self, ev: &Ev) {
        self.counts.frees += 1;
        let live = self.slot(ev.pfn).filter(|&k| self.live[k].is_live());
        match live {
            Some(k) => {
                if self.live[k].order() != ev.order {
                    self.counts.order_mismatch_frees += 1;
                }
                self.release(k, ev.cpu);
            }
            None if u32::from(ev.order) == MAX_ORDER => self.counts.zone_growth_frees += 1,
            None => self.counts.unseen_frees_by_order[ev.order as usize] += 1,
        }
    }

    /// Frees live block `k` on CPU `cpu`.
    #[inline]
    fn release(&mut self, k: usize, cpu: u16) {
        let (off, order, mt) = (self.live[k].off(), self.live[k].order(), self.live[k].mt());
        self.live[k] = Live::EMPTY;
        self.account(off, order, mt, false);
        let pfn = Pfn(self.base + u64::from(off));
        let result = match &mut self.backend {
            Backend::Policy(cpus) => {
                let c = fold_cpu(cpu, cpus.len());
                cpus[c].free_pages(pfn, u32::from(order))
            }
            Backend::Placed => self.mm.free_pages(pfn, u32::from(order)),
        };
        if result.is_err() {
            self.counts.free_errors += 1;
        }
    }

    /// Books a block in or out of the live counts.
    #[inline(always)]
    fn account(&mut self, off: u32, order: u8, mt: u8, alloc: bool) {
        let pages = 1u32 << order;
        if alloc {
            self.counts.live_pages += u64::from(pages);
            self.counts.peak_live_pages = self.counts.peak_live_pages.max(self.counts.live_pages);
        } else {
            self.counts.live_pages -= u64::from(pages);
        }
        let per_block = pages.min(1 << self.pb_order);
        let first = (off >> self.pb_order) as usize;
        let blocks = (pages >> self.pb_order).max(1) as usize;
        for counts in self.pb_live.iter_mut().skip(first).take(blocks) {
            let c = &mut counts[usize::from(mt)];
            *c = if alloc { *c + per_block } else { c.wrapping_sub(per_block) };
        }
        if let Some(owned) = &mut self.owned {
            let mut twice = false;
            for page in off as usize..off as usize + pages as usize {
                let (word, bit) = (page / 64, 1u64 << (page % 64));
                twice |= alloc && owned[word] & bit != 0;
                if alloc {
                    owned[word] |= bit;
                } else {
                    owned[word] &= !bit;
                }
            }
            self.double_handouts += u64::from(twice);
        }
    }

    /// Linux's periodic per-CPU list upkeep on every pinned CPU: `high`
    /// decays (`decay_pcp_high`), or with `drain` the lists are emptied.
    pub fn pcp_upkeep(&mut self, drain: bool) {
        if let Backend::Policy(cpus) = &mut self.backend {
            for cpu in cpus {
                if drain {
                    cpu.drain_local_pages();
                } else {
                    cpu.decay_pcp_high();
                }
            }
        }
    }

    /// Ends the replay: unpins the CPUs (their lists stay filled).
    pub fn finish(&mut self) {
        self.backend = Backend::Placed;
    }

    /// Kernel PFNs and orders of the blocks still live (for tests).
    #[cfg(test)]
    pub fn live_blocks(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.live
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_live())
            .map(|(k, l)| (self.kmin + k as u64, u32::from(l.order())))
    }

    /// mmkit PFNs and orders of the blocks still live.
    #[cfg(test)]
    pub fn live_mmkit_blocks(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.live.iter().filter(|l| l.is_live()).map(|l| (self.base + u64::from(l.off()), u32::from(l.order())))
    }
}

/// The map's CPU for traced CPU `cpu` of `n`: itself unless the trace has
/// more CPUs than the map (a division only then, not per event).
#[inline(always)]
fn fold_cpu(cpu: u16, n: usize) -> usize {
    let cpu = usize::from(cpu);
    if cpu < n {
        cpu
    } else {
        cpu % n
    }
}

/// The mobility a request's GFP bits ask for (0 unmovable, 1 movable,
/// 2 reclaimable), whatever the allocator's grouping setting: what the
/// "mixed pageblock" metric compares against the pageblock's type.
#[inline(always)]
pub fn mobility(gfp: Gfp) -> u8 {
    // `gfp_migratetype` only returns those three, numbered that way.
    gfp_migratetype(gfp) as u8
}
