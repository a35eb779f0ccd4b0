//! One size class's state behind the class lock: its zspages sorted into
//! fullness groups, their pages and freed-object stacks, its handle slots
//! and its object counts.
//!
//! Owns the zspage records and the class's flat stores (zspage `id`'s
//! pages are `pages[id * pages_per_zspage ..]`, its freed objects
//! `freed[id * objs_per_zspage ..]`, so a zspage costs no allocation of
//! its own), the handle slots and the object operations on them. Who holds
//! each slot's object is the one thing kept outside the lock, in the slot
//! entry's atomic state word (`slot_state`): the lock-free calls change it
//! by compare-and-swap, so a free here takes the object by compare-and-swap
//! too, and is refused when a lock-free call took it first. Must not
//! allocate or free pages: a zspage that empties has its pages handed to
//! the caller, which returns them after dropping the lock (the first patch
//! of Linux's 2026 `zs_free` series: the zone lock is not taken under the
//! class lock).
//!
//! The hot paths are written for their instruction counts (`zs_probe`,
//! docs/perf-log): an allocation finds its zspage through the groups'
//! bitmap, its slot entry with one lookup, and writes header and data with
//! one page lookup; a free touches the slot entry and the zspage record,
//! not the object's page.

use crate::class::ClassShape;
use crate::groups::{fullness_table, Groups};
use crate::handle::{HandleId, MAX_SLOTS, RAW_GEN_LIMIT};
use crate::slot_state::{state, SlotEntry, SlotStates, FREE, HANDLE, QUEUED, RAW};
use crate::zspage::{self, Zspage};
use crate::ZsError;
use mmkit::{Blocks, PageAllocator, PageBlock, Pfn};
use std::sync::Arc;

pub(crate) use crate::groups::NR_GROUPS;

mod check;

/// Zspages a class may have.
pub(crate) const MAX_ZSPAGES: usize = 1 << 30;

/// How a call names an object: by the full generation a [`Handle`](crate::Handle)
/// carries, or by the low bits a raw word carries (then the object must be
/// raw-held).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Held {
    Handle(u64),
    Raw(u64),
    /// A word of the deferred-free queue, by its generation's low bits:
    /// the object must be queued (a raw word's, taken at the call) or
    /// still handle-held (a handle's, which the call consumed).
    Queued(u64),
}

/// An object as a call names it: slot, holder check, and what to report.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Name {
    pub(crate) slot: usize,
    pub(crate) held: Held,
    pub(crate) id: HandleId,
}

/// A new object's slot and generation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewObj {
    pub(crate) slot: u32,
    pub(crate) generation: u64,
}

/// Why [`ClassState::alloc`] found no object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocMiss {
    /// Every zspage is full: a new one is needed.
    NoRoom,
    /// Zspage `.0` has room once it has its next page.
    NeedsPage(usize),
}

/// A live object, as resolved from its handle under the class lock.
#[derive(Clone, Copy)]
pub(crate) struct Resolved {
    pub(crate) zspage: usize,
    pub(crate) obj: u16,
    pub(crate) len: usize,
}

/// A class's zspages, groups, handles and counts.
pub(crate) struct ClassState {
    pub(crate) shape: ClassShape,
    pub(crate) index: usize,
    /// The id of the pool the class belongs to, stamped on its handles.
    pool: u64,
    /// A slot whose generation reaches this is retired.
    gen_limit: u64,
    /// The holder a queued word's object may still have when the drain
    /// frees it, besides `QUEUED`: in a raw-keyed pool a raw word's
    /// (`RAW`: a slot table's words may be queued as they are and checked
    /// here, `zs_free_deferred_raw_many_drain_checked`; a handle queued in
    /// such a pool is moved to `QUEUED` at the call), otherwise a consumed
    /// handle's (`HANDLE`). Never both: a word queued and then turned into
    /// a handle is refused here, and the handle keeps its object.
    queued_from: u32,
    page_shift: u32,
    page_size: usize,
    huge: bool,
    /// `shape`'s counts, as the stores index them.
    objs: usize,
    chain: usize,
    /// The fullness group of a zspage by its objects in use.
    group_at: Box<[u8]>,
    /// Backed objects of a zspage by its pages (`0..=chain`).
    backed_at: Box<[u16]>,
    /// By zspage id; a record without pages is a free id.
    zspages: Vec<Zspage>,
    /// `chain` pages per zspage id.
    pages: Vec<Option<PageBlock>>,
    /// `objs` freed-object indices per zspage id (a stack each).
    freed: Vec<u16>,
    free_ids: Vec<u32>,
    pub(crate) groups: Groups,
    /// The slots' entries; shared with the pool, which reads and changes
    /// their state words without the lock.
    states: Arc<SlotStates>,
    /// Slots handed out at some time: `0..nr_slots`.
    nr_slots: usize,
    free_slots: Vec<u32>,
    /// Objects the class's zspages can hold in the pages they have
    /// (Linux's `ZS_OBJS_ALLOCATED`, where a zspage always has them all).
    pub(crate) objs_allocated: u64,
    /// Pages the class's zspages have.
    pub(crate) pages_held: u64,
    /// Objects in use (`ZS_OBJS_INUSE`).
    pub(crate) objs_inuse: u64,
}

impl ClassState {
    pub(crate) fn new(
        pool: u64,
        raw_keyed: bool,
        index: usize,
        shape: ClassShape,
        page_size: usize,
        states: Arc<SlotStates>,
    ) -> Self {
        Self {
            shape,
            index,
            pool,
            gen_limit: if raw_keyed { RAW_GEN_LIMIT } else { u64::MAX },
            queued_from: if raw_keyed { RAW } else { HANDLE },
            page_shift: page_size.trailing_zeros(),
            page_size,
            huge: shape.is_huge(),
            objs: shape.objs_per_zspage,
            chain: shape.pages_per_zspage,
            group_at: fullness_table(shape.objs_per_zspage),
            backed_at: (0..=shape.pages_per_zspage).map(|n| Zspage::backed_objs(shape, page_size, n) as u16).collect(),
            zspages: Vec::new(),
            pages: Vec::new(),
            freed: Vec::new(),
            free_ids: Vec::new(),
            groups: Groups::default(),
            states,
            nr_slots: 0,
            free_slots: Vec::new(),
            objs_allocated: 0,
            pages_held: 0,
            objs_inuse: 0,
        }
    }

    /// Linux's `get_fullness_group`.
    pub(crate) fn group_of(&self, inuse: u16) -> usize {
        usize::from(self.group_at[usize::from(inuse)])
    }

    /// Zspage `id`'s record, if the id names one.
    pub(crate) fn zspage(&self, id: usize) -> Option<&Zspage> {
        self.zspages.get(id).filter(|z| z.is_live())
    }

    /// Zspage `id`'s pages (its chain, then the slots it may grow into).
    pub(crate) fn chain_of(&self, id: usize) -> &[Option<PageBlock>] {
        &self.pages[id * self.chain..(id + 1) * self.chain]
    }

    /// Chain offset of object `obj`'s start (its header) and of its
    /// payload.
    #[inline]
    fn offsets(&self, obj: u16) -> (usize, usize) {
        let at = usize::from(obj) * self.shape.size;
        (at, if self.huge { at } else { at + crate::class::ZS_HANDLE_SIZE })
    }

    /// The fullest zspage whose next free object is backed, other than
    /// `except`.
    pub(crate) fn zspage_with_backed_room(&self, except: Option<usize>) -> Option<usize> {
        self.groups.find(&self.zspages, except).ok()
    }

    /// Allocates an object of `len` bytes in an existing zspage, held by a
    /// handle or (`raw`) a raw word, with `data` (if any) written into it:
    /// the fullest zspage with a backed free object, else
    /// [`AllocMiss::NeedsPage`] for the fullest that has room once it has
    /// another page.
    #[inline]
    pub(crate) fn alloc(
        &mut self,
        mm: &PageAllocator,
        len: usize,
        raw: bool,
        data: Option<&[u8]>,
    ) -> Result<NewObj, AllocMiss> {
        match self.groups.find(&self.zspages, None) {
            Ok(id) => self.take_object(mm, id, len, raw, data).ok_or(AllocMiss::NoRoom),
            Err(Some(id)) => Err(AllocMiss::NeedsPage(id)),
            Err(None) => Err(AllocMiss::NoRoom),
        }
    }

    /// Gives zspage `id` its next page if it still wants one; otherwise
    /// hands the page back (the zspage went, or another caller grew it).
    pub(crate) fn attach_page(&mut self, id: usize, block: PageBlock) -> Result<(), PageBlock> {
        let objs = self.objs as u16;
        let Some(z) = self.zspages.get_mut(id).filter(|z| z.is_live() && z.wants_page(objs)) else {
            return Err(block);
        };
        self.pages[id * self.chain + usize::from(z.npages)] = Some(block);
        z.npages += 1;
        let backed = self.backed_at[usize::from(z.npages)];
        self.objs_allocated += u64::from(backed - z.backed);
        z.backed = backed;
        self.pages_held += 1;
        Ok(())
    }

    /// Allocates an object of `len` bytes in zspage `id` as
    /// [`alloc`](Self::alloc) does; `None` (and no change) when its next
    /// free object is not backed or no slot is left.
    pub(crate) fn alloc_in(
        &mut self,
        mm: &PageAllocator,
        id: usize,
        len: usize,
        raw: bool,
        data: Option<&[u8]>,
    ) -> Option<NewObj> {
        if !self.zspages.get(id).is_some_and(|z| z.is_live() && z.has_backed_room()) {
            return None;
        }
        self.take_object(mm, id, len, raw, data)
    }

    /// [`alloc_in`](Self::alloc_in) of a zspage known to be live with a
    /// backed free object.
    #[inline(always)]
    pub(crate) fn take_object(
        &mut self,
        mm: &PageAllocator,
        id: usize,
        len: usize,
        raw: bool,
        data: Option<&[u8]>,
    ) -> Option<NewObj> {
        let slot = self.take_slot()?;
        let entry = self.states.get(slot as usize)?;
        let z = &mut self.zspages[id];
        let obj = z.take_free(&self.freed, id * self.objs);
        let (inuse, group) = (usize::from(z.inuse), usize::from(z.group));
        self.objs_inuse += 1;
        let generation = entry.fill(id as u32, u32::from(obj), len as u32, if raw { RAW } else { HANDLE });
        let at = usize::from(obj) * self.shape.size;
        let chain = &mut self.pages[id * self.chain..][..self.chain];
        if self.huge {
            self.zspages[id].huge_handle = header_of(slot as usize);
            if let Some(data) = data {
                zspage::write_at(mm, chain, self.page_shift, at, data);
            }
        } else {
            zspage::write_object(mm, chain, self.page_shift, at, header_of(slot as usize), data.unwrap_or(&[]));
        }
        let now = usize::from(self.group_at[inuse]);
        if now != group {
            self.groups.move_to(&mut self.zspages, id, now);
        }
        Some(NewObj { slot, generation })
    }

    /// Whether the class can take another zspage (ids fit below the
    /// holder bits of a slot).
    pub(crate) fn zspages_exhausted(&self) -> bool {
        self.free_ids.is_empty() && self.zspages.len() >= MAX_ZSPAGES
    }

    /// Adds a new zspage with page `first` and every object free; returns
    /// its id.
    pub(crate) fn insert_zspage(&mut self, first: PageBlock) -> usize {
        let id = match self.free_ids.pop() {
            Some(id) => id as usize,
            None => {
                self.zspages.push(Zspage::default());
                self.pages.resize_with(self.pages.len() + self.chain, || None);
                self.freed.resize(self.freed.len() + self.objs, 0);
                self.zspages.len() - 1
            }
        };
        let backed = self.backed_at[1];
        self.zspages[id] = Zspage { npages: 1, backed, ..Zspage::default() };
        self.pages[id * self.chain] = Some(first);
        self.objs_allocated += u64::from(backed);
        self.pages_held += 1;
        self.groups.link(&mut self.zspages, id, 0);
        id
    }

    /// The live object `name` names, or why it names none: the slot must
    /// be live, held as the name says (by a handle, or by a raw word), and
    /// of the name's generation (all 64 bits for a handle, the low bits a
    /// raw word carries for a word).
    #[inline]
    pub(crate) fn resolve(&self, name: &Name) -> Result<Resolved, ZsError> {
        named_in(&self.states, &self.zspages, self.queued_from, name).map(|(at, _, _)| at)
    }

    /// The object `at`'s bytes when they lie in one page.
    pub(crate) fn object_bytes<'a>(&'a self, mm: &'a PageAllocator, at: Resolved) -> Option<&'a [u8]> {
        let (_, payload) = self.offsets(at.obj);
        zspage::contiguous(mm, self.chain_of(at.zspage), self.page_shift, payload, at.len)
    }

    /// Copies the object `at`'s bytes into `dst` (its length).
    pub(crate) fn read_object(&self, mm: &PageAllocator, at: Resolved, dst: &mut [u8]) {
        let (_, payload) = self.offsets(at.obj);
        zspage::read_at(mm, self.chain_of(at.zspage), self.page_shift, payload, dst);
    }

    /// Writes `data` at the start of `name`'s object.
    pub(crate) fn write_obj(&mut self, mm: &PageAllocator, name: &Name, data: &[u8]) -> Result<(), ZsError> {
        let at = self.resolve(name)?;
        if data.len() > at.len {
            return Err(ZsError::TooLong { len: data.len(), size: at.len });
        }
        let (_, payload) = self.offsets(at.obj);
        let chain = &mut self.pages[at.zspage * self.chain..(at.zspage + 1) * self.chain];
        zspage::write_at(mm, chain, self.page_shift, payload, data);
        Ok(())
    }

    /// Frees `name`'s object. A zspage left empty is unlinked and its
    /// pages appended to `emptied`, for the caller to free once the lock
    /// is dropped. The object is taken from its holder by compare-and-swap:
    /// refused, with nothing changed, when a lock-free call took it first.
    pub(crate) fn free(&mut self, name: &Name, emptied: &mut Vec<PageBlock>) -> Result<(), ZsError> {
        let id = self.free_object(name)?;
        self.settle(id, emptied);
        Ok(())
    }

    /// Frees `name`'s object without moving its zspage between groups;
    /// returns the zspage, for [`settle`](Self::settle) (a drain settles
    /// each zspage once for all its frees).
    #[inline(always)]
    pub(crate) fn free_object(&mut self, name: &Name) -> Result<usize, ZsError> {
        self.take_named(name).map(|(id, _, _)| id)
    }

    /// [`free_object`](Self::free_object), then the zspage moved to the
    /// group its use now puts it in: the synchronous free in one pass.
    /// Returns the zspage if the free emptied it, for
    /// [`release_zspage`](Self::release_zspage).
    #[inline(always)]
    pub(crate) fn free_regrouped(&mut self, name: &Name) -> Result<Option<usize>, ZsError> {
        let (id, inuse, group) = self.take_named(name)?;
        if inuse == 0 {
            return Ok(Some(id));
        }
        let now = usize::from(self.group_at[inuse]);
        if now != group {
            self.groups.move_to(&mut self.zspages, id, now);
        }
        Ok(None)
    }

    /// Frees the objects `names` name, as many frees would, but moves
    /// each zspage they leave between groups once, after all of them (the
    /// deferred drain's run of one class: most zspages lose several
    /// objects in a run, and a free one by one would move such a zspage a
    /// group down at nearly every object). Emptied zspages' pages go to
    /// `emptied`; `touched` is scratch space. Returns how many were freed
    /// and how many named nothing they may free.
    pub(crate) fn free_run(
        &mut self,
        names: impl Iterator<Item = Name>,
        touched: &mut Vec<u32>,
        emptied: &mut Vec<PageBlock>,
    ) -> (u64, u64) {
        let (mut freed, mut invalid) = (0, 0);
        touched.clear();
        for name in names {
            match self.free_object(&name) {
                Ok(id) => {
                    freed += 1;
                    let z = &mut self.zspages[id];
                    if !z.touched {
                        z.touched = true;
                        touched.push(id as u32);
                    }
                }
                Err(_) => invalid += 1,
            }
        }
        for &id in touched.iter() {
            let id = id as usize;
            self.zspages[id].touched = false;
            if !self.regroup(id) {
                self.release_zspage(id, emptied);
            }
        }
        (freed, invalid)
    }

    /// Frees `name`'s object, the zspage left in its group: returns the
    /// zspage, its objects in use and its group. The object is taken from
    /// its holder by compare-and-swap from the word its name expects
    /// (one lookup of the slot's entry, which holds both).
    #[inline(always)]
    fn take_named(&mut self, name: &Name) -> Result<(usize, usize, usize), ZsError> {
        let refused = ZsError::InvalidHandle(name.id);
        let Some(entry) = self.states.get(name.slot) else { return Err(refused) };
        let word = entry.state();
        let named = match name.held {
            Held::Handle(g) => word == state(HANDLE, g) && entry.generation() == g,
            Held::Raw(g) => word == state(RAW, g),
            Held::Queued(g) => word == state(QUEUED, g) || word == state(self.queued_from, g),
        };
        let (id, obj) = entry.place();
        let Some(z) = self.zspages.get_mut(id).filter(|z| named && z.is_live()) else { return Err(refused) };
        if !entry.swap(word, FREE) {
            return Err(refused);
        }
        z.put_free(&mut self.freed, id * self.objs, obj);
        // A huge zspage's one header (0 in any other zspage).
        z.huge_handle = 0;
        let (inuse, group) = (usize::from(z.inuse), usize::from(z.group));
        self.objs_inuse -= 1;
        // The slot goes back with its generation bumped; one whose next
        // generation would reach the pool's limit is retired instead
        // (never handed out again): generations do not wrap.
        if entry.next_generation() < self.gen_limit {
            self.free_slots.push(name.slot as u32);
        }
        Ok((id, inuse, group))
    }

    /// Moves zspage `id` to the group its use now puts it in; `false`
    /// (and no change) when it is empty: then [`settle`](Self::settle)
    /// takes it out.
    #[inline(always)]
    pub(crate) fn regroup(&mut self, id: usize) -> bool {
        let z = &self.zspages[id];
        if z.inuse == 0 {
            return false;
        }
        let now = usize::from(self.group_at[usize::from(z.inuse)]);
        if now != usize::from(z.group) {
            self.groups.move_to(&mut self.zspages, id, now);
        }
        true
    }

    /// Moves zspage `id` to the group its use now puts it in; unlinks it
    /// and appends its pages to `emptied` if it is empty.
    pub(crate) fn settle(&mut self, id: usize, emptied: &mut Vec<PageBlock>) {
        if self.zspage(id).is_some() && !self.regroup(id) {
            self.release_zspage(id, emptied);
        }
    }

    /// Takes empty zspage `id` out of the class: its pages go to `emptied`.
    pub(crate) fn release_zspage(&mut self, id: usize, emptied: &mut Vec<PageBlock>) {
        self.groups.unlink(&mut self.zspages, id);
        let z = std::mem::take(&mut self.zspages[id]);
        let chain = &mut self.pages[id * self.chain..][..usize::from(z.npages)];
        emptied.reserve(chain.len());
        for page in chain {
            if let Some(page) = page.take() {
                emptied.push(page);
            }
        }
        self.free_ids.push(id as u32);
        self.objs_allocated -= u64::from(z.backed);
        self.pages_held -= u64::from(z.npages);
    }

    /// Whether every slot a handle can name is live or retired.
    pub(crate) fn slots_exhausted(&self) -> bool {
        self.free_slots.is_empty() && self.nr_slots >= MAX_SLOTS
    }

    /// A free handle slot; `None` when the class has every slot a handle
    /// can name in use.
    #[inline]
    fn take_slot(&mut self) -> Option<u32> {
        if let Some(slot) = self.free_slots.pop() {
            return Some(slot);
        }
        // The entry first: a slot below `nr_slots` always has one.
        self.states.grow_to(self.nr_slots)?;
        self.nr_slots += 1;
        Some(self.nr_slots as u32 - 1)
    }

    /// Test hook: slot `slot`'s generation set to `generation` (a free
    /// slot only), to reach the limit without 2^27 cycles.
    #[cfg(test)]
    pub(crate) fn set_generation(&mut self, slot: usize, generation: u64) {
        if let Some(entry) = self.states.get(slot).filter(|e| e.state() == FREE) {
            entry.set_generation(generation);
        }
    }

    /// Linux's `zs_can_compact`: pages a perfect compaction would free
    /// (counting only the objects the zspages' pages can hold).
    pub(crate) fn can_compact(&self) -> u64 {
        let wasted = self.objs_allocated - self.objs_inuse;
        wasted / self.shape.objs_per_zspage as u64 * self.shape.pages_per_zspage as u64
    }

    /// The slot of the live object `obj` of zspage `id`, read from its
    /// header: headers of freed objects stay in place, so the slot counts
    /// only if it is live and points back at this object.
    pub(crate) fn live_slot(&self, mm: &PageAllocator, id: usize, obj: u16) -> Option<usize> {
        let (at, _) = self.offsets(obj);
        let slot = slot_of_header(zspage::header_at(mm, self.chain_of(id), self.page_shift, at))?;
        let entry = self.states.get(slot)?;
        (entry.state() != FREE && entry.place() == (id, obj)).then_some(slot)
    }

    /// Moves live object `obj` of zspage `src`, in slot `slot`, into a
    /// free object of zspage `dst` (compaction): its bytes, header
    /// included, are copied, the slot points at the new place, and the
    /// old object is freed. `false` (no change) when `dst` has no backed
    /// free object. Neither zspage changes group: the caller settles them.
    pub(crate) fn move_object(&mut self, mm: &PageAllocator, src: usize, obj: u16, slot: usize, dst: usize) -> bool {
        if src == dst || !self.zspage(dst).is_some_and(Zspage::has_backed_room) {
            return false;
        }
        let Some(entry) = self.states.get(slot) else { return false };
        let mut buf = vec![0; self.shape.size];
        let (from, _) = self.offsets(obj);
        zspage::read_at(mm, self.chain_of(src), self.page_shift, from, &mut buf);
        let new_obj = self.zspages[dst].take_free(&self.freed, dst * self.objs);
        let (to, _) = self.offsets(new_obj);
        zspage::write_at(mm, &mut self.pages[dst * self.chain..(dst + 1) * self.chain], self.page_shift, to, &buf);
        entry.relocate(dst, new_obj);
        self.zspages[src].put_free(&mut self.freed, src * self.objs, obj);
        true
    }

    /// Where page `pfn` is in the class: zspage and chain position.
    pub(crate) fn find_page(&self, pfn: Pfn) -> Option<(usize, usize)> {
        let at = self.pages.iter().position(|p| p.as_ref().is_some_and(|b| b.pfn() == pfn))?;
        Some((at / self.chain, at % self.chain))
    }

    /// Swaps page `at` of zspage `id`, if it is still `pfn`, for `target`
    /// with the same bytes; returns the old page, or gives `target` back.
    pub(crate) fn replace_page(
        &mut self,
        mm: &PageAllocator,
        id: usize,
        at: usize,
        pfn: Pfn,
        mut target: PageBlock,
    ) -> Result<PageBlock, PageBlock> {
        let live = self.zspage(id).is_some_and(|z| at < usize::from(z.npages));
        match self.pages.get_mut(id * self.chain + at).filter(|_| live) {
            Some(Some(page)) if page.pfn() == pfn => {
                if let (Some(src), Some(dst)) =
                    (Blocks::new(mm).block_bytes(page), Blocks::new(mm).block_bytes_mut(&mut target))
                {
                    dst.copy_from_slice(src);
                }
                Ok(std::mem::replace(page, target))
            }
            _ => Err(target),
        }
    }

    /// Every page of the class, for the pool's teardown.
    pub(crate) fn take_all_pages(&mut self) -> Vec<PageBlock> {
        let pages = self.pages.iter_mut().filter_map(Option::take).collect();
        self.zspages.iter_mut().for_each(|z| *z = Zspage::default());
        self.free_ids = (0..self.zspages.len() as u32).rev().collect();
        self.groups = Groups::default();
        self.pages_held = 0;
        self.objs_allocated = 0;
        pages
    }
}

/// The live object `name` names in a class with slot entries `states`
/// and zspages `zspages`, or why it names none (see
/// [`ClassState::resolve`]); with the state word seen and the entry, for a
/// compare-and-swap from it (a free). One lookup of the entry.
#[inline]
fn named_in<'a>(
    states: &'a SlotStates,
    zspages: &[Zspage],
    queued_from: u32,
    name: &Name,
) -> Result<(Resolved, u32, &'a SlotEntry), ZsError> {
    let refused = ZsError::InvalidHandle(name.id);
    let Some(entry) = states.get(name.slot) else { return Err(refused) };
    let word = entry.state();
    // A live slot's word carries its generation's low bits, so a word
    // equal to `state(holder, g)` is of generation `g` in those bits; a
    // handle also checks the rest.
    let named = match name.held {
        Held::Handle(g) => word == state(HANDLE, g) && entry.generation() == g,
        Held::Raw(g) => word == state(RAW, g),
        Held::Queued(g) => word == state(QUEUED, g) || word == state(queued_from, g),
    };
    let (zspage, obj) = entry.place();
    if !named || !zspages.get(zspage).is_some_and(|z| z.is_live() && obj < z.used) {
        return Err(refused);
    }
    Ok((Resolved { zspage, obj, len: entry.len() }, word, entry))
}

/// The in-object header of the object in slot `slot`: what compaction
/// reads to find a live object's slot (never 0).
pub(crate) fn header_of(slot: usize) -> u64 {
    slot as u64 + 1
}

/// The slot an in-object header names; `None` for 0.
pub(crate) fn slot_of_header(header: u64) -> Option<usize> {
    header.checked_sub(1).map(|slot| slot as usize)
}
