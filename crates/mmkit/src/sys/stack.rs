//! The order-0 cache's one type: a stack of up to [`STACK_SLOTS`] page
//! indices in 256 bytes, with two kinds of owner.
//!
//! - A pinned CPU's magazine owns its stack outright (`&mut`): pushes and
//!   pops are plain loads and stores through [`AtomicU32::get_mut`].
//! - Each CPU owns one stack per (zone, migratetype) for every thread that
//!   runs there: the restartable sequences of this layer's rseq module edit
//!   those and empty them under its stop protocol, addressing the fields by
//!   the offsets fixed here.
//!
//! Portable (no OS call): it lives in `sys` because the sequences address
//! its layout. Owns the layout and the owner's operations; it knows nothing
//! of pages beyond their indices, nor of who the owner is.

use core::sync::atomic::AtomicU32;

/// Indices one stack holds at most (the header fills the rest of 256 bytes).
pub(crate) const STACK_SLOTS: usize = 61;

/// See the module doc. The layout (`len` at 0, `stopped` at 4, `cap` at
/// 8, the items from 12) is what the rseq sequences address.
#[repr(C, align(256))]
pub(crate) struct PageStack {
    /// Indices on the stack; `items[len - 1]` is the top.
    pub(super) len: AtomicU32,
    /// Non-zero while a drainer owns a per-CPU stack (the rseq stop protocol); an
    /// owned stack never sets it.
    pub(super) stopped: AtomicU32,
    /// Indices the stack takes before a push is refused (1..=`STACK_SLOTS`).
    pub(super) cap: AtomicU32,
    pub(super) items: [AtomicU32; STACK_SLOTS],
}

const _: () = assert!(core::mem::size_of::<PageStack>() == 256);
const _: () = assert!(core::mem::offset_of!(PageStack, len) == 0);
const _: () = assert!(core::mem::offset_of!(PageStack, stopped) == 4);
const _: () = assert!(core::mem::offset_of!(PageStack, cap) == 8);
const _: () = assert!(core::mem::offset_of!(PageStack, items) == 12);

impl PageStack {
    /// An empty stack that takes up to `cap` indices (clamped to
    /// 1..=[`STACK_SLOTS`]).
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            len: AtomicU32::new(0),
            stopped: AtomicU32::new(0),
            cap: AtomicU32::new(cap.clamp(1, STACK_SLOTS) as u32),
            items: [const { AtomicU32::new(0) }; STACK_SLOTS],
        }
    }

    /// Indices on an owned stack.
    #[inline(always)]
    pub(crate) fn len(&mut self) -> usize {
        *self.len.get_mut() as usize
    }

    /// Indices on the stack, through a shared reference (one relaxed load;
    /// exact for an owned stack).
    pub(crate) fn count(&self) -> usize {
        self.len.load(core::sync::atomic::Ordering::Relaxed) as usize
    }

    /// Whether a push would be refused.
    #[inline(always)]
    pub(crate) fn is_full(&mut self) -> bool {
        *self.len.get_mut() >= *self.cap.get_mut()
    }

    /// The capacity.
    pub(crate) fn capacity(&mut self) -> usize {
        *self.cap.get_mut() as usize
    }

    /// Sets the capacity (clamped to 1..=[`STACK_SLOTS`]); indices above
    /// it stay until popped.
    pub(crate) fn set_capacity(&mut self, cap: usize) {
        *self.cap.get_mut() = cap.clamp(1, STACK_SLOTS) as u32;
    }

    /// Pops the top index of an owned stack.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<u32> {
        // An empty stack's top wraps to u32::MAX, which the slot lookup
        // refuses: one check for both.
        let top = self.len.get_mut().wrapping_sub(1);
        let item = *self.items.get_mut(top as usize)?.get_mut();
        *self.len.get_mut() = top;
        Some(item)
    }

    /// Pushes `item` on an owned stack; false (nothing changed) when full.
    #[inline(always)]
    pub(crate) fn push(&mut self, item: u32) -> bool {
        let len = *self.len.get_mut() as usize;
        if len >= *self.cap.get_mut() as usize {
            return false;
        }
        let Some(slot) = self.items.get_mut(len) else {
            return false;
        };
        *slot.get_mut() = item;
        *self.len.get_mut() += 1;
        true
    }

    /// Pushes `item` on an owned stack the caller made room on (not
    /// [`is_full`](Self::is_full)); false only past the last slot.
    #[inline(always)]
    pub(crate) fn push_with_room(&mut self, item: u32) -> bool {
        let len = *self.len.get_mut();
        let Some(slot) = self.items.get_mut(len as usize) else {
            return false;
        };
        *slot.get_mut() = item;
        *self.len.get_mut() = len + 1;
        true
    }

    /// Moves the `count` oldest indices of an owned stack (the bottom, the
    /// coldest pages) into `out` and slides the rest down; how many moved.
    pub(crate) fn take_oldest(&mut self, count: usize, out: &mut [u32]) -> usize {
        let len = self.len();
        let count = count.min(len).min(out.len());
        for (dst, src) in out.iter_mut().zip(&mut self.items[..count]) {
            *dst = *src.get_mut();
        }
        for i in count..len {
            let moved = *self.items[i].get_mut();
            *self.items[i - count].get_mut() = moved;
        }
        *self.len.get_mut() = (len - count) as u32;
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_push_pop_and_oldest() {
        let mut s = PageStack::new(4);
        assert_eq!(s.pop(), None);
        for i in 10..14 {
            assert!(s.push(i));
        }
        assert!(s.is_full());
        assert!(!s.push(99), "a full stack refuses");
        let mut out = [0; 8];
        assert_eq!(s.take_oldest(3, &mut out), 3);
        assert_eq!(&out[..3], &[10, 11, 12]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.pop(), Some(13));
        assert_eq!(s.pop(), None);
        s.set_capacity(1000);
        assert_eq!(s.capacity(), STACK_SLOTS);
    }
}
