//! Fuzz target for two zswap instances side by side, each with a
//! `SwapRegion` over it: swap entries are allocated, swapped out, written
//! to the swap file, stored, loaded (exclusively, keeping, through
//! `swap_in`), invalidated, written back, shrunk and freed (one at a time
//! or in batches), with every entry also passed to the other instance's
//! calls, and an entry of a dropped instance passed to both. An entry is
//! valid on the instance that made it only: anywhere else every call
//! refuses it with `ForeignEntry` and changes nothing (the instance's
//! statistics, slots and the caller's buffer are compared), and the
//! consuming calls hand it back (`swap_free`'s error, `swap_free_batch`'s
//! foreign list). Parameters (`enabled`, `max_pool_percent` down to 0,
//! `shrinker_enabled`) change under the entries, so stores are refused and
//! the shrink worker writes entries back behind the caller's back.
//!
//! A model holds each live entry's bytes in two layers, zswap's and the
//! swap file's; a slot loads zswap's copy when it has one, else the
//! file's. After every operation every live entry of both instances loads
//! its own bytes back (`zswap_load_keep`, then `swap_in` keeping), an
//! entry leaves zswap only by the caller's doing or a counted writeback,
//! and both instances keep their invariants.
//!
//! The regions (16 pages, 4 resident, no background reclaim so a run is
//! deterministic) are written and read at random offsets and lengths,
//! bytes and words, pinned (guards held across operations) and reclaimed;
//! offsets and lengths past the end, misaligned words and pins larger than
//! the budget are errors that change nothing. After every operation one
//! page of each region (a different one each step) equals its model, and
//! at the start and end of every input both regions' full contents do, so
//! a page of one landing in the other, or lost, is caught; after every
//! operation the resident count agrees with the page tables and the pins.
//!
//! The instances and regions are kept from one input to the next (see
//! `mmkit_fuzz`): each input starts with default parameters, no entry of
//! its own and zeroed regions (checked against the last input's model
//! first), and frees every entry it made.
//!
//! Run with `cargo +nightly fuzz run two_swaps` from `fuzz/`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mmkit::{Backing, HugePages, MemoryMapBuilder, PageAllocator, Report};
use mmkit_fuzz::Persistent;
use mmkit_testkit::pages::noise_page;
use mmkit_zswap::{
    EntryId, KeepEntry, PinnedRange, RegionConfig, RegionError, Reject, ReleaseMode, SwapFile, SwapRegion, SwpEntry,
    Zswap, ZswapError, ZswapParams, PAGE_SIZE,
};
use std::sync::{Arc, OnceLock};

/// Pages of each region, and how many may be resident.
const REGION_PAGES: usize = 16;
const BUDGET: usize = 4;
const REGION_LEN: usize = REGION_PAGES * PAGE_SIZE;
/// Entries the target holds per instance at most: with the region's pages
/// they never fill the swap file.
const MAX_ENTRIES: usize = 40;
const SLOTS: u64 = 64;
/// Pins held per region at most.
const MAX_PINS: usize = 4;

#[derive(Arbitrary, Debug)]
enum Op {
    Alloc { z: bool },
    SwapOut { z: bool, page: Page },
    WritePage { z: bool, pick: u16, page: Page },
    Store { z: bool, pick: u16, page: Page },
    Load { z: bool, pick: u16 },
    LoadKeep { z: bool, pick: u16 },
    SwapIn { z: bool, pick: u16, keep: bool },
    Invalidate { z: bool, pick: u16, sync: bool },
    Writeback { z: bool, pick: u16 },
    BadSize { z: bool, pick: u16, call: u8, long: bool },
    Free { z: bool, pick: u16 },
    FreeBatch { z: bool, mask: u32, sync: bool },
    Stale { z: bool },
    Shrink { z: bool, n: u8 },
    Flush { z: bool },
    Param { z: bool, which: u8, value: u8 },
    RegionWrite { r: bool, at: Span, seed: u8 },
    RegionRead { r: bool, at: Span },
    RegionWriteU64 { r: bool, at: Word, value: u64 },
    RegionReadU64 { r: bool, at: Word },
    Pin { r: bool, at: Span, write: bool },
    Unpin { r: bool, pick: u8 },
    Reclaim { r: bool, keep: u8 },
}

/// A page to store: one repeated word, a compressible pattern or noise
/// (which zswap refuses as compressing poorly).
#[derive(Arbitrary, Clone, Copy, Debug)]
enum Page {
    Same(u64),
    Pattern(u8, u8),
    Noise(u64),
}

impl Page {
    fn bytes(&self) -> Vec<u8> {
        match *self {
            Page::Same(word) => word.to_ne_bytes().iter().copied().cycle().take(PAGE_SIZE).collect(),
            Page::Pattern(seed, period) => {
                let period = usize::from(period % 61) + 3;
                (0..PAGE_SIZE).map(|i| seed.wrapping_add((i % period) as u8)).collect()
            }
            Page::Noise(seed) => noise_page(seed, PAGE_SIZE),
        }
    }
}

/// A byte range of a region: mostly inside, sometimes past the end or
/// near `usize::MAX`.
#[derive(Arbitrary, Debug)]
struct Span {
    offset: u32,
    len: u16,
    far: bool,
}

impl Span {
    fn get(&self) -> (usize, usize) {
        let offset = if self.far {
            usize::MAX - (self.offset as usize % 8192)
        } else {
            self.offset as usize % (REGION_LEN + 2 * PAGE_SIZE)
        };
        (offset, usize::from(self.len) % (2 * PAGE_SIZE + 1))
    }
}

/// A word's offset: aligned unless asked otherwise.
#[derive(Arbitrary, Debug)]
struct Word {
    offset: u32,
    aligned: bool,
}

impl Word {
    fn get(&self) -> usize {
        let offset = self.offset as usize % (REGION_LEN + 64);
        if self.aligned {
            offset & !7
        } else {
            offset
        }
    }
}

/// One real-memory map for both instances, for every run.
fn map() -> Arc<PageAllocator> {
    static MM: OnceLock<Arc<PageAllocator>> = OnceLock::new();
    MM.get_or_init(|| {
        Arc::new(
            MemoryMapBuilder::with_memory(16 << 20)
                .backing(Backing::RealMemory(HugePages::None))
                .nr_cpus(1)
                .cpu_id_fn(|| 0)
                .hooks(mmkit::QuietHooks)
                .build()
                .unwrap(),
        )
    })
    .clone()
}

/// Both instances with their regions, and an entry of an instance that no
/// longer exists.
struct Swaps {
    zswaps: [Arc<Zswap>; 2],
    regions: [SwapRegion; 2],
    stale: SwpEntry,
}

/// What is kept between inputs: the instances and the regions' contents as
/// of the end of the last input.
struct Fixture {
    swaps: Swaps,
    contents: [Vec<u8>; 2],
}

static FIXTURE: Persistent<Fixture> = Persistent::new();

fn fixture() -> Fixture {
    let make = || Arc::new(Zswap::new(map(), SwapFile::create_temp(SLOTS).unwrap(), ZswapParams::default()).unwrap());
    let stale = {
        let gone = make();
        let entry = gone.alloc_swap_slot().unwrap();
        // Dropped with the slot still allocated: the entry outlives its device.
        drop(gone);
        entry
    };
    let zswaps = [make(), make()];
    let region = |z: &Arc<Zswap>| {
        let config = RegionConfig { background_reclaim: false, ..RegionConfig::new(REGION_LEN, BUDGET) };
        SwapRegion::new(z.clone(), config).expect("a region (userfaultfd)")
    };
    let regions = [region(&zswaps[0]), region(&zswaps[1])];
    Fixture { swaps: Swaps { zswaps, regions, stale }, contents: [vec![0; REGION_LEN], vec![0; REGION_LEN]] }
}

fuzz_target!(|ops: Vec<Op>| FIXTURE.with(fixture, |f| run(f, ops)));

/// A live entry of the target's and the bytes each layer holds for it
/// (`None`: nothing the model knows, such as a fresh slot's old data).
struct Live {
    entry: SwpEntry,
    zswap: Option<Vec<u8>>,
    file: Option<Vec<u8>>,
}

impl Live {
    /// What a load of the slot gives.
    fn expected(&self) -> Option<&Vec<u8>> {
        self.zswap.as_ref().or(self.file.as_ref())
    }
}

/// Instance and index of a live entry of either instance: the other
/// instance's half the time.
fn pick(models: &[Vec<Live>; 2], z: usize, k: u16) -> Option<(usize, usize)> {
    let first = z ^ usize::from(k & 1 == 1);
    for p in [first, 1 - first] {
        if !models[p].is_empty() {
            return Some((p, usize::from(k >> 1) % models[p].len()));
        }
    }
    None
}

/// Index of a live entry of instance `z`, as `pick` chooses it; when
/// `pick` lands on the other instance's entry, that entry is tried on
/// every call of `z` (all refused) and there is none.
fn own_entry(models: &[Vec<Live>; 2], zswaps: &[Arc<Zswap>; 2], z: usize, k: u16) -> Option<usize> {
    let (owner, at) = pick(models, z, k)?;
    if owner != z {
        refuse_everywhere(&zswaps[z], &models[owner][at].entry);
        return None;
    }
    Some(at)
}

fn foreign<T: std::fmt::Debug>(got: Result<T, ZswapError>, id: EntryId) {
    assert!(matches!(got, Err(ZswapError::ForeignEntry(e)) if e == id), "{got:?} for foreign entry {id}");
}

/// What a foreign call must leave as it was: the instance's statistics
/// (deferred frees drained first) and slots.
fn snapshot(z: &Zswap) -> (mmkit_zswap::ZswapStats, u64) {
    z.flush_deferred();
    (z.stats(), z.swap_file().used_slots())
}

/// Every call of `z` that names `entry` (not `z`'s) refuses it and changes
/// nothing, the caller's buffer included.
fn refuse_everywhere(z: &Zswap, entry: &SwpEntry) {
    let id = entry.id();
    let before = snapshot(z);
    let page = vec![0x5a; PAGE_SIZE];
    let mut buf = vec![0xa5; PAGE_SIZE];
    foreign(z.zswap_store(entry, &page), id);
    foreign(z.swap_writepage(entry, &page), id);
    foreign(z.zswap_load(entry, &mut buf), id);
    foreign(z.zswap_load_keep(entry, &mut buf), id);
    foreign(z.swap_in(entry, &mut buf, KeepEntry::Keep), id);
    foreign(z.swap_in(entry, &mut buf, KeepEntry::Drop), id);
    foreign(z.zswap_invalidate(entry), id);
    foreign(z.zswap_invalidate_mode(entry, ReleaseMode::Sync), id);
    foreign(z.zswap_writeback_entry(entry), id);
    assert!(!z.contains(entry));
    assert!(buf.iter().all(|&b| b == 0xa5), "a refused load wrote the caller's buffer");
    assert_eq!(snapshot(z), before, "a refused call changed the instance");
}

/// Brings the model up to date with writebacks the shrink worker did on
/// its own (a store refused at the pool limit runs it): an entry that left
/// zswap had its bytes written to its slot, which the next load checks.
/// Panics if an entry left zswap while `z` counted no writeback, or
/// appeared in zswap without the model's knowledge.
fn resync(z: &Zswap, model: &mut [Live], written_back_before: u64) {
    let wrote = z.stats().written_back_pages != written_back_before;
    for live in model.iter_mut() {
        let there = z.contains(&live.entry);
        match (&live.zswap, there) {
            (Some(_), false) => {
                assert!(wrote, "entry {} left zswap with no writeback", live.entry);
                live.file = live.zswap.take();
            }
            (None, true) => panic!("entry {} is in zswap, which the model does not know", live.entry),
            _ => {}
        }
    }
}

/// Every live entry of both instances loads its bytes, both instances keep
/// their invariants, and both regions hold their models' bytes.
fn check(f: &Swaps, models: &[Vec<Live>; 2], contents: &[Vec<u8>; 2], pins: &[Pins<'_>; 2], pages: PagesChecked) {
    let mut buf = vec![0u8; PAGE_SIZE];
    for (z, model) in f.zswaps.iter().zip(models) {
        for live in model {
            let found = z.zswap_load_keep(&live.entry, &mut buf).unwrap();
            assert_eq!(found, live.zswap.is_some(), "entry {}: in zswap?", live.entry);
            if let Some(want) = &live.zswap {
                assert!(buf == *want, "entry {} lost its zswap bytes", live.entry);
            }
            buf.fill(0);
            z.swap_in(&live.entry, &mut buf, KeepEntry::Keep).unwrap();
            if let Some(want) = live.expected() {
                assert!(buf == *want, "entry {} does not load its bytes", live.entry);
            }
        }
        z.check_invariants().unwrap();
    }
    let mut all = vec![0u8; REGION_LEN];
    for r in 0..2 {
        let region = &f.regions[r];
        if let PagesChecked::One(step) = pages {
            // One page a region, a different one each step: loading every
            // page back after every step (12 of 16 are out, a budget of 4)
            // took most of an input's time. A wrong page elsewhere is
            // still found by the whole-region check that ends the input.
            let page = step % REGION_PAGES;
            let at = page * PAGE_SIZE;
            region.read(at, &mut all[..PAGE_SIZE]).unwrap();
            assert!(
                all[..PAGE_SIZE] == contents[r][at..at + PAGE_SIZE],
                "region {r}: page {page} differs from the model"
            );
        } else {
            region.read(0, &mut all).unwrap();
        }
        if pages == PagesChecked::All && all != contents[r] {
            let page = (0..REGION_PAGES)
                .find(|&p| all[p * PAGE_SIZE..][..PAGE_SIZE] != contents[r][p * PAGE_SIZE..][..PAGE_SIZE]);
            panic!("region {r}: page {page:?} differs from the model");
        }
        let pinned = pinned_pages(&pins[r]);
        let resident = region.stats().resident as usize;
        assert!(resident >= pinned, "region {r}: {resident} resident, {pinned} pinned");
        assert!(resident <= BUDGET.max(pinned + 1), "region {r}: {resident} resident over the budget");
        assert_eq!(region.mapped_pages().unwrap(), resident, "region {r}: resident count against the page tables");
    }
}

/// How much of each region `check` compares with its model.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PagesChecked {
    /// Every page.
    All,
    /// One page, chosen by the step's number.
    One(usize),
}

/// A region's pins: each guard with the offset and length it pins.
type Pins<'r> = Vec<(usize, usize, PinnedRange<'r>)>;

/// Distinct pages the guards pin.
fn pinned_pages(pins: &Pins<'_>) -> usize {
    let mut pages = [false; REGION_PAGES];
    for &(offset, len, _) in pins {
        if len > 0 {
            let (start, end) = span_pages(offset, len);
            pages[start..end].iter_mut().for_each(|p| *p = true);
        }
    }
    pages.iter().filter(|&&p| p).count()
}

/// The pages `len > 0` bytes at `offset` touch.
fn span_pages(offset: usize, len: usize) -> (usize, usize) {
    (offset / PAGE_SIZE, (offset + len - 1) / PAGE_SIZE + 1)
}

/// Whether `len` bytes at `offset` lie inside a region.
fn inside(offset: usize, len: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= REGION_LEN)
}

fn out_of_bounds<T: std::fmt::Debug>(got: Result<T, RegionError>, offset: usize, len: usize) {
    assert!(
        matches!(got, Err(RegionError::OutOfBounds { offset: o, len: l, size }) if (o, l, size) == (offset, len, REGION_LEN)),
        "{got:?} for {len} bytes at {offset}"
    );
}

/// Runs one input on instances that hold no entry of the target's, and
/// frees every entry it made.
fn run(f: &mut Fixture, ops: Vec<Op>) {
    let (f, kept) = (&f.swaps, &mut f.contents);
    // The regions kept the last input's bytes; every input starts on zeros.
    let page = vec![0u8; PAGE_SIZE];
    let mut all = vec![0u8; REGION_LEN];
    for r in 0..2 {
        f.regions[r].read(0, &mut all).unwrap();
        assert!(all == kept[r], "region {r} changed between inputs");
        for p in 0..REGION_PAGES {
            if kept[r][p * PAGE_SIZE..][..PAGE_SIZE].iter().any(|&b| b != 0) {
                f.regions[r].write(p * PAGE_SIZE, &page).unwrap();
            }
        }
    }
    for z in &f.zswaps {
        for name in mmkit_zswap::PARAM_NAMES {
            z.param_set(name, &ZswapParams::default().show(name).unwrap()).unwrap();
        }
        assert_eq!(z.params(), ZswapParams::default());
        assert!(z.swap_file().used_slots() <= REGION_PAGES as u64, "slots leaked by an earlier input");
    }
    let mut contents = [vec![0u8; REGION_LEN], vec![0u8; REGION_LEN]];
    let mut models: [Vec<Live>; 2] = Default::default();
    let mut pins: [Pins<'_>; 2] = Default::default();
    let mut buf = vec![0u8; 3 * PAGE_SIZE];
    let written_back_now = || [0, 1].map(|i| f.zswaps[i].stats().written_back_pages);
    let mut written_back = written_back_now();
    for (step, op) in ops.into_iter().take(64).enumerate() {
        match op {
            Op::Alloc { z } => {
                let z = usize::from(z);
                if models[z].len() < MAX_ENTRIES {
                    let entry = f.zswaps[z].alloc_swap_slot().unwrap();
                    assert_eq!(entry.swap_type(), f.zswaps[z].swap_type());
                    assert!(!f.zswaps[z].contains(&entry), "a fresh slot has a zswap entry");
                    models[z].push(Live { entry, zswap: None, file: None });
                }
            }
            Op::SwapOut { z, page: p } => {
                let z = usize::from(z);
                if models[z].len() < MAX_ENTRIES {
                    let data = p.bytes();
                    let entry = f.zswaps[z].swap_out(&data).unwrap();
                    let live = if f.zswaps[z].contains(&entry) {
                        Live { entry, zswap: Some(data), file: None }
                    } else {
                        Live { entry, zswap: None, file: Some(data) }
                    };
                    models[z].push(live);
                }
            }
            Op::WritePage { z, pick: k, page: p } | Op::Store { z, pick: k, page: p } => {
                let z = usize::from(z);
                let Some(at) = own_entry(&models, &f.zswaps, z, k) else { continue };
                let store = matches!(op, Op::Store { .. });
                let data = p.bytes();
                let live = &mut models[z][at];
                let zs = &f.zswaps[z];
                if !store {
                    zs.swap_writepage(&live.entry, &data).unwrap();
                    live.file = Some(data);
                    continue;
                }
                let params = zs.params();
                match zs.zswap_store(&live.entry, &data) {
                    Ok(()) => {
                        assert!(params.enabled);
                        live.zswap = Some(data);
                    }
                    Err(ZswapError::Rejected(why)) => {
                        assert_eq!(why == Reject::Disabled, !params.enabled, "{why:?}");
                        // Only noise compresses poorly; the pool limit
                        // holds (with its hysteresis) for any page.
                        let poor = matches!(p, Page::Noise(_)) && why == Reject::CompressPoor;
                        assert!(poor || matches!(why, Reject::Disabled | Reject::PoolLimit), "{why:?} for {p:?}");
                        // The old entry is stale and dropped.
                        live.zswap = None;
                    }
                    Err(e) => panic!("store: {e}"),
                }
            }
            Op::Load { z, pick: k } | Op::LoadKeep { z, pick: k } | Op::SwapIn { z, pick: k, .. } => {
                let z = usize::from(z);
                let Some(at) = own_entry(&models, &f.zswaps, z, k) else { continue };
                let live = &mut models[z][at];
                let zs = &f.zswaps[z];
                let page = &mut buf[..PAGE_SIZE];
                page.fill(0xa5);
                match op {
                    Op::SwapIn { keep, .. } => {
                        let keep = if keep { KeepEntry::Keep } else { KeepEntry::Drop };
                        zs.swap_in(&live.entry, page, keep).unwrap();
                        if let Some(want) = live.expected() {
                            assert!(page == &want[..], "swap_in of {} gave other bytes", live.entry);
                        }
                        if keep == KeepEntry::Drop {
                            live.zswap = None;
                        }
                    }
                    _ => {
                        let found = if matches!(op, Op::Load { .. }) {
                            zs.zswap_load(&live.entry, page).unwrap()
                        } else {
                            zs.zswap_load_keep(&live.entry, page).unwrap()
                        };
                        assert_eq!(found, live.zswap.is_some());
                        match &live.zswap {
                            Some(want) => assert!(page == &want[..], "load of {} gave other bytes", live.entry),
                            None => assert!(page.iter().all(|&b| b == 0xa5), "a load of nothing wrote the page"),
                        }
                        if matches!(op, Op::Load { .. }) {
                            live.zswap = None;
                        }
                    }
                }
            }
            Op::Invalidate { z, pick: k, sync } => {
                let z = usize::from(z);
                let Some(at) = own_entry(&models, &f.zswaps, z, k) else { continue };
                let live = &mut models[z][at];
                let mode = if sync { ReleaseMode::Sync } else { ReleaseMode::Deferred };
                let had = f.zswaps[z].zswap_invalidate_mode(&live.entry, mode).unwrap();
                assert_eq!(had, live.zswap.take().is_some());
            }
            Op::Writeback { z, pick: k } => {
                let z = usize::from(z);
                let Some(at) = own_entry(&models, &f.zswaps, z, k) else { continue };
                let live = &mut models[z][at];
                match f.zswaps[z].zswap_writeback_entry(&live.entry) {
                    Ok(()) => {
                        assert!(live.zswap.is_some());
                        live.file = live.zswap.take();
                    }
                    Err(ZswapError::NoEntry(id)) => {
                        assert!(id == live.entry.id() && live.zswap.is_none());
                    }
                    Err(e) => panic!("writeback: {e}"),
                }
            }
            Op::BadSize { z, pick: k, call, long } => {
                let z = usize::from(z);
                let Some((owner, at)) = pick(&models, z, k) else { continue };
                let live = &models[owner][at];
                let zs = &f.zswaps[z];
                let len = if long { PAGE_SIZE + 1 } else { usize::from(call >> 2) % PAGE_SIZE };
                let before = snapshot(zs);
                let page = &mut buf[..len];
                let got = match call % 4 {
                    0 => zs.zswap_store(&live.entry, page),
                    1 => zs.swap_writepage(&live.entry, page),
                    2 => zs.zswap_load(&live.entry, page).map(drop),
                    _ => zs.swap_in(&live.entry, page, KeepEntry::Drop),
                };
                if owner == z {
                    assert!(matches!(got, Err(ZswapError::BadPageSize(n)) if n == len), "{got:?}");
                } else {
                    foreign(got, live.entry.id());
                }
                assert_eq!(snapshot(zs), before);
            }
            Op::Free { z, pick: k } => {
                let z = usize::from(z);
                let Some((owner, at)) = pick(&models, z, k) else { continue };
                let live = models[owner].swap_remove(at);
                let zs = &f.zswaps[z];
                let before = snapshot(zs);
                match zs.swap_free(live.entry) {
                    Ok(()) => {
                        assert_eq!(owner, z);
                        assert_eq!(zs.swap_file().used_slots(), before.1 - 1);
                    }
                    Err((e, entry)) => {
                        assert_ne!(owner, z);
                        assert!(matches!(e, ZswapError::ForeignEntry(id) if id == entry.id()), "{e:?}");
                        assert_eq!(snapshot(zs), before);
                        models[owner].push(Live { entry, ..live });
                    }
                }
            }
            Op::FreeBatch { z, mask, sync } => {
                let z = usize::from(z);
                let mut taken: Vec<(usize, Live)> = Vec::new();
                for p in 0..2 {
                    let mut i = 0;
                    while i < models[p].len() {
                        if mask >> ((i + 16 * p) % 32) & 1 == 1 {
                            taken.push((p, models[p].swap_remove(i)));
                        } else {
                            i += 1;
                        }
                    }
                }
                let mut entries = Vec::new();
                let mut kept = Vec::new();
                for (p, Live { entry, zswap, file }) in taken {
                    kept.push((p, entry.id(), zswap, file));
                    entries.push(entry);
                }
                let own = kept.iter().filter(|k| k.0 == z).count();
                let zs = &f.zswaps[z];
                let used = zs.swap_file().used_slots();
                let mode = if sync { ReleaseMode::Sync } else { ReleaseMode::Deferred };
                let (freed, back) = zs.swap_free_batch(entries, mode);
                assert_eq!(freed, own);
                assert_eq!(zs.swap_file().used_slots(), used - own as u64);
                assert_eq!(back.len(), kept.len() - own, "every foreign entry comes back");
                for entry in back {
                    let at = kept.iter().position(|k| k.1 == entry.id()).expect("a foreign entry of the batch");
                    let (p, _, zswap, file) = kept.swap_remove(at);
                    assert_ne!(p, z);
                    models[p].push(Live { entry, zswap, file });
                }
            }
            Op::Stale { z } => {
                let zs = &f.zswaps[usize::from(z)];
                assert_ne!(f.stale.swap_type(), zs.swap_type());
                refuse_everywhere(zs, &f.stale);
            }
            Op::Shrink { z, n } => {
                let z = usize::from(z);
                let zs = &f.zswaps[z];
                let before = zs.stats().written_back_pages;
                let ours = models[z].iter().filter(|l| l.zswap.is_some()).count();
                let written = zs.zswap_shrink(usize::from(n));
                assert_eq!(zs.stats().written_back_pages - before, written as u64);
                if !zs.params().shrinker_enabled {
                    assert_eq!(written, 0);
                }
                resync(zs, &mut models[z], before);
                let moved = ours - models[z].iter().filter(|l| l.zswap.is_some()).count();
                assert!(moved <= written, "{moved} of the target's entries left zswap, {written} written back");
            }
            Op::Flush { z } => f.zswaps[usize::from(z)].flush_deferred(),
            Op::Param { z, which, value } => {
                let zs = &f.zswaps[usize::from(z)];
                let yn = if value & 1 == 1 { "Y" } else { "N" };
                let percent = [0, 1, 20, 100][usize::from(value >> 1) % 4].to_string();
                match which % 4 {
                    0 => zs.param_set("enabled", yn).unwrap(),
                    1 => zs.param_set("shrinker_enabled", yn).unwrap(),
                    2 => zs.param_set("max_pool_percent", &percent).unwrap(),
                    _ => zs.param_set("accept_threshold_percent", &percent).unwrap(),
                }
            }
            Op::RegionWrite { r, at, seed } => {
                let r = usize::from(r);
                let (offset, len) = at.get();
                let data = noise_page(u64::from(seed) << 32 | offset as u64, len);
                let got = f.regions[r].write(offset, &data);
                if inside(offset, len) {
                    got.unwrap();
                    contents[r][offset..offset + len].copy_from_slice(&data);
                } else {
                    out_of_bounds(got, offset, len);
                }
            }
            Op::RegionRead { r, at } => {
                let r = usize::from(r);
                let (offset, len) = at.get();
                let out = &mut buf[..len];
                out.fill(0xa5);
                let got = f.regions[r].read(offset, out);
                if inside(offset, len) {
                    got.unwrap();
                    assert!(out == &contents[r][offset..offset + len], "region {r}: read at {offset}");
                } else {
                    out_of_bounds(got, offset, len);
                    assert!(out.iter().all(|&b| b == 0xa5), "a refused read wrote the buffer");
                }
            }
            Op::RegionWriteU64 { r, at, value } => {
                let r = usize::from(r);
                let offset = at.get();
                let got = f.regions[r].write_u64(offset, value);
                if !inside(offset, 8) {
                    out_of_bounds(got, offset, 8);
                } else if offset % 8 != 0 {
                    assert!(matches!(got, Err(RegionError::Misaligned(o)) if o == offset), "{got:?}");
                } else {
                    got.unwrap();
                    contents[r][offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
                }
            }
            Op::RegionReadU64 { r, at } => {
                let r = usize::from(r);
                let offset = at.get();
                let got = f.regions[r].read_u64(offset);
                if !inside(offset, 8) {
                    out_of_bounds(got, offset, 8);
                } else if offset % 8 != 0 {
                    assert!(matches!(got, Err(RegionError::Misaligned(o)) if o == offset), "{got:?}");
                } else {
                    let want = u64::from_ne_bytes(contents[r][offset..offset + 8].try_into().unwrap());
                    assert_eq!(got.unwrap(), want, "region {r}: word at {offset}");
                }
            }
            Op::Pin { r, at, write } => {
                let r = usize::from(r);
                let (offset, len) = at.get();
                if pins[r].len() >= MAX_PINS {
                    drop(pins[r].remove(0));
                }
                let got = f.regions[r].pin(offset, len, write);
                // A guard has no `Debug`: a refusal is shown without it.
                if !inside(offset, len) {
                    out_of_bounds(got.map(|_| ()), offset, len);
                    continue;
                }
                let pages = if len == 0 { 0 } else { span_pages(offset, len).1 - span_pages(offset, len).0 };
                if pages > BUDGET {
                    let got = got.map(|_| ());
                    let ok = matches!(got, Err(RegionError::PinTooLarge { pages: p, budget }) if (p, budget) == (pages, BUDGET));
                    assert!(ok, "{got:?}");
                    continue;
                }
                let pin = got.unwrap_or_else(|e| panic!("pin of {len} bytes at {offset}: {e}"));
                assert_eq!((pin.len(), pin.is_empty()), (len, len == 0));
                assert_eq!(pin.as_mut_ptr().is_some(), write);
                assert_eq!(pin.as_ptr() as usize, f.regions[r].as_ptr() as usize + offset);
                pins[r].push((offset, len, pin));
            }
            Op::Unpin { r, pick: k } => {
                let r = usize::from(r);
                if !pins[r].is_empty() {
                    let at = usize::from(k) % pins[r].len();
                    drop(pins[r].swap_remove(at));
                }
            }
            Op::Reclaim { r, keep } => {
                let r = usize::from(r);
                let keep = usize::from(keep) % (BUDGET + 2);
                let region = &f.regions[r];
                let before = region.stats().resident as usize;
                let evicted = region.reclaim(keep).unwrap();
                let after = region.stats().resident as usize;
                assert_eq!(before - after, evicted);
                let want = if before <= keep { before } else { keep.max(pinned_pages(&pins[r])) };
                assert_eq!(after, want, "region {r}: reclaim({keep}) from {before}, pins {}", pinned_pages(&pins[r]));
            }
        }
        for z in 0..2 {
            resync(&f.zswaps[z], &mut models[z], written_back[z]);
        }
        written_back = written_back_now();
        check(f, &models, &contents, &pins, PagesChecked::One(step));
        // The check's region reads load pages and so evict others; a store
        // refused at the pool limit then runs the shrink worker, which may
        // write the model's entries back: the next step starts from that.
        for z in 0..2 {
            resync(&f.zswaps[z], &mut models[z], written_back[z]);
        }
        written_back = written_back_now();
    }
    drop(pins);
    // Back to no entry of the target's: each freed by its own instance.
    for (z, model) in models.iter_mut().enumerate() {
        let entries: Vec<SwpEntry> = model.drain(..).map(|l| l.entry).collect();
        let n = entries.len();
        let (freed, back) = f.zswaps[z].swap_free_batch(entries, ReleaseMode::Deferred);
        assert!(freed == n && back.is_empty());
        f.zswaps[z].check_invariants().unwrap();
        assert!(f.zswaps[z].swap_file().used_slots() <= REGION_PAGES as u64, "slots left behind");
    }
    check(f, &models, &contents, &Default::default(), PagesChecked::All);
    Report::new(&map()).check_invariants().unwrap();
    // The next input checks the regions against these first.
    *kept = contents;
}
