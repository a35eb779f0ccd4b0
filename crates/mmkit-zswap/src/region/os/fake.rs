//! An in-memory fake of the operating system ([`Os`]) for the paging
//! policy's tests: a region's pages as the kernel holds them — mapped or
//! not, write-protected, poisoned, their bytes — the memory areas a copy
//! may not cross, the handler thread's queue of raw faults and its kicks,
//! and a log of every call the pager made ([`Call`]).
//!
//! The program's side is here too: raw touches that fault as the hardware
//! would ([`Fake::touch`]), or, in the handler-thread mode, wait for the
//! handler as a thread blocked on a userfaultfd does
//! ([`Fake::touch_blocking`]); pages dropped behind the region's back
//! ([`Fake::program_drop`], `MADV_DONTNEED`); areas split under it
//! ([`Fake::split_area_at`], an `madvise` on part of the region).
//!
//! No `unsafe`, no system call: the policy's tests run where userfaultfd
//! is unavailable, and under Miri. An accessor that touches a page the
//! pager has not mapped (or writes one it has not made writable) is a bug
//! of the pager's, and panics here.

use super::{CopyError, FaultKind, Os, Ready};
use crate::PAGE_SIZE;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering::Acquire};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One call the pager made, as the fake saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// `UFFDIO_COPY` of `pages` pages at `first`; what it answered.
    Copy { first: usize, pages: usize, write_protect: bool, answer: Result<usize, CopyError> },
    /// `UFFDIO_ZEROPAGE`.
    ZeroFill(usize),
    /// `UFFDIO_POISON`.
    Poison(usize),
    /// `UFFDIO_WRITEPROTECT` on.
    WriteProtect { first: usize, pages: usize },
    /// `UFFDIO_WRITEPROTECT` off.
    Unprotect { first: usize, pages: usize },
    /// `UFFDIO_WAKE`.
    Wake { first: usize, pages: usize },
    /// `MADV_DONTNEED` of one page.
    DropPage(usize),
    /// One `process_madvise` for these runs.
    DropRuns(Vec<(usize, usize)>),
    /// A victim read through the kernel.
    ReadPage(usize),
}

/// A page as the kernel holds it.
#[derive(Clone, Default)]
struct Page {
    mapped: bool,
    protected: bool,
    poisoned: bool,
    /// Its bytes (`None`: zeros).
    bytes: Option<Box<[u8; PAGE_SIZE]>>,
}

impl Page {
    fn word(&self, at: usize) -> u64 {
        self.bytes.as_ref().map_or(0, |b| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or([0; 8])))
    }

    fn bytes_mut(&mut self) -> &mut [u8; PAGE_SIZE] {
        self.bytes.get_or_insert_with(|| Box::new([0; PAGE_SIZE]))
    }
}

struct World {
    pages: Vec<Page>,
    /// Pages at which a new memory area starts (besides 0).
    area_starts: BTreeSet<usize>,
    calls: Vec<Call>,
    kicks: u64,
    faults: VecDeque<(usize, FaultKind)>,
    /// Wake-ups of each page so far: a blocked raw touch looks again after
    /// one of its page (as `UFFDIO_WAKE` wakes the waiters of its range
    /// only).
    wakes: Vec<u64>,
    /// The handler thread waits for work (it has finished what it had).
    handler_idle: bool,
}

/// What a raw touch did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Touch {
    /// The access ran: the word read (or the one written).
    Done(u64),
    /// It faulted (the page is missing, or written while protected).
    Fault(FaultKind),
    /// It raised `SIGBUS` (the page is poisoned).
    Sigbus,
}

/// The fake operating system of one region.
pub(crate) struct Fake {
    world: Mutex<World>,
    /// The handler thread waits on it for faults and kicks.
    handler: Condvar,
    /// Blocked raw touches wait on it for wake-ups.
    woken: Condvar,
}

impl Fake {
    /// A region of `pages` pages, none mapped, one memory area.
    pub(crate) fn new(pages: usize) -> Self {
        let world = World {
            pages: vec![Page::default(); pages],
            area_starts: BTreeSet::new(),
            calls: Vec::new(),
            kicks: 0,
            faults: VecDeque::new(),
            wakes: vec![0; pages],
            handler_idle: false,
        };
        Self { world: Mutex::new(world), handler: Condvar::new(), woken: Condvar::new() }
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The calls made so far, and forgets them.
    pub(crate) fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.world().calls)
    }

    /// Whether page `index` is mapped and write-protected.
    pub(crate) fn is_protected(&self, index: usize) -> bool {
        let w = self.world();
        w.pages[index].mapped && w.pages[index].protected
    }

    /// A raw touch of the word at `offset` (8-aligned): a read, or a write
    /// of `value`, as the hardware would do it.
    pub(crate) fn touch(&self, offset: usize, value: Option<u64>) -> Touch {
        let mut w = self.world();
        let (index, at) = (offset / PAGE_SIZE, offset % PAGE_SIZE);
        let page = &mut w.pages[index];
        if page.poisoned {
            return Touch::Sigbus;
        }
        if !page.mapped {
            return Touch::Fault(if value.is_some() { FaultKind::MissingWrite } else { FaultKind::Missing });
        }
        match value {
            None => Touch::Done(page.word(at)),
            Some(_) if page.protected => Touch::Fault(FaultKind::WriteProtected),
            Some(v) => {
                page.bytes_mut()[at..at + 8].copy_from_slice(&v.to_ne_bytes());
                Touch::Done(v)
            }
        }
    }

    /// A raw touch in the handler-thread mode: a fault is queued for the
    /// handler thread and the touch waits for a wake-up, then runs again,
    /// until it completes or raises `SIGBUS`. Panics when no wake-up comes
    /// within `patience` (a lost wake: the real thread would hang).
    pub(crate) fn touch_blocking(&self, offset: usize, value: Option<u64>, patience: Duration) -> Touch {
        let deadline = Instant::now() + patience;
        loop {
            match self.touch(offset, value) {
                Touch::Fault(kind) => {
                    let index = offset / PAGE_SIZE;
                    let mut w = self.world();
                    w.faults.push_back((index, kind));
                    self.handler.notify_all();
                    let seen = w.wakes[index];
                    while w.wakes[index] == seen {
                        let left = deadline.saturating_duration_since(Instant::now());
                        assert!(!left.is_zero(), "a raw touch at {offset} was never woken");
                        w = self.woken.wait_timeout(w, left).unwrap_or_else(|p| p.into_inner()).0;
                    }
                }
                done => return done,
            }
        }
    }

    /// Waits until the handler thread has finished the faults it was given
    /// (a woken thread runs on while the handler tidies up after the wake:
    /// tests that check the region's state between steps wait for it).
    /// Panics after `patience`.
    pub(crate) fn wait_for_idle_handler(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        let mut w = self.world();
        while !(w.handler_idle && w.faults.is_empty()) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the handler thread never went idle");
            w = self.woken.wait_timeout(w, left.min(Duration::from_millis(10))).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// The program drops page `index` behind the region's back
    /// (`MADV_DONTNEED`).
    pub(crate) fn program_drop(&self, index: usize) {
        self.world().pages[index] = Page::default();
    }

    /// The program splits the region's memory area at page `index` (an
    /// `madvise`, `mlock` or `mprotect` on part of it): a copy may not
    /// cross it.
    pub(crate) fn split_area_at(&self, index: usize) {
        self.world().area_starts.insert(index);
    }

    fn woke(&self, w: &mut World, first: usize, n: usize) {
        for wakes in &mut w.wakes[first..first + n] {
            *wakes += 1;
        }
        self.woken.notify_all();
    }
}

impl Os for Fake {
    type SignalsBlocked = ();

    fn pages(&self) -> usize {
        self.world().pages.len()
    }

    fn read(&self, offset: usize, out: &mut [u8]) {
        let w = self.world();
        let page = &w.pages[offset / PAGE_SIZE];
        assert!(page.mapped, "an accessor read page {} that is not mapped", offset / PAGE_SIZE);
        let at = offset % PAGE_SIZE;
        match &page.bytes {
            Some(b) => out.copy_from_slice(&b[at..at + out.len()]),
            None => out.fill(0),
        }
    }

    fn write(&self, offset: usize, data: &[u8]) {
        let mut w = self.world();
        let page = &mut w.pages[offset / PAGE_SIZE];
        assert!(page.mapped && !page.protected, "an accessor wrote page {} unmapped or protected", offset / PAGE_SIZE);
        let at = offset % PAGE_SIZE;
        page.bytes_mut()[at..at + data.len()].copy_from_slice(data);
    }

    fn load_u64(&self, offset: usize) -> u64 {
        let mut word = [0u8; 8];
        self.read(offset, &mut word);
        u64::from_ne_bytes(word)
    }

    fn store_u64(&self, offset: usize, value: u64) {
        self.write(offset, &value.to_ne_bytes());
    }

    fn copy(&self, first: usize, src: &[u8], write_protect: bool, wake: bool) -> Result<usize, CopyError> {
        let mut w = self.world();
        let n = src.len() / PAGE_SIZE;
        // A copy may not cross the end of the memory area it starts in
        // (the kernel's ENOENT): refused whole.
        let answer = if w.area_starts.range(first + 1..first + n).next().is_some() {
            Err(CopyError::Refused)
        } else {
            let mut placed = 0;
            while placed < n && !w.pages[first + placed].mapped {
                let mut bytes = Box::new([0u8; PAGE_SIZE]);
                bytes.copy_from_slice(&src[placed * PAGE_SIZE..(placed + 1) * PAGE_SIZE]);
                w.pages[first + placed] =
                    Page { mapped: true, protected: write_protect, poisoned: false, bytes: Some(bytes) };
                placed += 1;
            }
            Ok(placed)
        };
        w.calls.push(Call::Copy { first, pages: n, write_protect, answer });
        if let (true, Ok(placed @ 1..)) = (wake, answer) {
            self.woke(&mut w, first, placed);
        }
        answer
    }

    fn zero_fill(&self, index: usize) -> bool {
        let mut w = self.world();
        w.calls.push(Call::ZeroFill(index));
        let page = &mut w.pages[index];
        if !page.mapped {
            *page = Page { mapped: true, ..Page::default() };
        }
        true
    }

    fn poison(&self, index: usize) {
        let mut w = self.world();
        w.calls.push(Call::Poison(index));
        if !w.pages[index].mapped {
            w.pages[index].poisoned = true;
        }
        self.woke(&mut w, index, 1);
    }

    fn write_protect(&self, first: usize, n: usize) -> bool {
        let mut w = self.world();
        w.calls.push(Call::WriteProtect { first, pages: n });
        for page in &mut w.pages[first..first + n] {
            page.protected = page.mapped;
        }
        true
    }

    fn unprotect(&self, first: usize, n: usize, wake: bool) {
        let mut w = self.world();
        w.calls.push(Call::Unprotect { first, pages: n });
        for page in &mut w.pages[first..first + n] {
            page.protected = false;
        }
        if wake {
            self.woke(&mut w, first, n);
        }
    }

    fn wake(&self, first: usize, n: usize) {
        let mut w = self.world();
        w.calls.push(Call::Wake { first, pages: n });
        self.woke(&mut w, first, n);
    }

    fn drop_page(&self, index: usize) {
        let mut w = self.world();
        w.calls.push(Call::DropPage(index));
        w.pages[index] = Page::default();
    }

    fn drop_runs(&self, runs: &[(usize, usize)], dropped: &mut [bool]) {
        let mut w = self.world();
        w.calls.push(Call::DropRuns(runs.to_vec()));
        for (k, &(first, n)) in runs.iter().enumerate() {
            w.pages[first..first + n].fill(Page::default());
            dropped[k] = true;
        }
    }

    fn read_page(&self, index: usize, out: &mut [u8; PAGE_SIZE]) -> bool {
        let mut w = self.world();
        w.calls.push(Call::ReadPage(index));
        let page = &w.pages[index];
        if !page.mapped {
            return false;
        }
        match &page.bytes {
            Some(b) => out.copy_from_slice(&b[..]),
            None => out.fill(0),
        }
        true
    }

    fn is_mapped(&self, index: usize) -> bool {
        self.world().pages[index].mapped
    }

    fn mapped_pages(&self) -> std::io::Result<usize> {
        Ok(self.world().pages.iter().filter(|p| p.mapped).count())
    }

    fn kick(&self) {
        self.world().kicks += 1;
        self.handler.notify_all();
    }

    fn wait(&self, poll_only: bool) -> Ready {
        let mut w = self.world();
        if !poll_only {
            while w.faults.is_empty() && w.kicks == 0 {
                w.handler_idle = true;
                self.woken.notify_all();
                w = self.handler.wait_timeout(w, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
            }
        }
        w.handler_idle = false;
        Ready { faults: !w.faults.is_empty(), kicked: w.kicks != 0 }
    }

    fn drain_kicks(&self) {
        self.world().kicks = 0;
    }

    fn read_faults(&self, out: &mut Vec<(usize, FaultKind)>) {
        out.extend(self.world().faults.drain(..));
    }

    fn sleep_while(word: &AtomicU32, expected: u32) {
        if word.load(Acquire) == expected {
            std::thread::yield_now();
        }
    }

    fn wake_sleepers(_: &AtomicU32) {}

    fn block_signals() {}
}
