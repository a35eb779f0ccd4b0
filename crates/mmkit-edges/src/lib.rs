//! # mmkit-edges — the enumerating tests of mmkit's edges
//!
//! The four rules of `docs/architecture.md` ("Safe at the edges") are
//! checked here, across the crates, by tests that enumerate instead of
//! listing examples: every bare-PFN call of [`mmkit::PFN_CALLS`] against a
//! block of every [`OwnedKind`] (`tests/pfn_calls.rs`), a panic at every
//! callback invocation of a scripted workload per callback kind
//! (`tests/panics.rs`), a re-entrant call from every callback kind under
//! a watchdog (`tests/reentry.rs`), and each example of issue 44
//! (`tests/examples.rs`). This library holds what they and the fuzz target
//! `callbacks` share: the owned kinds and a callback script.
//!
//! It must not be a dependency of any library crate: it exists for tests.
#![deny(unsafe_code)]

use mmkit::Blocks;
use mmkit::{Contig, Gfp, MigrateType, PageAllocator, Pfn, X86Frames};
use mmkit_quicklist::Quicklists;
use mmkit_zsmalloc::ZsPool;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use x86_64::structures::paging::{FrameAllocator, PhysFrame, Size4KiB};

/// A kind of block that a handle owns, so that a bare PFN must grant
/// nothing over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnedKind {
    /// A [`mmkit::PageGuard`] of order 2.
    Guard,
    /// A layer's [`mmkit::PageBlock`] of order 1 (frozen, owned).
    Block,
    /// A [`mmkit::ContigRange`] of 16 pages.
    ContigRange,
    /// A 4 KiB frame of an [`X86Frames`] (handed out: one reference).
    Frame,
    /// A page a shared quicklist handed out (one reference, owned).
    QuicklistPage,
    /// A page a pinned quicklist handle handed out (frozen, owned).
    PinnedQuicklistPage,
    /// A page of a zsmalloc pool's zspage.
    ZspagePage,
}

impl OwnedKind {
    /// Every kind.
    pub const ALL: [OwnedKind; 7] = [
        OwnedKind::Guard,
        OwnedKind::Block,
        OwnedKind::ContigRange,
        OwnedKind::Frame,
        OwnedKind::QuicklistPage,
        OwnedKind::PinnedQuicklistPage,
        OwnedKind::ZspagePage,
    ];
}

/// An owned block as `body` sees it: its first page, pages, and the order
/// a bare-PFN free of it would name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedBlock {
    /// First page.
    pub pfn: Pfn,
    /// Pages in the block.
    pub nr_pages: u64,
    /// The order of the block (0 for a contiguous range's pages).
    pub order: u32,
}

/// Makes a block of `kind` on `mm` (a real-memory map), runs `body` on it,
/// then has its owner give it back; returns what `body` returned.
///
/// # Panics
/// When the block cannot be made or its owner's free fails afterwards
/// (what the tests check: a bare-PFN call must not have broken it).
// One `unsafe` call: the frame adapter's deallocation, whose contract holds.
#[allow(unsafe_code)]
pub fn with_owned<R>(mm: &Arc<PageAllocator>, kind: OwnedKind, body: impl FnOnce(OwnedBlock) -> R) -> R {
    let blocks = Blocks::new(mm);
    let gfp = Gfp::KERNEL;
    match kind {
        OwnedKind::Guard => {
            let guard = mm.alloc_pages_guarded(gfp, 2).expect("a guard");
            let out = body(OwnedBlock { pfn: guard.pfn(), nr_pages: 4, order: 2 });
            guard.free().expect("the guard's free");
            out
        }
        OwnedKind::Block => {
            let key = blocks.new_owner_key().expect("an owner key");
            let block = blocks.alloc_block(&key, gfp, 1).expect("a block");
            let out = body(OwnedBlock { pfn: block.pfn(), nr_pages: 2, order: 1 });
            blocks.free_block(block).expect("the owner's free");
            assert!(blocks.release_owner_key(key));
            out
        }
        OwnedKind::ContigRange => {
            let key = blocks.new_owner_key().expect("an owner key");
            let contig = Contig::new(mm);
            let start = Pfn(mm.start_pfn().0 + 4096);
            let range = contig
                .alloc_contig_block(&key, start, Pfn(start.0 + 16), MigrateType::Movable, gfp)
                .expect("a contiguous range");
            let out = body(OwnedBlock { pfn: start, nr_pages: 16, order: 0 });
            let summary = contig.free_contig_block(range).expect("the owner's free");
            assert_eq!(summary.freed + summary.hwpoisoned, 16, "every page of the range back: {summary:?}");
            assert!(blocks.release_owner_key(key));
            out
        }
        OwnedKind::Frame => {
            let mut frames = X86Frames::new(&**mm, gfp).expect("a frame adapter");
            let frame: PhysFrame<Size4KiB> = frames.allocate_frame().expect("a frame");
            let out = body(OwnedBlock { pfn: Pfn(frame.start_address().as_u64() >> 12), nr_pages: 1, order: 0 });
            // SAFETY: nothing maps the frame; the test only named its PFN.
            unsafe { frames.try_deallocate(frame) }.expect("the adapter's free");
            frames.into_inner();
            out
        }
        OwnedKind::QuicklistPage => {
            let ql = Quicklists::new(mm.clone(), 1).expect("quicklists");
            let pfn = ql.quicklist_alloc(0, gfp, None).expect("a quicklist page");
            let out = body(OwnedBlock { pfn, nr_pages: 1, order: 0 });
            ql.quicklist_free_page(0, None, pfn).expect("the quicklist's free");
            out
        }
        OwnedKind::PinnedQuicklistPage => {
            let ql = Quicklists::new(mm.clone(), 1).expect("quicklists");
            let mut cpu = ql.pin_cpu(0).expect("a pinned quicklist handle");
            let pfn = cpu.alloc(0, gfp, None).expect("a quicklist page");
            let out = body(OwnedBlock { pfn, nr_pages: 1, order: 0 });
            cpu.free_page(0, None, pfn).expect("the handle's free");
            out
        }
        OwnedKind::ZspagePage => {
            let pool = ZsPool::zs_create_pool("edges", mm.clone()).expect("a pool");
            let handle = pool.zs_malloc_copy(&[0x5a; 700], Gfp::NOIO, 0).expect("an object");
            let pfn = zspage_pfn(mm, &pool);
            let out = body(OwnedBlock { pfn, nr_pages: 1, order: 0 });
            let mut back = [0u8; 700];
            assert_eq!(pool.zs_obj_read(&handle, &mut back), Ok(700));
            assert!(back.iter().all(|&b| b == 0x5a), "the object's bytes are untouched");
            pool.zs_free(handle).map_err(|(e, _)| e).expect("the pool's free");
            pool.check_invariants().expect("the pool's invariants");
            out
        }
    }
}

/// The first page a pool's zspages hold.
fn zspage_pfn(mm: &PageAllocator, pool: &ZsPool) -> Pfn {
    (mm.start_pfn().0..mm.end_pfn().0)
        .map(Pfn)
        .find(|&pfn| Blocks::new(mm).page_owner(pfn) == Some(pool.owner()))
        .expect("the pool holds a page")
}

/// A callback script: counts the invocations of the callbacks it is
/// asked about and says which one is to panic (the `k`-th, counting from
/// 1; 0 for none). Shared by reference with the callbacks (`Sync`).
#[derive(Debug, Default)]
pub struct Script {
    calls: AtomicU64,
    panic_at: AtomicU64,
}

/// The payload of a scripted panic, to tell it from a real one.
#[derive(Debug)]
pub struct ScriptedPanic(pub u64);

impl Script {
    /// A script that panics at invocation `k` (0: never).
    pub fn panic_at(k: u64) -> Self {
        Self { calls: AtomicU64::new(0), panic_at: AtomicU64::new(k) }
    }

    /// One invocation; panics with [`ScriptedPanic`] if it is the one.
    pub fn tick(&self) {
        let n = self.calls.fetch_add(1, Relaxed) + 1;
        if n == self.panic_at.load(Relaxed) {
            std::panic::panic_any(ScriptedPanic(n));
        }
    }

    /// Invocations so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Relaxed)
    }
}

/// Runs `f`, catching a [`ScriptedPanic`] (and only that: any other panic
/// goes on); true if the script's panic happened.
pub fn catch_scripted(f: impl FnOnce()) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(()) => false,
        Err(payload) if payload.is::<ScriptedPanic>() => true,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// Silences the default panic message of scripted panics (the tests make
/// thousands); other panics print as usual.
pub fn quiet_scripted_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<ScriptedPanic>() {
                default(info);
            }
        }));
    });
}

/// Runs `f` on a thread of its own and fails (naming `what`) if it does not
/// end within `seconds`: a hang is a finding, not a stuck test run. The
/// thread is left behind on a hang (the test fails either way).
///
/// # Panics
/// On a hang, or with `f`'s own panic.
pub fn within<R: Send + 'static>(what: &str, seconds: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(std::time::Duration::from_secs(seconds)) {
        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Ok(Ok(out)) => out,
            Ok(Err(payload)) | Err(payload) => std::panic::resume_unwind(payload),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no answer within {seconds} s (a hang)"),
    }
}
