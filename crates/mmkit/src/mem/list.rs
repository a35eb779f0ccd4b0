//! The one doubly linked list of blocks, threaded through the page
//! descriptors' link words by index (Linux's `list_head` in `struct page`,
//! without pointers): the buddy free lists and the per-CPU lists are both
//! made of it.
//!
//! Owns the head and tail of a list and the link edits; knows nothing of
//! what a list means (order, migratetype, counts) or of the state word.
//! The caller serialises access (zone lock or pageset lock).
#![deny(unsafe_code)]

use crate::mem::page::{PageDesc, PageIdx, PageTable, NIL};

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
    pub(crate) fn push_head(&mut self, pages: &PageTable, idx: PageIdx, page: &PageDesc) {
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
    pub(crate) fn push_tail(&mut self, pages: &PageTable, idx: PageIdx, page: &PageDesc) {
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
    pub(crate) fn pop_head(&mut self, pages: &PageTable) -> Option<PageIdx> {
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
    pub(crate) fn pop_tail(&mut self, pages: &PageTable) -> Option<PageIdx> {
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

    /// Takes the block whose descriptor is `page`, which is on this list,
    /// off it and clears its links.
    #[inline(always)]
    pub(crate) fn unlink(&mut self, pages: &PageTable, page: &PageDesc) {
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
    pub(crate) fn iter<'a>(&self, pages: &'a PageTable) -> impl Iterator<Item = PageIdx> + 'a {
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
    use super::*;
    use alloc::vec::Vec;

    fn collect(list: &PageList, pages: &PageTable) -> Vec<PageIdx> {
        list.iter(pages).collect()
    }

    #[test]
    fn pushes_pops_and_unlinks_keep_both_ends_right() {
        let pages = PageTable::new_zeroed(16);
        let mut list = PageList::EMPTY;
        assert!(list.is_empty());
        list.push_head(&pages, 3, pages.get(3));
        list.push_tail(&pages, 5, pages.get(5));
        list.push_head(&pages, 1, pages.get(1));
        list.push_tail(&pages, 7, pages.get(7));
        assert_eq!(collect(&list, &pages), [1, 3, 5, 7]);
        assert_eq!(list.first(), Some(1));
        list.unlink(&pages, pages.get(5));
        assert_eq!(collect(&list, &pages), [1, 3, 7]);
        list.unlink(&pages, pages.get(1));
        assert_eq!(list.first(), Some(3));
        assert_eq!(list.pop_tail(&pages), Some(7));
        assert_eq!(list.first(), Some(3));
        assert_eq!(list.pop_head(&pages), Some(3));
        assert!(list.is_empty());
        assert_eq!((list.pop_head(&pages), list.pop_tail(&pages)), (None, None));
        list.push_tail(&pages, 9, pages.get(9));
        list.unlink(&pages, pages.get(9));
        assert_eq!(list, PageList::EMPTY);
    }
}
