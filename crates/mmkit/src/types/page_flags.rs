//! What a page descriptor says about a page: its state bits
//! ([`PageFlags`]) and the tag of the layer that owns it ([`PageOwner`]).
//! Plain values; the descriptor layout that stores them is `mem::page`'s.

use core::num::NonZeroU8;

/// Page state bits kept in the descriptor.
///
/// `Buddy`, `Head`, `Tail`, `Allocated`, `Hole` and `Reserved` are owned by
/// the allocator. The "check at free" bits (`Locked` … `Mapped`) belong to the
/// embedder, which sets them with
/// [`PageAllocator::set_page_flags`](crate::PageAllocator::set_page_flags) to
/// say what a page is being used for; a page freed with any of them still set
/// is a bad page. `HwPoison` is set by
/// [`memory_failure`](crate::PageAllocator::memory_failure).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PageFlags(u32);

impl PageFlags {
    /// The page heads a free block on a buddy free list.
    pub const BUDDY: Self = Self(1 << 0);
    /// Head of a compound page.
    pub const HEAD: Self = Self(1 << 1);
    /// Tail of a compound page; its head is recorded in the descriptor.
    pub const TAIL: Self = Self(1 << 2);
    /// Hardware reported the page bad; it never returns to the free lists.
    pub const HWPOISON: Self = Self(1 << 3);
    /// Never given to the allocator (firmware, kernel image, …).
    pub const RESERVED: Self = Self(1 << 4);
    /// No memory behind this PFN: a hole in the map.
    pub const HOLE: Self = Self(1 << 5);
    /// First page of a block handed out by the allocator and not yet freed.
    pub const ALLOCATED: Self = Self(1 << 6);
    /// Embedder state: page lock held.
    pub const LOCKED: Self = Self(1 << 7);
    /// Embedder state: on an LRU list.
    pub const LRU: Self = Self(1 << 8);
    /// Embedder state: private data attached.
    pub const PRIVATE: Self = Self(1 << 9);
    /// Embedder state: under writeback.
    pub const WRITEBACK: Self = Self(1 << 10);
    /// Embedder state: owned by a slab cache.
    pub const SLAB: Self = Self(1 << 11);
    /// Embedder state: on the active LRU.
    pub const ACTIVE: Self = Self(1 << 12);
    /// Embedder state: unevictable.
    pub const UNEVICTABLE: Self = Self(1 << 13);
    /// Embedder state: mlocked.
    pub const MLOCKED: Self = Self(1 << 14);
    /// Embedder state: mapped into an address space (Linux's `page->mapping`).
    pub const MAPPED: Self = Self(1 << 15);
    /// The page heads a free block held on a per-CPU list (not on the buddy
    /// lists, not counted as zone-free).
    pub const PCP: Self = Self(1 << 16);
    /// The block belongs to a layer above the allocator (its
    /// [`PageOwner`](crate::PageOwner) tag is in the descriptor): held by
    /// that layer (refcount 0) or handed out by it (refcount 1). Only the
    /// owner takes it back; the ordinary free paths refuse it.
    pub const OWNED: Self = Self(1 << 17);
    /// An order-0 page a [`PinnedCpu`](crate::PinnedCpu)'s magazine handed
    /// out: only that CPU's handle frees it (with plain stores, no atomic);
    /// every other path refuses it until the handle hands it over
    /// ([`PinnedCpu::hand_over`](crate::PinnedCpu::hand_over)). (Bit 23: the
    /// bits between are the descriptor's order field.)
    pub const LOCAL: Self = Self(1 << 23);

    /// Flags that must all be clear when a page is freed.
    pub const CHECK_AT_FREE: Self = Self(
        Self::LOCKED.0
            | Self::LRU.0
            | Self::PRIVATE.0
            | Self::WRITEBACK.0
            | Self::SLAB.0
            | Self::ACTIVE.0
            | Self::UNEVICTABLE.0
            | Self::MLOCKED.0
            | Self::MAPPED.0,
    );
    /// Flags an embedder may set or clear through the public API.
    pub const EMBEDDER_SETTABLE: Self = Self::CHECK_AT_FREE;
    /// No flags.
    pub const EMPTY: Self = Self(0);

    /// Raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// Builds flags from raw bits.
    pub const fn from_bits(bits: u32) -> Self {
        Self(bits)
    }
    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether any bit of `other` is set.
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }
    /// Bits of either.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
    /// Bits in both.
    pub const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }
    /// Bits of `self` not in `other`.
    pub const fn difference(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
}

impl core::ops::BitOr for PageFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl core::fmt::Debug for PageFlags {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        const NAMES: [&str; 18] = [
            "buddy",
            "head",
            "tail",
            "hwpoison",
            "reserved",
            "hole",
            "allocated",
            "locked",
            "lru",
            "private",
            "writeback",
            "slab",
            "active",
            "unevictable",
            "mlocked",
            "mapped",
            "pcp",
            "owned",
        ];
        let mut first = true;
        for (bit, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if self.intersects(Self::LOCAL) {
            if !first {
                f.write_str("|")?;
            }
            f.write_str("local")?;
            first = false;
        }
        if first {
            f.write_str("(none)")?;
        }
        Ok(())
    }
}

/// The tag of a layer that owns pages (1 ..= [`PageOwner::MAX`]) in one
/// map: a label that says whose a page is, as Linux's page types do.
///
/// A tag is not a right: it is made only inside the crate, from the
/// [`OwnerKey`](crate::OwnerKey) a map issued
/// ([`OwnerKey::owner`](crate::OwnerKey::owner)), and what it guards
/// (taking a handed-out block back) asks for the key, not the tag. So no
/// code outside the crate can make a tag, and holding one grants nothing.
///
/// ```compile_fail
/// let forged = mmkit::PageOwner::new(1); // private: tags come from keys
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PageOwner(NonZeroU8);

impl PageOwner {
    /// Largest tag the descriptor can hold: a map issues at most this
    /// many keys at once.
    pub const MAX: u8 = 15;

    /// The smallest tag.
    pub(crate) const MIN_TAG: Self = Self(NonZeroU8::MIN);

    /// Tag `id`; `None` for 0 or above [`MAX`](Self::MAX).
    pub(crate) const fn new(id: u8) -> Option<Self> {
        match NonZeroU8::new(id) {
            Some(id) if id.get() <= Self::MAX => Some(Self(id)),
            _ => None,
        }
    }

    /// The tag's number.
    pub const fn id(self) -> u8 {
        self.0.get()
    }
}
