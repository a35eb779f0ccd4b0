//! Page descriptors: one 16-byte record per page frame, indexed by PFN.
//!
//! Owns the layout of a descriptor (refcount, flags, order, free-list links or
//! private word) and the table that holds them. It knows nothing about zones,
//! free lists or migratetypes beyond storing the few bits the buddy layer asks
//! it to keep; every policy lives above it.
//!
//! # Layout
//!
//! ```text
//! word 0    link_next  free-list successor (index) | tail: head index | private (low)
//! word 1    link_prev  free-list predecessor       |                    private (high)
//! words 2-3 rc_state   bits 0..32 the state word, 32..64 the refcount,
//!                      or with `LOCAL` the CPU (the refcount is then 1)
//!
//! state     bits 0..18 PageFlags, 18..23 order, 23 LOCAL, 24..27 migratetype tag,
//!           27 `REPORTED` (free page reporting, below), 28..32 owner tag
//!           (with `OWNED`)
//! ```
//!
//! # States and transitions
//!
//! Other layers never compose a word from bits: they build a [`DescWord`]
//! with its named constructors and change a descriptor through the named
//! transitions below (the column on the right).
//!
//! ```text
//! state          word (state | count half)              enters through
//! prepared       0 | 0                                  set_free_state (free_pages_prepare),
//!                                                       drop_last_reference / free_from_local
//!                                                       to DescWord::PREPARED
//! buddy head     BUDDY, order, list tag [, REPORTED]|0  set_free_state, under the zone lock
//! cached         PCP, order, tag | 0                    set_free_state, or from allocated by
//!                                                       drop_last_reference(_, DescWord::cached)
//! allocated      ALLOCATED [HEAD], order, tag | refs    hand_out(DescWord::allocated); refs move
//!                (0 refs: frozen)                       by try_get / try_put / refcount_exchange
//! LOCAL          ALLOCATED LOCAL, order, tag | CPU      hand_out(DescWord::local); left only by
//!                                                       free_from_local (owner) or clear_local
//! owned          ALLOCATED OWNED, order, tag, owner|refs try_set_owner, hand_out(DescWord::owned)
//! compound tail  TAIL | 0, link_next = head             set_state, with its head
//! out of service RESERVED [HOLE, HWPOISON] | 0          set_state (map setup, memory_failure)
//! ```
//!
//! Every read-modify-write that takes or drops a reference refuses a
//! `LOCAL` word (below), and `drop_last_reference` is one compare-and-swap
//! from exactly the word its caller checked.
//!
//! Linux spends 64 bytes per page; mmkit spends 16 (checked by a test), so a
//! metadata-only map of 1 TiB of 4 KiB pages costs 4 GiB of descriptors.
//!
//! Every field is an atomic accessed with `Relaxed` ordering. On the
//! architectures we target a relaxed load or store compiles to a plain move,
//! so this costs nothing, and it lets the table be shared between threads
//! without `unsafe`: the zone lock (or a per-CPU lock) that protects a page's
//! list membership provides the ordering, and the refcount is a true atomic.
//!
//! # Why the refcount and the state share one word
//! A page a pinned CPU hands out from its magazine carries `LOCAL` and that
//! CPU's number (in place of the refcount, which is 1 while the page is
//! `LOCAL`, so every CPU number fits and no state bit is shared); its
//! owner frees it with a plain load and store of this
//! word, no atomic read-modify-write (`page_alloc::cache::pinned`). That is sound
//! because every read-modify-write that could take a page away from its
//! owner — a reference taken ([`try_get`](PageDesc::try_get)), dropped
//! ([`try_put`](PageDesc::try_put)), exchanged, or a frozen page's claim —
//! is one compare-and-swap of the whole word that refuses a `LOCAL` word:
//! none can succeed between the owner's load and its store. (Flag updates
//! by `memory_failure` or the embedder can still be overwritten by that
//! store; hardware poison is kept in `page_alloc::hwpoison`'s pending set
//! for that reason.)
#![deny(unsafe_code)]

pub use crate::types::page_flags::PageFlags;
use core::sync::atomic::Ordering::Relaxed;
#[cfg(not(all(loom, feature = "loom-desc")))]
use core::sync::atomic::{AtomicU32, AtomicU64};
// The descriptor protocol's loom model (`--cfg loom` with the `loom-desc` feature, see
// the tests at the end) swaps in loom's atomics; nothing else changes.
#[cfg(all(loom, feature = "loom-desc"))]
use loom::sync::atomic::{AtomicU32, AtomicU64};

mod word;
pub(crate) use word::DescWord;

/// Index of a descriptor in the table (PFN minus the map's first PFN).
pub(crate) type PageIdx = u32;

/// "No page" in an index-linked list.
pub(crate) const NIL: PageIdx = u32::MAX;

const FLAGS_MASK: u32 = 0x3ffff | LOCAL_BIT;
const ORDER_SHIFT: u32 = 18;
const ORDER_MASK: u32 = 0x1f << ORDER_SHIFT;
const LOCAL_BIT: u32 = 1 << 23;
const TAG_SHIFT: u32 = 24;
const TAG_MASK: u32 = 0x7 << TAG_SHIFT;
const OWNER_SHIFT: u32 = 28;
const OWNER_MASK: u32 = 0xf << OWNER_SHIFT;
/// Linux's `PageReported` (`page_alloc::reporting`): on a free block's head
/// (with `BUDDY`), its memory was given back to the OS and not touched
/// since; on a head without `BUDDY`, the block is off the lists while a
/// reporting pass discards it. It costs no bit of `PageFlags` and no store
/// of its own: every path that takes a block off the lists or links one
/// writes the whole state word and so clears it.
const REPORTED_BIT: u32 = 1 << 27;
const RC_SHIFT: u32 = 32;
const STATE_MASK: u64 = u32::MAX as u64;

#[inline(always)]
const fn state_of(w: u64) -> u32 {
    w as u32
}

#[inline(always)]
const fn refcount_of(w: u64) -> u32 {
    (w >> RC_SHIFT) as u32
}

#[inline(always)]
const fn is_local(w: u64) -> bool {
    state_of(w) & LOCAL_BIT != 0
}

/// One page frame's descriptor. See the module doc for the layout.
#[derive(Default)]
#[repr(C)]
pub(crate) struct PageDesc {
    link_next: AtomicU32,
    link_prev: AtomicU32,
    rc_state: AtomicU64,
}

#[cfg(not(all(loom, feature = "loom-desc")))]
const _: () = assert!(core::mem::size_of::<PageDesc>() == 16);

// SAFETY: PageDesc is two AtomicU32s and an AtomicU64 (`repr(C)`, not
// zero-sized); all-zero bytes are a valid value of each. The promise
// `rawmem`'s tables rely on; declared here, beside the layout it is about.
#[allow(unsafe_code)]
unsafe impl crate::mem::rawmem::Zeroable for PageDesc {}

impl PageDesc {
    #[inline(always)]
    fn state(&self) -> u32 {
        state_of(self.rc_state.load(Relaxed))
    }
    /// Replaces the state word, keeping the refcount. A plain load and
    /// store: callers own the page's state (it is free, being prepared or
    /// being freed, so no reference can be taken or dropped meanwhile).
    #[inline(always)]
    fn store_state(&self, state: u32) {
        let w = self.rc_state.load(Relaxed);
        self.rc_state.store((w & !STATE_MASK) | state as u64, Relaxed);
    }
    /// Atomically applies `f` to the state word, keeping the refcount.
    #[inline]
    fn update_state(&self, order: core::sync::atomic::Ordering, f: impl Fn(u32) -> Option<u32>) -> bool {
        self.rc_state.fetch_update(order, Relaxed, |w| f(state_of(w)).map(|s| (w & !STATE_MASK) | s as u64)).is_ok()
    }
    #[inline]
    pub(crate) fn flags(&self) -> PageFlags {
        PageFlags::from_bits(self.state() & FLAGS_MASK)
    }
    #[inline]
    pub(crate) fn has(&self, flag: PageFlags) -> bool {
        self.flags().intersects(flag)
    }
    /// Sets or clears flags with an atomic read-modify-write, for state the
    /// embedder changes while other threads may touch the same descriptor.
    pub(crate) fn update_flags_atomic(&self, set: PageFlags, clear: PageFlags) {
        let _ = self.update_state(Relaxed, |s| Some((s | set.bits()) & !clear.bits()));
    }
    /// [`update_flags_atomic`](Self::update_flags_atomic) unless the page
    /// is `OWNED`, in the same read-modify-write (so an owner that adopts
    /// the page meanwhile never finds flags set behind its back); false,
    /// with nothing changed, for an owned page.
    pub(crate) fn update_flags_unless_owned(&self, set: PageFlags, clear: PageFlags) -> bool {
        let owned = PageFlags::OWNED.bits();
        self.update_state(Relaxed, |s| (s & owned == 0).then_some((s | set.bits()) & !clear.bits()))
    }
    /// Atomically clears `ALLOCATED`; true for the one caller that saw it
    /// set. This is what makes two racing frees of one block safe. A
    /// `LOCAL` page is refused: only its CPU frees it.
    pub(crate) fn clear_allocated(&self) -> bool {
        let bit = PageFlags::ALLOCATED.bits();
        self.update_state(core::sync::atomic::Ordering::AcqRel, |s| {
            (s & bit != 0 && s & LOCAL_BIT == 0).then_some(s & !bit)
        })
    }
    /// Atomically sets `flag`; true if it was clear before.
    pub(crate) fn set_flag_once(&self, flag: PageFlags) -> bool {
        let bit = flag.bits();
        self.update_state(core::sync::atomic::Ordering::AcqRel, |s| (s & bit == 0).then_some(s | bit))
    }
    /// The owner tag (0 when no layer owns the page).
    #[inline]
    pub(crate) fn owner(&self) -> u8 {
        let s = self.state();
        if s & PageFlags::OWNED.bits() == 0 {
            return 0;
        }
        ((s & OWNER_MASK) >> OWNER_SHIFT) as u8
    }
    /// Marks the page as owned by `owner` (one atomic update).
    pub(crate) fn set_owner(&self, owner: u8) {
        let _ = self.update_state(Relaxed, |s| Some(owned_state(s, owner)));
    }
    /// Marks the page as owned by `owner` unless it already is owned or
    /// has no reference; true for the one caller that marked it. A page
    /// with no reference is frozen: its owner is freeing it (it cleared its
    /// mark just before), and marking it again then made that free find an
    /// owned page (two racing take-backs, `tests/blocks.rs`).
    pub(crate) fn try_set_owner(&self, owner: u8) -> bool {
        self.rc_state
            .fetch_update(core::sync::atomic::Ordering::AcqRel, Relaxed, |w| {
                let s = state_of(w);
                (s & (PageFlags::OWNED.bits() | LOCAL_BIT) == 0 && refcount_of(w) != 0)
                    .then(|| (w & !STATE_MASK) | owned_state(s, owner) as u64)
            })
            .is_ok()
    }
    /// Clears the owner mark and tag.
    pub(crate) fn clear_owner(&self) {
        let _ = self.update_state(Relaxed, |s| Some(s & !(PageFlags::OWNED.bits() | OWNER_MASK)));
    }
    /// Flags and order from a single load of the state word.
    #[inline]
    pub(crate) fn flags_and_order(&self) -> (PageFlags, u32) {
        let s = self.state();
        (PageFlags::from_bits(s & FLAGS_MASK), (s & ORDER_MASK) >> ORDER_SHIFT)
    }
    /// Order of the block this page heads (free or allocated).
    #[inline]
    pub(crate) fn order(&self) -> u32 {
        (self.state() & ORDER_MASK) >> ORDER_SHIFT
    }
    /// Migratetype tag: for a free block the list it is on, for an allocated
    /// block the type it was requested as.
    #[inline]
    pub(crate) fn tag(&self) -> u8 {
        ((self.state() & TAG_MASK) >> TAG_SHIFT) as u8
    }
    /// The order and list tag of a free block's head (a page with
    /// `BUDDY`), from one load of its word: a buddy merge looks at all
    /// three, and as separate atomic loads they were three.
    #[inline(always)]
    pub(crate) fn free_block(&self) -> Option<(u32, u8)> {
        let s = self.state();
        (s & PageFlags::BUDDY.bits() != 0)
            .then_some(((s & ORDER_MASK) >> ORDER_SHIFT, ((s & TAG_MASK) >> TAG_SHIFT) as u8))
    }
    /// The CPU a `LOCAL` page belongs to.
    #[inline]
    pub(crate) fn local_cpu(&self) -> Option<usize> {
        let w = self.rc_state.load(Relaxed);
        is_local(w).then_some(refcount_of(w) as usize)
    }
    /// Whether the page carries `REPORTED` (see [`REPORTED_BIT`]): on a
    /// free block's head, its memory was given back to the OS.
    #[inline]
    pub(crate) fn is_reported(&self) -> bool {
        self.state() & REPORTED_BIT != 0
    }
    /// Marks the free block this page heads as reported. The caller holds
    /// the zone lock (free state changes only under it); one
    /// compare-and-swap all the same, like the embedder's flag updates.
    pub(crate) fn set_reported(&self) {
        let _ = self.update_state(Relaxed, |s| {
            (s & (PageFlags::BUDDY.bits() | LOCAL_BIT) == PageFlags::BUDDY.bits()).then_some(s | REPORTED_BIT)
        });
    }
    /// The state of the head of a block of `order` a reporting pass has
    /// taken off the free lists: `REPORTED` without `BUDDY` (refcount 0).
    /// Nothing hands such a block out or merges with it; the pass returns
    /// it through the ordinary free path, which overwrites this word.
    #[inline]
    pub(crate) fn set_reporting_state(&self, order: u32) {
        debug_assert!(order < 32);
        self.rc_state.store((REPORTED_BIT | (order << ORDER_SHIFT)) as u64, Relaxed);
    }
    /// Undoes [`set_reporting_state`](Self::set_reporting_state) before the
    /// block goes back through the free path, which expects a prepared head
    /// (no state, order 0): a merge with a lower buddy never writes this
    /// page again. Keeps any flag set meanwhile (`memory_failure`'s).
    pub(crate) fn clear_reporting_state(&self) {
        let _ = self.update_state(Relaxed, |s| Some(s & !(REPORTED_BIT | ORDER_MASK)));
    }
    /// Replaces flags, order and tag in one store (the refcount stays).
    #[inline]
    pub(crate) fn set_state(&self, flags: PageFlags, order: u32, tag: u8) {
        debug_assert!(order < 32 && tag < 8);
        self.store_state(state_word_of(flags.bits(), order, tag));
    }
    /// Replaces flags, order and tag of a free page (refcount 0, which this
    /// stores too): one store, where [`set_state`](Self::set_state) must
    /// load the refcount to keep it.
    #[inline]
    pub(crate) fn set_free_state(&self, flags: PageFlags, order: u32, tag: u8) {
        debug_assert!(order < 32 && tag < 8);
        debug_assert_eq!(self.refcount(), 0, "a free page has no references");
        self.rc_state.store(state_word_of(flags.bits(), order, tag) as u64, Relaxed);
    }
    /// Replaces the whole word: state and refcount in one store. Private:
    /// other layers store through the named transitions below.
    #[inline(always)]
    fn store_word(&self, word: DescWord) {
        self.rc_state.store(word.0, Relaxed);
    }
    /// State and refcount from one load.
    #[inline(always)]
    pub(crate) fn load_word(&self) -> DescWord {
        DescWord(self.rc_state.load(Relaxed))
    }
    /// Hands out a block just taken off the free lists (or never on
    /// them): its head's state and refcount in one store. The caller owns
    /// the page (nobody else can reach it yet), so no atomic is needed; a
    /// reader that sees `ALLOCATED` sees the finished word.
    #[inline(always)]
    pub(crate) fn hand_out(&self, word: DescWord) {
        debug_assert!(word.0 & PageFlags::ALLOCATED.bits() as u64 != 0);
        self.store_word(word);
    }
    /// The owner of a `LOCAL` page frees it: one plain store of `to` (its
    /// cached or prepared state). Sound because every read-modify-write
    /// that could take, drop or exchange a reference refuses a `LOCAL`
    /// word, so between the owner's load that found its word and this
    /// store nobody else can have claimed the page.
    #[inline(always)]
    pub(crate) fn free_from_local(&self, to: DescWord) {
        debug_assert!(is_local(self.load_word().0), "only a LOCAL page's owner frees with a store");
        self.store_word(to);
    }
    /// Replaces the whole word with `to` if it still is `from` (one
    /// compare-and-swap, acquire-release like [`try_put`](Self::try_put)).
    /// The batched frees drop a page's last reference and write its free
    /// state in this one read-modify-write: a speculative
    /// [`try_get`](Self::try_get) or a flag update racing it makes it fail
    /// and change nothing, where a plain store would lose them.
    #[inline(always)]
    pub(crate) fn drop_last_reference(&self, from: DescWord, to: DescWord) -> bool {
        self.rc_state.compare_exchange(from.0, to.0, core::sync::atomic::Ordering::AcqRel, Relaxed).is_ok()
    }
    /// Clears `LOCAL` from a page of CPU `cpu` and puts its one reference
    /// where the CPU was: the page leaves its CPU and becomes an ordinary
    /// allocated page. One compare-and-swap, so a flag set meanwhile is
    /// kept. False if the page is not `LOCAL` to `cpu`.
    pub(crate) fn clear_local(&self, cpu: usize) -> bool {
        self.rc_state
            .fetch_update(core::sync::atomic::Ordering::AcqRel, Relaxed, |w| {
                (is_local(w) && refcount_of(w) as usize == cpu).then_some(DescWord::of(state_of(w) & !LOCAL_BIT, 1).0)
            })
            .is_ok()
    }
    #[inline]
    pub(crate) fn next(&self) -> PageIdx {
        self.link_next.load(Relaxed)
    }
    #[inline]
    pub(crate) fn prev(&self) -> PageIdx {
        self.link_prev.load(Relaxed)
    }
    #[inline]
    pub(crate) fn set_next(&self, idx: PageIdx) {
        self.link_next.store(idx, Relaxed)
    }
    #[inline]
    pub(crate) fn set_prev(&self, idx: PageIdx) {
        self.link_prev.store(idx, Relaxed)
    }
    /// The embedder's private word; shares storage with the list links, so it
    /// is meaningful only while the page is allocated.
    #[inline]
    pub(crate) fn private(&self) -> u64 {
        self.link_next.load(Relaxed) as u64 | (self.link_prev.load(Relaxed) as u64) << 32
    }
    #[inline]
    pub(crate) fn set_private(&self, value: u64) {
        self.link_next.store(value as u32, Relaxed);
        self.link_prev.store((value >> 32) as u32, Relaxed);
    }
    /// The reference count: 1 for a `LOCAL` page, whose count field holds
    /// its CPU.
    #[inline]
    pub(crate) fn refcount(&self) -> u32 {
        self.load_word().refcount()
    }
    /// Replaces the refcount, keeping the state. A plain load and store:
    /// for pages nobody else can reference (just allocated, owned and
    /// frozen; never `LOCAL` ones, whose count field is their CPU).
    #[inline]
    pub(crate) fn set_refcount(&self, count: u32) {
        let w = self.rc_state.load(Relaxed);
        debug_assert!(!is_local(w), "a LOCAL page's count field is its CPU");
        self.rc_state.store((w & STATE_MASK) | (count as u64) << RC_SHIFT, Relaxed);
    }
    /// Adds a reference unless the count is zero or saturated, or the page
    /// is `LOCAL` or `OWNED` (an owned block's references are its
    /// handle's: one taken behind it could never be dropped, since every
    /// bare-PFN put refuses the block); returns the new count.
    pub(crate) fn try_get(&self) -> Option<u32> {
        self.rc_state
            .fetch_update(core::sync::atomic::Ordering::Acquire, Relaxed, |w| {
                let c = refcount_of(w);
                if c == 0 || c == u32::MAX || is_local(w) || state_of(w) & PageFlags::OWNED.bits() != 0 {
                    None
                } else {
                    Some(w + (1 << RC_SHIFT))
                }
            })
            .ok()
            .map(|w| refcount_of(w) + 1)
    }
    /// Moves the refcount from exactly `from` to `to`; false (and no change)
    /// if it held anything else or the page is `LOCAL`. Taking back a
    /// handed-out block uses it, so that of two racing give-backs of one
    /// page exactly one wins.
    #[inline]
    pub(crate) fn refcount_exchange(&self, from: u32, to: u32) -> bool {
        self.rc_state
            .fetch_update(core::sync::atomic::Ordering::AcqRel, Relaxed, |w| {
                (refcount_of(w) == from && !is_local(w)).then_some((w & STATE_MASK) | (to as u64) << RC_SHIFT)
            })
            .is_ok()
    }
    /// [`try_put`](Self::try_put) on the first page of a non-compound
    /// block of several pages: when the reference dropped is not the last,
    /// the same compare-and-swap makes the page order 0, because the
    /// caller frees the rest of the block and whoever drops the last
    /// reference must free this page alone. (Setting the order after the
    /// drop let a racing last `put_page` read the old order and free the
    /// whole block a second time.)
    #[inline]
    pub(crate) fn try_put_splitting(&self) -> Option<u32> {
        self.drop_reference(true)
    }
    /// Drops a reference; `None` if the count was already zero or the page
    /// is `LOCAL` (only its CPU drops that one). The release ordering
    /// publishes the dropping thread's writes to whoever frees.
    #[inline]
    pub(crate) fn try_put(&self) -> Option<u32> {
        self.drop_reference(false)
    }
    /// The one reference drop behind [`try_put`](Self::try_put) and
    /// [`try_put_splitting`](Self::try_put_splitting); returns the new
    /// count.
    #[inline(always)]
    fn drop_reference(&self, split: bool) -> Option<u32> {
        self.rc_state
            .fetch_update(core::sync::atomic::Ordering::AcqRel, Relaxed, |w| {
                let count = refcount_of(w);
                if count == 0 || is_local(w) {
                    return None;
                }
                let dropped = w - (1 << RC_SHIFT);
                Some(if split && count > 1 { dropped & !(ORDER_MASK as u64) } else { dropped })
            })
            .ok()
            .map(|w| refcount_of(w) - 1)
    }
}

/// State word `s` with the `OWNED` flag and owner tag `owner`.
const fn owned_state(s: u32, owner: u8) -> u32 {
    (s & !OWNER_MASK) | PageFlags::OWNED.bits() | ((owner as u32) << OWNER_SHIFT)
}

/// The state word of `flags`, `order` and migratetype `tag`.
#[inline(always)]
const fn state_word_of(flags: u32, order: u32, tag: u8) -> u32 {
    flags | (order << ORDER_SHIFT) | ((tag as u32) << TAG_SHIFT)
}

/// A view of the descriptor table that is copied, not borrowed through:
/// its pointer and length travel by value, so the compiler keeps them in
/// registers across the descriptor stores of a list edit. Through
/// `&PageTable` it reloaded both after every store (the descriptors'
/// atomics are interior mutability, so nothing promised they stayed put),
/// which cost the buddy's alloc+free pair about a tenth of its
/// instructions.
#[derive(Clone, Copy)]
pub(crate) struct Descs<'a>(&'a [PageDesc]);

impl<'a> Descs<'a> {
    #[inline(always)]
    pub(crate) fn get(self, idx: PageIdx) -> &'a PageDesc {
        &self.0[idx as usize]
    }
    /// Every descriptor, as a slice.
    #[inline(always)]
    pub(crate) fn all(self) -> &'a [PageDesc] {
        self.0
    }
}

/// The descriptor table: one [`PageDesc`] per PFN in `[base_pfn, base_pfn + len)`.
pub(crate) struct PageTable {
    descs: crate::mem::rawmem::ZeroedTable<PageDesc>,
}

impl PageTable {
    /// A table of `len` zeroed descriptors. Large tables come from zeroed
    /// memory the OS maps lazily, so building a 1 TiB map takes seconds.
    ///
    /// # Errors
    /// [`BuildError::NoMetadataMemory`](crate::BuildError::NoMetadataMemory)
    /// when the table cannot be allocated.
    pub(crate) fn try_new_zeroed(len: usize) -> Result<Self, crate::types::error::BuildError> {
        let descs = crate::mem::rawmem::ZeroedTable::on_heap(len)
            .map_err(|bytes| crate::types::error::BuildError::NoMetadataMemory { bytes })?;
        Ok(Self { descs })
    }

    /// A table of `len` zeroed descriptors in memory the embedder lends for
    /// good (Linux places `mem_map` in memory taken from memblock).
    ///
    /// # Errors
    /// [`BuildError::DescriptorMemoryTooSmall`](crate::BuildError::DescriptorMemoryTooSmall).
    pub(crate) fn try_in_lent_memory(
        memory: &'static mut [core::mem::MaybeUninit<u8>],
        len: usize,
    ) -> Result<Self, crate::types::error::BuildError> {
        let descs = crate::mem::rawmem::ZeroedTable::in_lent_memory(memory, len).map_err(|e| {
            crate::types::error::BuildError::DescriptorMemoryTooSmall { needed: e.needed, given: e.given }
        })?;
        Ok(Self { descs })
    }

    /// Bytes of lent memory a table of `len` descriptors needs.
    pub(crate) const fn lent_bytes(len: usize) -> usize {
        crate::mem::rawmem::ZeroedTable::<PageDesc>::lent_bytes(len)
    }
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.descs.as_slice().len()
    }
    #[inline]
    pub(crate) fn get(&self, idx: PageIdx) -> &PageDesc {
        &self.descs.as_slice()[idx as usize]
    }
    /// The table as a [`Descs`] view, for loops and list edits.
    #[inline(always)]
    pub(crate) fn descs(&self) -> Descs<'_> {
        Descs(self.descs.as_slice())
    }
    /// The descriptor at `idx`, if the table has one (one bounds check).
    #[inline]
    pub(crate) fn try_get(&self, idx: u64) -> Option<&PageDesc> {
        self.descs.as_slice().get(usize::try_from(idx).ok()?)
    }
    /// Every descriptor, for a hot path that keeps the slice in registers
    /// (see `page_alloc::cache::pinned`).
    #[inline]
    pub(crate) fn all(&self) -> &[PageDesc] {
        self.descs.as_slice()
    }
    /// Descriptors `[start, end)`, for loops over a range.
    #[inline]
    pub(crate) fn slice(&self, start: PageIdx, end: PageIdx) -> &[PageDesc] {
        &self.descs.as_slice()[start as usize..end as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_is_sixteen_bytes() {
        assert_eq!(core::mem::size_of::<PageDesc>(), 16);
        assert!(core::mem::align_of::<PageDesc>() <= 16);
    }

    #[test]
    fn state_word_round_trips() {
        let d = PageDesc::default();
        d.set_state(PageFlags::BUDDY | PageFlags::HWPOISON, 10, 5);
        assert_eq!(d.order(), 10);
        assert_eq!(d.tag(), 5);
        assert!(d.has(PageFlags::BUDDY));
        assert!(!d.has(PageFlags::TAIL));
        d.update_flags_atomic(PageFlags::EMPTY, PageFlags::BUDDY);
        assert_eq!(d.flags(), PageFlags::HWPOISON);
        assert_eq!(d.order(), 10, "clearing flags keeps the order");
        d.set_owner(15);
        assert_eq!((d.owner(), d.order(), d.tag()), (15, 10, 5));
        assert!(d.has(PageFlags::OWNED));
        assert!(!d.try_set_owner(3), "already owned");
        d.clear_owner();
        assert_eq!((d.owner(), d.flags()), (0, PageFlags::HWPOISON));
        assert!(!d.try_set_owner(3), "a frozen page (no reference) is not adopted");
        d.set_refcount(1);
        assert!(d.try_set_owner(3));
        assert_eq!(d.owner(), 3);
    }

    #[test]
    fn reported_lives_only_on_free_heads_and_dies_with_any_store() {
        let d = PageDesc::default();
        d.set_state(PageFlags::ALLOCATED, 9, 1);
        d.set_reported();
        assert!(!d.is_reported(), "an allocated block is never reported");
        d.set_free_state(PageFlags::BUDDY, 9, 1);
        d.set_reported();
        assert!(d.is_reported());
        assert_eq!(d.free_block(), Some((9, 1)), "the bit leaves order and tag alone");
        assert_eq!(d.flags(), PageFlags::BUDDY, "and is no PageFlags bit");
        d.set_free_state(PageFlags::EMPTY, 0, 0);
        assert!(!d.is_reported(), "taking the block off its list clears it");
        d.set_reporting_state(10);
        assert!(d.is_reported() && d.free_block().is_none() && d.order() == 10);
        d.update_flags_atomic(PageFlags::HWPOISON, PageFlags::EMPTY);
        d.clear_reporting_state();
        assert!(!d.is_reported() && d.order() == 0 && d.flags() == PageFlags::HWPOISON);
        d.store_word(DescWord::local(PageFlags::ALLOCATED, 0, 1, 1));
        assert!(!d.is_reported(), "a LOCAL page's odd CPU number is not the flag");
    }

    #[test]
    fn refcount_never_underflows() {
        let d = PageDesc::default();
        assert_eq!(d.try_put(), None);
        d.set_refcount(1);
        assert_eq!(d.try_get(), Some(2));
        assert_eq!(d.try_put(), Some(1));
        assert_eq!(d.try_put(), Some(0));
        assert_eq!(d.try_put(), None);
        assert_eq!(d.try_get(), None, "a free page cannot gain a reference");
    }

    #[test]
    fn references_saturate_and_an_owned_page_takes_none() {
        let d = PageDesc::default();
        d.set_refcount(u32::MAX - 1);
        assert_eq!(d.try_get(), Some(u32::MAX));
        assert_eq!(d.try_get(), None, "the count saturates instead of wrapping");
        assert_eq!(d.refcount(), u32::MAX);
        let d = PageDesc::default();
        d.set_refcount(1);
        d.set_owner(3);
        assert_eq!(d.try_get(), None, "an owned block's references are its handle's");
        assert_eq!(d.refcount(), 1);
        assert!(!d.update_flags_unless_owned(PageFlags::LRU, PageFlags::EMPTY));
        assert!(!d.has(PageFlags::LRU), "nothing changed");
        d.clear_owner();
        assert!(d.update_flags_unless_owned(PageFlags::LRU, PageFlags::EMPTY));
        assert!(d.has(PageFlags::LRU));
    }

    #[test]
    fn private_word_uses_both_links() {
        let d = PageDesc::default();
        d.set_private(0x1234_5678_9abc_def0);
        assert_eq!(d.private(), 0x1234_5678_9abc_def0);
    }

    #[test]
    fn zeroed_table_is_clean() {
        let t = PageTable::try_new_zeroed(1 << 12).unwrap();
        assert_eq!(t.len(), 4096);
        assert_eq!(t.get(4095).flags(), PageFlags::EMPTY);
        assert_eq!(t.get(17).refcount(), 0);
    }
}

#[cfg(all(test, loom, feature = "loom-desc"))]
mod loom_hand_over;
