//! The one doubly linked list of blocks, threaded through the page
//! descriptors' link words by index (Linux's `list_head` in `struct page`,
//! without pointers): the buddy free lists and the per-CPU lists are both
//! made of it.
//!
//! Owns the head and tail of a list and the link edits; knows nothing of
//! what a list means (order, migratetype, counts) or of the state word.
//! The caller serialises access (zone lock or pageset lock).
#![deny(unsafe_code)]

use crate::mem::page::{Descs, PageDesc, PageIdx, NIL};

/// Head and tail of one list of blocks (`NIL` when empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageList {
    head: PageIdx,
    tail: PageIdx,
}

impl Default for PageList {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl PageList {
    /// A list with no blocks.
    pub(crate) const EMPTY: Self = Self { head: NIL, tail: NIL };

    /// Whether the list has no blocks.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// First block, if any.
    #[inline(always)]
    pub(crate) fn first(&self) -> Option<PageIdx> {
        (self.head != NIL).then_some(self.head)
    }

    /// Puts block `idx`, whose descriptor the caller has in hand as
    /// `page`, first. (Passing the descriptor saves a second table lookup:
    /// after the caller's store to it, the table's bounds would be
    /// reloaded and checked again.)
    #[inline(always)]
    pub(crate) fn push_head(&mut self, pages: Descs<'_>, idx: PageIdx, page: &PageDesc) {
        let head = self.head;
        page.set_prev(NIL);
        page.set_next(head);
        if head == NIL {
            self.tail = idx;
        } else {
            pages.get(head).set_prev(idx);
        }
        self.head = idx;
    }

    /// Puts block `idx` (descriptor `page`) last.
    #[inline(always)]
    pub(crate) fn push_tail(&mut self, pages: Descs<'_>, idx: PageIdx, page: &PageDesc) {
        let tail = self.tail;
        page.set_next(NIL);
        page.set_prev(tail);
        if tail == NIL {
            self.head = idx;
        } else {
            pages.get(tail).set_next(idx);
        }
        self.tail = idx;
    }

    /// Takes the first block off.
    #[inline(always)]
    pub(crate) fn pop_head(&mut self, pages: Descs<'_>) -> Option<PageIdx> {
        let idx = self.head;
        if idx == NIL {
            return None;
        }
        let next = pages.get(idx).next();
        self.head = next;
        if next == NIL {
            self.tail = NIL;
        } else {
            pages.get(next).set_prev(NIL);
        }
        Some(idx)
    }

    /// Takes the last block off.
    #[inline(always)]
    pub(crate) fn pop_tail(&mut self, pages: Descs<'_>) -> Option<PageIdx> {
        let idx = self.tail;
        if idx == NIL {
            return None;
        }
        let prev = pages.get(idx).prev();
        self.tail = prev;
        if prev == NIL {
            self.head = NIL;
        } else {
            pages.get(prev).set_next(NIL);
        }
        Some(idx)
    }

    /// Takes blocks off the front until `take` has accepted `want` of them
    /// or the list runs out; returns how many `take` accepted. `take` sees
    /// each block after its successor has been read, so it may reuse the
    /// block's link words. The list is cut once at the end (one write to the
    /// new first block), where `pop_head` per block writes each successor's
    /// back link. The bulk allocator's pop (Linux's `alloc_pages_bulk`
    /// takes pages one at a time with `__rmqueue_pcplist`); handing each
    /// block over as it is reached lets its preparation overlap the load of
    /// the next link.
    #[inline(always)]
    pub(crate) fn pop_head_run(
        &mut self,
        pages: Descs<'_>,
        want: usize,
        mut take: impl FnMut(PageIdx, &PageDesc) -> bool,
    ) -> (usize, u32) {
        // The table's slice in registers: the relaxed stores `take` makes
        // would otherwise make the compiler reload it for every block.
        let descs = pages.all();
        let mut idx = self.head;
        let mut left = want;
        let mut refused = 0;
        while left > 0 && idx != NIL {
            let page = &descs[idx as usize];
            let next = page.next();
            // The walk is a chain of dependent loads. Lists are mostly runs
            // of neighbouring pages (a refill appends a split block in
            // order, a batch free pushes its pages in order), so the block
            // eight steps on along the current direction is likely to come
            // soon: fetch its descriptor's line now. Only a hint; a wrong
            // guess costs a useless prefetch (which never faults).
            let ahead = next.wrapping_add(next.wrapping_sub(idx).wrapping_mul(8));
            crate::sys::prefetch(descs.as_ptr().wrapping_add(ahead as usize));
            if take(idx, page) {
                left -= 1;
            } else {
                refused += 1;
            }
            idx = next;
        }
        self.head = idx;
        if idx == NIL {
            self.tail = NIL;
        } else {
            descs[idx as usize].set_prev(NIL);
        }
        (want - left, (want - left + refused) as u32)
    }

    /// Pushes blocks `idxs` first, one after the other, as that many
    /// `push_head` calls would (the last one ends up first), writing each
    /// block's links once: the batch's neighbours are each other, so only
    /// the old first block's back link is written outside it. The batched
    /// counterpart of `push_head`, for Linux's `free_unref_folios`.
    #[inline]
    pub(crate) fn push_head_all(&mut self, pages: Descs<'_>, idxs: &[PageIdx]) {
        let (Some(&first), Some(&last)) = (idxs.first(), idxs.last()) else {
            return;
        };
        let descs = pages.all();
        let mut next = self.head;
        for (k, &idx) in idxs.iter().enumerate() {
            let page = &descs[idx as usize];
            page.set_next(next);
            page.set_prev(idxs.get(k + 1).copied().unwrap_or(NIL));
            next = idx;
        }
        if self.head == NIL {
            self.tail = first;
        } else {
            descs[self.head as usize].set_prev(first);
        }
        self.head = last;
    }

    /// Takes the block whose descriptor is `page`, which is on this list,
    /// off it and clears its links.
    #[inline(always)]
    pub(crate) fn unlink(&mut self, pages: Descs<'_>, page: &PageDesc) {
        let (prev, next) = (page.prev(), page.next());
        if prev == NIL {
            self.head = next;
        } else {
            pages.get(prev).set_next(next);
        }
        if next == NIL {
            self.tail = prev;
        } else {
            pages.get(next).set_prev(prev);
        }
        page.set_next(NIL);
        page.set_prev(NIL);
    }

    /// Blocks head to tail.
    pub(crate) fn iter<'a>(&self, pages: Descs<'a>) -> impl Iterator<Item = PageIdx> + 'a {
        let mut cur = self.head;
        core::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let here = cur;
            cur = pages.get(cur).next();
            Some(here)
        })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::mem::page::PageTable;
    use alloc::collections::VecDeque;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn collect(list: &PageList, pages: Descs<'_>) -> Vec<PageIdx> {
        list.iter(pages).collect()
    }

    #[test]
    fn pushes_pops_and_unlinks_keep_both_ends_right() {
        let table = PageTable::try_new_zeroed(16).unwrap();
        let pages = table.descs();
        let mut list = PageList::EMPTY;
        assert!(list.is_empty());
        list.push_head(pages, 3, pages.get(3));
        list.push_tail(pages, 5, pages.get(5));
        list.push_head(pages, 1, pages.get(1));
        list.push_tail(pages, 7, pages.get(7));
        assert_eq!(collect(&list, pages), [1, 3, 5, 7]);
        assert_eq!(list.first(), Some(1));
        list.unlink(pages, pages.get(5));
        assert_eq!(collect(&list, pages), [1, 3, 7]);
        list.unlink(pages, pages.get(1));
        assert_eq!(list.first(), Some(3));
        assert_eq!(list.pop_tail(pages), Some(7));
        assert_eq!(list.first(), Some(3));
        assert_eq!(list.pop_head(pages), Some(3));
        assert!(list.is_empty());
        assert_eq!((list.pop_head(pages), list.pop_tail(pages)), (None, None));
        list.push_tail(pages, 9, pages.get(9));
        list.unlink(pages, pages.get(9));
        assert_eq!(list, PageList::EMPTY);
    }

    /// Both directions of the list against the model, and the ends.
    fn check(list: &PageList, pages: Descs<'_>, model: &VecDeque<PageIdx>) {
        assert_eq!(collect(list, pages), model.iter().copied().collect::<Vec<_>>());
        let mut back = Vec::new();
        let mut cur = list.tail;
        while cur != NIL {
            back.push(cur);
            cur = pages.get(cur).prev();
        }
        back.reverse();
        assert_eq!(back, collect(list, pages), "back links agree with forward links");
        assert_eq!(list.first(), model.front().copied());
        if let Some(&first) = model.front() {
            assert_eq!(pages.get(first).prev(), NIL);
        }
        if let Some(&last) = model.back() {
            assert_eq!(pages.get(last).next(), NIL);
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        PushHead,
        PushTail,
        PopHead,
        PopTail,
        /// Pop a run of up to `want` accepted blocks, refusing those whose
        /// index is a multiple of `refuse_every`.
        PopRun {
            want: usize,
            refuse_every: u32,
        },
        /// Push `len` fresh blocks in front in one call.
        PushAll {
            len: u32,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::PushHead),
            Just(Op::PushTail),
            Just(Op::PopHead),
            Just(Op::PopTail),
            (0usize..16, 2u32..6).prop_map(|(want, refuse_every)| Op::PopRun { want, refuse_every }),
            (0u32..12).prop_map(|len| Op::PushAll { len }),
        ]
    }

    proptest! {
        /// Runs popped and pushed whole behave as the same blocks popped
        /// and pushed one at a time (a deque model), and leave every link
        /// consistent.
        #[test]
        fn runs_match_a_deque(ops in prop::collection::vec(op(), 1..80)) {
            let table = PageTable::try_new_zeroed(1024).unwrap();
            let pages = table.descs();
            let mut list = PageList::EMPTY;
            let mut model = VecDeque::new();
            let mut fresh = 0..1024u32;
            for op in ops {
                match op {
                    Op::PushHead => {
                        let idx = fresh.next().unwrap();
                        list.push_head(pages, idx, pages.get(idx));
                        model.push_front(idx);
                    }
                    Op::PushTail => {
                        let idx = fresh.next().unwrap();
                        list.push_tail(pages, idx, pages.get(idx));
                        model.push_back(idx);
                    }
                    Op::PopHead => prop_assert_eq!(list.pop_head(pages), model.pop_front()),
                    Op::PopTail => prop_assert_eq!(list.pop_tail(pages), model.pop_back()),
                    Op::PopRun { want, refuse_every } => {
                        let mut seen = Vec::new();
                        let (taken, popped) = list.pop_head_run(pages, want, |idx, page| {
                            // The successor has been read: the link words
                            // are the caller's (the allocator zeroes them).
                            page.set_private(u64::MAX);
                            seen.push(idx);
                            idx % refuse_every != 0
                        });
                        let mut expect = Vec::new();
                        let mut accepted = 0;
                        while accepted < want {
                            let Some(idx) = model.pop_front() else { break };
                            expect.push(idx);
                            accepted += usize::from(idx % refuse_every != 0);
                        }
                        prop_assert_eq!((taken, popped as usize), (accepted, expect.len()));
                        prop_assert_eq!(seen, expect);
                    }
                    Op::PushAll { len } => {
                        let idxs: Vec<PageIdx> = (0..len).map(|_| fresh.next().unwrap()).collect();
                        list.push_head_all(pages, &idxs);
                        for &idx in &idxs {
                            model.push_front(idx);
                        }
                    }
                }
                check(&list, pages, &model);
            }
        }
    }
}
