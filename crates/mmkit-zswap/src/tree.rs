//! zswap's tree and LRU: one slot per swap offset (Linux keeps an xarray
//! per swap device, indexed by offset) and the LRU as a doubly linked list
//! threaded through those slots (Linux's `list_lru`), so that every
//! operation — look up, insert, remove, rotate, take the coldest — is O(1)
//! and a process exit freeing thousands of entries does no tree walking.
//!
//! Owns the layout only: no locking (the caller holds the tree lock), no
//! counters, no zsmalloc calls.

use mmkit_compress::Algorithm;

/// No slot: the end of the list.
const NIL: u64 = u64::MAX;

/// What an entry holds.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stored {
    /// A page of one repeated word (`zswap_is_page_same_filled`).
    Same(u64),
    /// A zsmalloc object of `len` compressed bytes, held as a raw word
    /// under the instance's key (so that a keeping load can read it with
    /// the tree lock dropped, and is refused if it was freed meanwhile).
    Zs { handle: u64, len: u32, algorithm: Algorithm },
}

/// One stored page (Linux's `struct zswap_entry`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) stored: Stored,
    /// Second chance: set on store and on a keeping load, cleared by the
    /// shrinker, which rotates a referenced entry instead of writing it
    /// back (Linux's `entry->referenced`).
    pub(crate) referenced: bool,
}

#[derive(Clone, Copy)]
struct Slot {
    entry: Option<Entry>,
    on_lru: bool,
    prev: u64,
    next: u64,
}

const EMPTY: Slot = Slot { entry: None, on_lru: false, prev: NIL, next: NIL };

/// Bytes of one slot of the tree's table.
pub(crate) const SLOT_BYTES: u64 = core::mem::size_of::<Slot>() as u64;

/// The slots and the LRU list (cold end at `head`).
pub(crate) struct Tree {
    slots: Vec<Slot>,
    head: u64,
    tail: u64,
    nr_entries: usize,
    nr_lru: usize,
}

impl Tree {
    /// A tree for offsets `0 .. nr_slots`.
    /// A tree for `nr_slots` slots, or `None` when its table (one
    /// [`Slot`] a swap slot, `SLOT_BYTES`) would pass a quarter of the
    /// machine's memory or cannot be allocated: refused rather than left
    /// to abort the process or to the OOM killer, as `SwapFile` refuses
    /// its bitmap.
    pub(crate) fn try_new(nr_slots: u64) -> Option<Self> {
        let bytes = nr_slots.checked_mul(SLOT_BYTES)?;
        if bytes > crate::backing::machine_memory() / 4 {
            return None;
        }
        let len = usize::try_from(nr_slots).ok()?;
        let mut slots = Vec::new();
        slots.try_reserve_exact(len).ok()?;
        slots.resize(len, EMPTY);
        Some(Self { slots, head: NIL, tail: NIL, nr_entries: 0, nr_lru: 0 })
    }

    pub(crate) fn len(&self) -> usize {
        self.nr_entries
    }

    pub(crate) fn lru_len(&self) -> usize {
        self.nr_lru
    }

    pub(crate) fn get(&self, offset: u64) -> Option<&Entry> {
        self.slots.get(offset as usize)?.entry.as_ref()
    }

    pub(crate) fn get_mut(&mut self, offset: u64) -> Option<&mut Entry> {
        self.slots.get_mut(offset as usize)?.entry.as_mut()
    }

    pub(crate) fn contains(&self, offset: u64) -> bool {
        self.get(offset).is_some()
    }

    /// Puts `entry` at `offset` (compressed entries at the LRU's warm end)
    /// and returns the entry it replaced. An offset past the tree is
    /// refused (`Err`), which callers prevent by checking the slot first.
    pub(crate) fn insert(&mut self, offset: u64, entry: Entry) -> Result<Option<Entry>, Entry> {
        if offset as usize >= self.slots.len() {
            return Err(entry);
        }
        let old = self.remove(offset);
        self.slots[offset as usize].entry = Some(entry);
        self.nr_entries += 1;
        if matches!(entry.stored, Stored::Zs { .. }) {
            self.push_tail(offset);
        }
        Ok(old)
    }

    /// Takes the entry at `offset` out, off the LRU too.
    pub(crate) fn remove(&mut self, offset: u64) -> Option<Entry> {
        let entry = self.slots.get_mut(offset as usize)?.entry.take()?;
        self.nr_entries -= 1;
        self.unlink(offset);
        Some(entry)
    }

    /// The LRU's coldest offset.
    pub(crate) fn lru_cold(&self) -> Option<u64> {
        (self.head != NIL).then_some(self.head)
    }

    /// Moves `offset` to the LRU's warm end (Linux's `LRU_ROTATE`).
    pub(crate) fn rotate(&mut self, offset: u64) {
        if self.slots.get(offset as usize).is_some_and(|s| s.on_lru) {
            self.unlink(offset);
            self.push_tail(offset);
        }
    }

    fn push_tail(&mut self, offset: u64) {
        let tail = self.tail;
        let slot = &mut self.slots[offset as usize];
        slot.on_lru = true;
        slot.prev = tail;
        slot.next = NIL;
        if tail == NIL {
            self.head = offset;
        } else {
            self.slots[tail as usize].next = offset;
        }
        self.tail = offset;
        self.nr_lru += 1;
    }

    fn unlink(&mut self, offset: u64) {
        let slot = self.slots[offset as usize];
        if !slot.on_lru {
            return;
        }
        if slot.prev == NIL {
            self.head = slot.next;
        } else {
            self.slots[slot.prev as usize].next = slot.next;
        }
        if slot.next == NIL {
            self.tail = slot.prev;
        } else {
            self.slots[slot.next as usize].prev = slot.prev;
        }
        self.slots[offset as usize] = Slot { entry: self.slots[offset as usize].entry, ..EMPTY };
        self.nr_lru -= 1;
    }

    /// Every entry with its offset.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.entry.as_ref().map(|e| (i as u64, e)))
    }

    /// Checks the list: walked both ways it has `nr_lru` slots, each
    /// holding a compressed entry and marked on the list; the entry count
    /// matches.
    pub(crate) fn check(&self) -> Result<(), String> {
        let (mut n, mut prev, mut at) = (0usize, NIL, self.head);
        while at != NIL {
            let slot = self.slots.get(at as usize).ok_or_else(|| format!("LRU link to {at}, past the tree"))?;
            if !slot.on_lru || slot.prev != prev || !matches!(slot.entry, Some(Entry { stored: Stored::Zs { .. }, .. }))
            {
                return Err(format!("LRU slot {at}: bad links or not a compressed entry"));
            }
            n += 1;
            if n > self.slots.len() {
                return Err("LRU has a cycle".into());
            }
            prev = at;
            at = slot.next;
        }
        if prev != self.tail || n != self.nr_lru {
            return Err(format!(
                "LRU walk found {n} slots ending at {prev}, expected {} ending at {}",
                self.nr_lru, self.tail
            ));
        }
        let entries = self.slots.iter().filter(|s| s.entry.is_some()).count();
        let on_lru = self.slots.iter().filter(|s| s.on_lru).count();
        if entries != self.nr_entries || on_lru != self.nr_lru {
            return Err(format!(
                "{entries} entries, {on_lru} on the LRU; counted {}, {}",
                self.nr_entries, self.nr_lru
            ));
        }
        Ok(())
    }
}
