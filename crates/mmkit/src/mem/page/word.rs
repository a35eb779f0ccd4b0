//! [`DescWord`]: a descriptor's whole state-and-refcount word as a value.
//!
//! Owns the composition of whole words and the tests other layers run on
//! them (one mask and compare each). The bit layout is the parent module's;
//! nothing outside `mem::page` builds a word from bits or stores one except
//! through the named transitions on `PageDesc` (`hand_out`,
//! `free_from_local`, `drop_last_reference`).

use super::{
    is_local, owned_state, refcount_of, state_word_of, PageFlags, FLAGS_MASK, LOCAL_BIT, ORDER_MASK, ORDER_SHIFT,
    RC_SHIFT, TAG_MASK,
};

/// A descriptor's state (flags, order, migratetype tag, owner) and its
/// refcount, or with `LOCAL` its CPU, as one value; see the state table in
/// the module doc of `mem::page`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct DescWord(pub(super) u64);

impl DescWord {
    /// No state and no reference: a page between `free_pages_prepare` and
    /// its insertion into a free list (and a free block's tail pages).
    pub(crate) const PREPARED: Self = Self(0);

    /// The whole word for `state` and `refcount`.
    #[inline(always)]
    pub(super) const fn of(state: u32, refcount: u32) -> Self {
        Self(state as u64 | (refcount as u64) << RC_SHIFT)
    }

    /// An order-0 page of migratetype `tag` on a per-CPU list or cache:
    /// `PCP`, no reference.
    #[inline(always)]
    pub(crate) const fn cached(tag: u8) -> Self {
        Self::cached_block(0, tag)
    }

    /// The head of a block of `order` and migratetype `tag` on a per-CPU
    /// list or cache: `PCP`, no reference.
    #[inline(always)]
    pub(crate) const fn cached_block(order: u32, tag: u8) -> Self {
        Self::of(state_word_of(PageFlags::PCP.bits(), order, tag), 0)
    }

    /// An allocated block's head: `flags` (which include `ALLOCATED`, and
    /// `HEAD` for a compound page), `order`, `tag`, and `refcount`
    /// references (0: frozen).
    #[inline(always)]
    pub(crate) const fn allocated(flags: PageFlags, order: u32, tag: u8, refcount: u32) -> Self {
        Self::of(state_word_of(flags.bits(), order, tag), refcount)
    }

    /// [`allocated`](Self::allocated), marked as owned by layer `owner`.
    #[inline(always)]
    pub(crate) const fn owned(flags: PageFlags, order: u32, tag: u8, owner: u8, refcount: u32) -> Self {
        Self::of(owned_state(state_word_of(flags.bits(), order, tag), owner), refcount)
    }

    /// [`allocated`](Self::allocated) and `LOCAL` to CPU `cpu`: the CPU
    /// takes the refcount's place (the block has exactly one reference,
    /// its owner's), so every CPU number fits.
    #[inline(always)]
    pub(crate) const fn local(flags: PageFlags, order: u32, tag: u8, cpu: usize) -> Self {
        Self::of(state_word_of(flags.bits(), order, tag) | LOCAL_BIT, cpu as u32)
    }

    /// Whether this is an order-0 page with `refcount` references (0:
    /// frozen) and no flag but `ALLOCATED` (so not `LOCAL`, owned,
    /// compound, poisoned or carrying a check-at-free flag), whatever its
    /// tag: the batched frees' test for a page that needs none of
    /// `free_pages_prepare`'s diagnosis.
    #[inline(always)]
    pub(crate) const fn is_plain_order0(self, refcount: u32) -> bool {
        const MASK: u64 = DescWord::of(FLAGS_MASK | ORDER_MASK, u32::MAX).0;
        self.0 & MASK == DescWord::of(PageFlags::ALLOCATED.bits(), refcount).0
    }

    /// Whether this is a non-compound block of `order` (below 32) with
    /// exactly one reference and no flag but `ALLOCATED`, whatever its tag.
    #[inline(always)]
    pub(crate) const fn is_plain_block(self, order: u32) -> bool {
        const MASK: u64 = !(TAG_MASK as u64);
        self.0 & MASK == DescWord::of(PageFlags::ALLOCATED.bits() | (order << ORDER_SHIFT), 1).0
    }

    /// Whether this is a plain block of `order` (below 32) `LOCAL` to CPU
    /// `cpu`, whatever its tag: what an owner that holds the block's zone
    /// locked may free with a plain store.
    #[inline(always)]
    pub(crate) const fn is_local_block(self, order: u32, cpu: usize) -> bool {
        const MASK: u64 = !(TAG_MASK as u64);
        self.0 & MASK == DescWord::local(PageFlags::ALLOCATED, order, 0, cpu).0
    }

    /// The reference count: 1 for a `LOCAL` word, whose count field holds
    /// its CPU.
    #[inline(always)]
    pub(crate) const fn refcount(self) -> u32 {
        if is_local(self.0) {
            1
        } else {
            refcount_of(self.0)
        }
    }

    /// Whether the word carries `HWPOISON`.
    #[inline(always)]
    pub(crate) const fn poisoned(self) -> bool {
        self.0 & PageFlags::HWPOISON.bits() as u64 != 0
    }

    /// The word without `HWPOISON`.
    #[inline(always)]
    pub(crate) const fn without_poison(self) -> Self {
        Self(self.0 & !(PageFlags::HWPOISON.bits() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_words_keep_every_cpu_and_no_refcount() {
        for cpu in [0, 31, 32, 8191] {
            let w = DescWord::local(PageFlags::ALLOCATED, 3, 2, cpu);
            assert!(w.is_local_block(3, cpu));
            assert!(!w.is_local_block(3, cpu ^ 1) && !w.is_local_block(2, cpu));
            assert!(!w.is_plain_block(3) && !w.is_plain_order0(1), "a LOCAL block is not plain");
        }
    }

    #[test]
    fn plain_tests_ignore_the_tag_and_nothing_else() {
        for tag in 0..8 {
            assert!(DescWord::allocated(PageFlags::ALLOCATED, 0, tag, 1).is_plain_order0(1));
            assert!(DescWord::allocated(PageFlags::ALLOCATED, 0, tag, 0).is_plain_order0(0));
            assert!(DescWord::allocated(PageFlags::ALLOCATED, 4, tag, 1).is_plain_block(4));
        }
        assert!(!DescWord::allocated(PageFlags::ALLOCATED, 0, 0, 2).is_plain_order0(1));
        assert!(!DescWord::allocated(PageFlags::ALLOCATED | PageFlags::HEAD, 2, 0, 1).is_plain_block(2));
        assert!(!DescWord::owned(PageFlags::ALLOCATED, 0, 0, 5, 1).is_plain_order0(1));
        assert!(!DescWord::cached(1).is_plain_order0(0));
        let poisoned = DescWord::allocated(PageFlags::ALLOCATED | PageFlags::HWPOISON, 0, 0, 1);
        assert!(!poisoned.is_plain_order0(1) && poisoned.poisoned());
        assert_eq!(poisoned.without_poison(), DescWord::allocated(PageFlags::ALLOCATED, 0, 0, 1));
    }
}
