//! A zspage: a chain of order-0 pages from the page allocator holding the
//! objects of one size class, and the byte copies into and out of objects
//! that may straddle two of its pages.
//!
//! Owns the chain (as [`PageBlock`]s), the stack of free object indices and
//! the in-use count. Every object starts with an 8-byte header: its handle
//! slot plus one while it is allocated, 0 while it is free — what lets
//! compaction walk a zspage and find its live objects (Linux's
//! `obj_allocated`). Huge classes (one object per page) keep no header;
//! their one handle lives in the zspage. Knows nothing of classes' lists
//! or locks: its owner serialises access.
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
//! pages the chain has. A never-used object's header is whatever the page
//! held: readers of headers look only below `used` (a freed object's
//! header is cleared when it is freed), so a new page needs no clearing.

use crate::class::{ClassShape, ZS_HANDLE_SIZE};
use mmkit::{PageAllocator, PageBlock};

/// One zspage of a class.
pub(crate) struct Zspage {
    pub(crate) pages: Vec<PageBlock>,
    /// Objects freed since they were handed out, the next to use last.
    freed: Vec<u16>,
    /// Objects handed out at some time: `0..used`.
    used: u16,
    /// Objects whose bytes all lie in the chain's pages: `0..backed`.
    backed: u16,
    /// Objects the zspage has room for.
    objs: u16,
    pub(crate) inuse: u16,
    /// Fullness group the zspage is listed in, and its position there.
    pub(crate) group: u8,
    pub(crate) pos: u32,
    /// The handle of a huge zspage's one object (0 while free).
    pub(crate) huge_handle: u64,
}

impl Zspage {
    /// A zspage with every object free and only `first` of its pages:
    /// the rest are attached as objects need them.
    pub(crate) fn new(mm: &PageAllocator, first: PageBlock, shape: ClassShape) -> Self {
        let mut zspage = Self {
            pages: Vec::with_capacity(shape.pages_per_zspage),
            freed: Vec::new(),
            used: 0,
            backed: 0,
            objs: shape.objs_per_zspage as u16,
            inuse: 0,
            group: 0,
            pos: 0,
            huge_handle: 0,
        };
        zspage.attach_page(mm, shape, first);
        zspage
    }

    /// Objects whose bytes all lie in the chain's pages: with `pages`
    /// pages, those that end within them.
    pub(crate) fn backed_objs(shape: ClassShape, page_size: usize, pages: usize) -> usize {
        (pages * page_size / shape.size).min(shape.objs_per_zspage)
    }

    /// Objects handed out at some time (`0..used`): the only ones whose
    /// headers mean something.
    pub(crate) fn used(&self) -> u16 {
        self.used
    }

    /// Whether the next free object can be handed out as the chain is.
    #[inline]
    pub(crate) fn has_backed_room(&self) -> bool {
        !self.freed.is_empty() || self.used < self.backed
    }

    /// Whether the next free object needs another page first.
    pub(crate) fn wants_page(&self) -> bool {
        self.freed.is_empty() && self.used == self.backed && self.used < self.objs
    }

    /// Appends the chain's next page.
    pub(crate) fn attach_page(&mut self, mm: &PageAllocator, shape: ClassShape, block: PageBlock) {
        let page_size = mm.geometry().page_size() as usize;
        self.pages.push(block);
        self.backed = Self::backed_objs(shape, page_size, self.pages.len()) as u16;
    }

    /// Takes a free object and marks it allocated to `handle`; `None` when
    /// none is free or the next one needs a page first.
    #[inline]
    pub(crate) fn alloc_obj(&mut self, mm: &PageAllocator, shape: ClassShape, handle: u64) -> Option<u16> {
        let idx = match self.freed.pop() {
            Some(idx) => idx,
            None if self.used < self.backed => {
                self.used += 1;
                self.used - 1
            }
            None => return None,
        };
        self.inuse += 1;
        self.set_header(mm, shape, idx, handle);
        Some(idx)
    }

    /// Frees object `idx` (its header is cleared).
    #[inline]
    pub(crate) fn free_obj(&mut self, mm: &PageAllocator, shape: ClassShape, idx: u16) {
        self.set_header(mm, shape, idx, 0);
        self.freed.push(idx);
        self.inuse -= 1;
    }

    /// The handle in object `idx`'s header (0: free).
    pub(crate) fn header(&self, mm: &PageAllocator, shape: ClassShape, idx: u16) -> u64 {
        if shape.is_huge() {
            return self.huge_handle;
        }
        let mut word = [0; ZS_HANDLE_SIZE];
        read_at(mm, &self.pages, usize::from(idx) * shape.size, &mut word);
        u64::from_ne_bytes(word)
    }

    #[inline]
    fn set_header(&mut self, mm: &PageAllocator, shape: ClassShape, idx: u16, handle: u64) {
        if shape.is_huge() {
            self.huge_handle = handle;
        } else {
            // A header never straddles two pages (objects are 16-byte
            // multiples): one page's bytes, no copy loop.
            let at = usize::from(idx) * shape.size;
            let page_size = mm.geometry().page_size() as usize;
            let (page, start) = (at / page_size, at % page_size);
            if let Some(bytes) = self.pages.get_mut(page).and_then(|block| mm.block_bytes_mut(block)) {
                if let Some(header) = bytes.get_mut(start..start + ZS_HANDLE_SIZE) {
                    header.copy_from_slice(&handle.to_ne_bytes());
                }
            }
        }
    }

    /// Byte offset of object `idx`'s payload in the chain.
    pub(crate) fn payload_offset(shape: ClassShape, idx: u16) -> usize {
        let header = if shape.is_huge() { 0 } else { ZS_HANDLE_SIZE };
        usize::from(idx) * shape.size + header
    }

    /// Copies `dst.len()` bytes from chain offset `offset`.
    pub(crate) fn read(&self, mm: &PageAllocator, offset: usize, dst: &mut [u8]) {
        read_at(mm, &self.pages, offset, dst);
    }

    /// Copies `src` to chain offset `offset`.
    pub(crate) fn write(&mut self, mm: &PageAllocator, offset: usize, src: &[u8]) {
        write_at(mm, &mut self.pages, offset, src);
    }

    /// The `len` bytes at `offset` when they lie in one page: no copy needed.
    pub(crate) fn contiguous<'a>(&'a self, mm: &'a PageAllocator, offset: usize, len: usize) -> Option<&'a [u8]> {
        let page_size = mm.geometry().page_size() as usize;
        let (page, start) = (offset / page_size, offset % page_size);
        if start + len > page_size {
            return None;
        }
        mm.block_bytes(self.pages.get(page)?).map(|bytes| &bytes[start..start + len])
    }
}

/// Copies from the chain, page by page (an object may straddle two).
fn read_at(mm: &PageAllocator, pages: &[PageBlock], offset: usize, dst: &mut [u8]) {
    let page_size = mm.geometry().page_size() as usize;
    let mut done = 0;
    while done < dst.len() {
        let at = offset + done;
        let (page, start) = (at / page_size, at % page_size);
        let n = (page_size - start).min(dst.len() - done);
        if let Some(bytes) = pages.get(page).and_then(|block| mm.block_bytes(block)) {
            dst[done..done + n].copy_from_slice(&bytes[start..start + n]);
        }
        done += n;
    }
}

/// Copies into the chain, page by page.
fn write_at(mm: &PageAllocator, pages: &mut [PageBlock], offset: usize, src: &[u8]) {
    let page_size = mm.geometry().page_size() as usize;
    let mut done = 0;
    while done < src.len() {
        let at = offset + done;
        let (page, start) = (at / page_size, at % page_size);
        let n = (page_size - start).min(src.len() - done);
        if let Some(bytes) = pages.get_mut(page).and_then(|block| mm.block_bytes_mut(block)) {
            bytes[start..start + n].copy_from_slice(&src[done..done + n]);
        }
        done += n;
    }
}
