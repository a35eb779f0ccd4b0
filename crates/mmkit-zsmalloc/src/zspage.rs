//! One zspage: a chain of order-0 pages holding equal-sized objects, each
//! (outside huge classes) starting with an 8-byte header that names the
//! handle slot of the object in it, and the byte copies in and out of a
//! chain.
//!
//! Owns a zspage's counts (objects in use, handed out, backed, freed) and
//! the arithmetic of where an object's bytes lie. The chain's pages and
//! the stack of freed objects live in the class's flat stores (one slice
//! of each per zspage id, `size_class`), so that making or freeing a
//! zspage allocates nothing. Knows nothing of classes' lists or locks:
//! its owner serialises access.
//!
//! # Pages arrive as objects need them
//!
//! Linux's `alloc_zspage` takes every page of the chain at once, so each
//! class carries up to a chain's worth of pages that hold nothing (on 256
//! MiB of real binaries written to zram, about 230 pages: 0.7 % of the
//! pool). Here a zspage starts with its first page and takes the next one
//! when the next never-used object reaches into it. Objects are handed out
//! freed ones first (a stack, the last freed on top), then never-used ones
//! in address order (`0..used` have been handed out at some time), so only
//! the next never-used object can lack pages, and the chain is always a
//! prefix of the full one. An object is *backed* when all its bytes lie in
//! pages the chain has.
//!
//! # Headers
//!
//! A header is written when its object is handed out and left as it is
//! when the object is freed (a free touches no page: on the release path
//! the object's page is cold, and the write cost a cache miss and a page
//! lookup per free). So a header below `used` names a slot, but the slot
//! may have moved on: compaction takes an object as live only when its
//! slot is live and points back at it (`size_class`). Never-used objects'
//! headers are whatever the page held, and nothing reads them.

use crate::class::{ClassShape, ZS_HANDLE_SIZE};
use mmkit::Blocks;
use mmkit::{PageAllocator, PageBlock};

/// One zspage of a class. A zspage id whose record has no pages names no
/// zspage (the id is free for reuse).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Zspage {
    /// Objects in use.
    pub(crate) inuse: u16,
    /// Objects handed out at some time: `0..used`.
    pub(crate) used: u16,
    /// Objects whose bytes all lie in the chain's pages: `0..backed`.
    pub(crate) backed: u16,
    /// Objects on the zspage's stack of freed ones.
    pub(crate) nfreed: u16,
    /// Pages in the chain (0: no zspage).
    pub(crate) npages: u8,
    /// Fullness group the zspage is listed in, and its position there.
    pub(crate) group: u8,
    /// Whether a drain freed objects of it and has yet to settle it.
    pub(crate) touched: bool,
    pub(crate) pos: u32,
    /// The handle header of a huge zspage's one object (0 while free).
    pub(crate) huge_handle: u64,
}

impl Zspage {
    /// Whether the id names a zspage.
    #[inline]
    pub(crate) fn is_live(&self) -> bool {
        self.npages != 0
    }

    /// Objects whose bytes all lie in the chain's pages: with `pages`
    /// pages, those that end within them.
    pub(crate) fn backed_objs(shape: ClassShape, page_size: usize, pages: usize) -> usize {
        (pages * page_size / shape.size).min(shape.objs_per_zspage)
    }

    /// Whether the next free object can be handed out as the chain is.
    #[inline]
    pub(crate) fn has_backed_room(&self) -> bool {
        self.nfreed != 0 || self.used < self.backed
    }

    /// Hands out a free object (the zspage has a backed one): the last
    /// freed, else the next never used. `freed[base..]` is the zspage's
    /// stack.
    #[inline(always)]
    pub(crate) fn take_free(&mut self, freed: &[u16], base: usize) -> u16 {
        let obj = if self.nfreed != 0 {
            self.nfreed -= 1;
            freed[base + usize::from(self.nfreed)]
        } else {
            self.used += 1;
            self.used - 1
        };
        self.inuse += 1;
        obj
    }

    /// Takes back object `obj`, pushed on the zspage's stack
    /// `freed[base..]`.
    #[inline(always)]
    pub(crate) fn put_free(&mut self, freed: &mut [u16], base: usize, obj: u16) {
        freed[base + usize::from(self.nfreed)] = obj;
        self.nfreed += 1;
        self.inuse -= 1;
    }

    /// Whether the next free object needs another page first.
    pub(crate) fn wants_page(&self, objs: u16) -> bool {
        self.nfreed == 0 && self.used == self.backed && self.used < objs
    }
}

/// Where chain offset `at` lies: page and offset in it.
#[inline]
fn split(at: usize, page_shift: u32) -> (usize, usize) {
    (at >> page_shift, at & ((1 << page_shift) - 1))
}

/// Writes the object at chain offset `at` of `pages`: its header first,
/// then `data` after it; one page lookup when header and data lie in one
/// page, two when the data straddles a page boundary (a header never
/// does: objects are 16-byte multiples).
#[inline]
pub(crate) fn write_object(
    mm: &PageAllocator,
    pages: &mut [Option<PageBlock>],
    page_shift: u32,
    at: usize,
    header: u64,
    data: &[u8],
) {
    let (page, start) = split(at, page_shift);
    let Some(bytes) = pages.get_mut(page).and_then(Option::as_mut).and_then(|b| Blocks::new(mm).block_bytes_mut(b))
    else {
        return;
    };
    let Some((head, rest)) = bytes.get_mut(start..).and_then(|b| b.split_first_chunk_mut::<ZS_HANDLE_SIZE>()) else {
        return;
    };
    *head = header.to_ne_bytes();
    if data.is_empty() {
        // `zs_malloc`: the header only (no call into `memcpy` for nothing).
        return;
    }
    let first = data.len().min(rest.len());
    rest[..first].copy_from_slice(&data[..first]);
    if first < data.len() {
        // The rest lies at the start of the next page (an object is
        // smaller than a page).
        let tail = &data[first..];
        if let Some(next) =
            pages.get_mut(page + 1).and_then(Option::as_mut).and_then(|b| Blocks::new(mm).block_bytes_mut(b))
        {
            if let Some(dst) = next.get_mut(..tail.len()) {
                dst.copy_from_slice(tail);
            }
        }
    }
}

/// The 8-byte header at chain offset `at` (an object's start).
pub(crate) fn header_at(mm: &PageAllocator, pages: &[Option<PageBlock>], page_shift: u32, at: usize) -> u64 {
    let mut word = [0; ZS_HANDLE_SIZE];
    read_at(mm, pages, page_shift, at, &mut word);
    u64::from_ne_bytes(word)
}

/// The `len` bytes at chain offset `at` when they lie in one page: no
/// copy needed.
pub(crate) fn contiguous<'a>(
    mm: &'a PageAllocator,
    pages: &'a [Option<PageBlock>],
    page_shift: u32,
    at: usize,
    len: usize,
) -> Option<&'a [u8]> {
    let (page, start) = split(at, page_shift);
    if start + len > 1 << page_shift {
        return None;
    }
    Blocks::new(mm).block_bytes(pages.get(page)?.as_ref()?).and_then(|bytes| bytes.get(start..start + len))
}

/// Copies `dst.len()` bytes from chain offset `at`, page by page (an
/// object may straddle two).
pub(crate) fn read_at(mm: &PageAllocator, pages: &[Option<PageBlock>], page_shift: u32, at: usize, dst: &mut [u8]) {
    let page_size = 1usize << page_shift;
    let mut done = 0;
    while done < dst.len() {
        let (page, start) = split(at + done, page_shift);
        let n = (page_size - start).min(dst.len() - done);
        if let Some(bytes) = pages.get(page).and_then(Option::as_ref).and_then(|b| Blocks::new(mm).block_bytes(b)) {
            dst[done..done + n].copy_from_slice(&bytes[start..start + n]);
        }
        done += n;
    }
}

/// Copies `src` to chain offset `at`, page by page.
pub(crate) fn write_at(mm: &PageAllocator, pages: &mut [Option<PageBlock>], page_shift: u32, at: usize, src: &[u8]) {
    let page_size = 1usize << page_shift;
    let mut done = 0;
    while done < src.len() {
        let (page, start) = split(at + done, page_shift);
        let n = (page_size - start).min(src.len() - done);
        if let Some(bytes) =
            pages.get_mut(page).and_then(Option::as_mut).and_then(|b| Blocks::new(mm).block_bytes_mut(b))
        {
            bytes[start..start + n].copy_from_slice(&src[done..done + n]);
        }
        done += n;
    }
}
