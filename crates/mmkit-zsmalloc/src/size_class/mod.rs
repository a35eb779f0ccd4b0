//! One size class's state behind the class lock: its zspages sorted into
//! fullness groups, its handle table and its object counts.
//!
//! Owns the fullness groups (Linux's `ZS_INUSE_RATIO_0, _10, …, _99, _100`:
//! allocation takes the fullest zspage that is not full, `find_get_zspage`),
//! the handle slots and the object operations on them. Who holds each
//! slot's object is the one thing kept outside the lock, in the class's
//! atomic state words (`slot_state`): the lock-free calls change it by
//! compare-and-swap, so a free here takes the object by compare-and-swap
//! too, and is refused when a lock-free call took it first. Must not
//! allocate or
//! free pages: a zspage that empties is handed back to the caller, which
//! returns its pages after dropping the lock (the first patch of Linux's
//! 2026 `zs_free` series: the zone lock is not taken under the class lock).

use crate::class::ClassShape;
use crate::handle::{HandleId, MAX_SLOTS, RAW_GEN_LIMIT};
use crate::slot_state::{holder, load_word, state, swap_word, SlotStates, StateWord, FREE, HANDLE, QUEUED, RAW};
use crate::zspage::Zspage;
use crate::ZsError;
use mmkit::{PageAllocator, PageBlock};
use std::sync::Arc;

/// Fullness groups: 0 %, then one per 10 % up to 99 %, then 100 %.
pub(crate) const NR_GROUPS: usize = 12;
/// The group of full zspages.
pub(crate) const GROUP_FULL: usize = NR_GROUPS - 1;

/// Where a live object is (who holds it is its state word's, in
/// `slot_state`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Slot {
    /// Objects the slot held before this one (64-bit; the slot is retired
    /// before it reaches the pool's limit, never wrapped).
    generation: u64,
    zspage: u32,
    obj: u16,
    /// Bytes the caller asked for.
    len: u16,
}

const _: () = assert!(size_of::<Slot>() == 16, "64-bit generations cost the slot table nothing");

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

/// A class's zspages, groups, handles and counts.
pub(crate) struct ClassState {
    pub(crate) shape: ClassShape,
    pub(crate) index: usize,
    /// The id of the pool the class belongs to, stamped on its handles.
    pool: u64,
    /// A slot whose generation reaches this is retired.
    gen_limit: u64,
    pub(crate) zspages: Vec<Option<Zspage>>,
    free_ids: Vec<u32>,
    pub(crate) groups: [Vec<u32>; NR_GROUPS],
    slots: Vec<Slot>,
    /// Who holds each slot's object; shared with the pool, which reads and
    /// changes it without the lock.
    states: Arc<SlotStates>,
    free_slots: Vec<u32>,
    /// Objects the class's zspages can hold in the pages they have
    /// (Linux's `ZS_OBJS_ALLOCATED`, where a zspage always has them all).
    pub(crate) objs_allocated: u64,
    /// Pages the class's zspages have.
    pub(crate) pages: u64,
    /// Objects in use (`ZS_OBJS_INUSE`).
    pub(crate) objs_inuse: u64,
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

impl ClassState {
    pub(crate) fn new(pool: u64, gen_limit: u64, index: usize, shape: ClassShape, states: Arc<SlotStates>) -> Self {
        Self {
            shape,
            index,
            pool,
            gen_limit,
            zspages: Vec::new(),
            free_ids: Vec::new(),
            groups: Default::default(),
            slots: Vec::new(),
            states,
            free_slots: Vec::new(),
            objs_allocated: 0,
            pages: 0,
            objs_inuse: 0,
        }
    }

    /// Linux's `get_fullness_group`.
    pub(crate) fn group_of(&self, inuse: u16) -> usize {
        let objs = self.shape.objs_per_zspage;
        // floor(floor(100 n / objs) / 10) is floor(10 n / objs).
        match usize::from(inuse) {
            0 => 0,
            n if n == objs => GROUP_FULL,
            n => 10 * n / objs + 1,
        }
    }

    /// The fullest zspage whose next free object is backed, other than
    /// `except`, or else (`Err`) the fullest that has room once it has
    /// another page (Linux's `find_get_zspage` scans `ZS_INUSE_RATIO_99`
    /// down to `ZS_INUSE_RATIO_0`). Only a zspage still growing its chain
    /// can lack a backed object (about one per class), so the search
    /// rarely looks past the first.
    fn find_zspage(&self, except: Option<usize>) -> Result<usize, Option<usize>> {
        let mut needs_page = None;
        for group in self.groups[..GROUP_FULL].iter().rev() {
            for &id in group.iter().rev() {
                let id = id as usize;
                if Some(id) == except {
                    continue;
                }
                match self.zspages[id].as_ref() {
                    Some(z) if z.has_backed_room() => return Ok(id),
                    Some(_) if needs_page.is_none() => needs_page = Some(id),
                    _ => {}
                }
            }
        }
        Err(needs_page)
    }

    /// The fullest zspage whose next free object is backed, other than
    /// `except`.
    pub(crate) fn zspage_with_backed_room(&self, except: Option<usize>) -> Option<usize> {
        self.find_zspage(except).ok()
    }

    /// Allocates an object of `len` bytes in an existing zspage: the
    /// fullest with a backed free object, else [`AllocMiss::NeedsPage`] for
    /// the fullest that has room once it has another page.
    pub(crate) fn alloc(&mut self, mm: &PageAllocator, len: usize, raw: bool) -> Result<NewObj, AllocMiss> {
        match self.find_zspage(None) {
            Ok(id) => self.alloc_in(mm, id, len, raw).ok_or(AllocMiss::NoRoom),
            Err(Some(id)) => Err(AllocMiss::NeedsPage(id)),
            Err(None) => Err(AllocMiss::NoRoom),
        }
    }

    /// Gives zspage `id` its next page if it still wants one; otherwise
    /// hands the page back (the zspage went, or another caller grew it).
    pub(crate) fn attach_page(&mut self, mm: &PageAllocator, id: usize, block: PageBlock) -> Result<(), PageBlock> {
        let (shape, page_size) = (self.shape, mm.geometry().page_size() as usize);
        let Some(zspage) = self.zspages.get_mut(id).and_then(Option::as_mut) else { return Err(block) };
        if !zspage.wants_page() {
            return Err(block);
        }
        let before = Zspage::backed_objs(shape, page_size, zspage.pages.len());
        zspage.attach_page(mm, shape, block);
        let after = Zspage::backed_objs(shape, page_size, zspage.pages.len());
        self.objs_allocated += (after - before) as u64;
        self.pages += 1;
        Ok(())
    }

    /// Allocates an object of `len` bytes in zspage `id`, held by a
    /// handle or (`raw`) by a raw word; `None` (and no change) when its
    /// next free object is not backed.
    pub(crate) fn alloc_in(&mut self, mm: &PageAllocator, id: usize, len: usize, raw: bool) -> Option<NewObj> {
        if !self.zspages.get(id)?.as_ref()?.has_backed_room() {
            return None;
        }
        let slot = self.take_slot()?;
        let shape = self.shape;
        let zspage = self.zspages[id].as_mut()?;
        let obj = zspage.alloc_obj(mm, shape, header_of(slot as usize))?;
        let s = &mut self.slots[slot as usize];
        *s = Slot { zspage: id as u32, obj, len: len as u16, ..*s };
        let generation = s.generation;
        self.states.set_free_slot(slot as usize, state(if raw { RAW } else { HANDLE }, generation));
        self.objs_inuse += 1;
        self.regroup(id);
        Some(NewObj { slot, generation })
    }

    /// Whether the class can take another zspage (ids fit below the
    /// holder bits of a slot).
    pub(crate) fn zspages_exhausted(&self) -> bool {
        self.free_ids.is_empty() && self.zspages.len() >= MAX_ZSPAGES
    }

    /// Adds a new, empty zspage to the class; returns its id.
    pub(crate) fn insert_zspage(&mut self, mm: &PageAllocator, zspage: Zspage) -> usize {
        let id = match self.free_ids.pop() {
            Some(id) => id as usize,
            None => {
                self.zspages.push(None);
                self.zspages.len() - 1
            }
        };
        let page_size = mm.geometry().page_size() as usize;
        self.objs_allocated += Zspage::backed_objs(self.shape, page_size, zspage.pages.len()) as u64;
        self.pages += zspage.pages.len() as u64;
        self.zspages[id] = Some(zspage);
        self.link(id, 0);
        id
    }

    /// The live object `name` names, or why it names none: the slot must
    /// be live, held as the name says (by a handle, or by a raw word), and
    /// of the name's generation (all 64 bits for a handle, the low bits a
    /// raw word carries for a word).
    pub(crate) fn resolve(&self, name: &Name) -> Result<Resolved, ZsError> {
        resolve_in(&self.slots, &self.states, name).map(|(at, _, _)| at)
    }

    /// Writes `data` at the start of `name`'s object.
    pub(crate) fn write_obj(&mut self, mm: &PageAllocator, name: &Name, data: &[u8]) -> Result<(), ZsError> {
        let at = self.resolve(name)?;
        self.write_at(mm, at, data).map_err(|e| e.unwrap_or(ZsError::InvalidHandle(name.id)))
    }

    /// Writes `data` into the new object `new` (just allocated, under the
    /// same hold of the lock).
    pub(crate) fn write_new(&mut self, mm: &PageAllocator, new: NewObj, data: &[u8]) -> Result<(), ZsError> {
        let s = self.slots[new.slot as usize];
        let at = Resolved { zspage: s.zspage as usize, obj: s.obj, len: usize::from(s.len) };
        self.write_at(mm, at, data).map_err(|e| e.unwrap_or(ZsError::NoMemory(None)))
    }

    fn write_at(&mut self, mm: &PageAllocator, at: Resolved, data: &[u8]) -> Result<(), Option<ZsError>> {
        if data.len() > at.len {
            return Err(Some(ZsError::TooLong { len: data.len(), size: at.len }));
        }
        let offset = Zspage::payload_offset(self.shape, at.obj);
        let zspage = self.zspages[at.zspage].as_mut().ok_or(None)?;
        zspage.write(mm, offset, data);
        Ok(())
    }

    /// Frees `name`'s object. A zspage left empty is unlinked and its
    /// pages returned, for the caller to free once the lock is dropped.
    /// The object is taken from its holder by compare-and-swap: refused,
    /// with nothing changed, when a lock-free call took it first.
    pub(crate) fn free(&mut self, mm: &PageAllocator, name: &Name) -> Result<Option<Vec<PageBlock>>, ZsError> {
        let (at, cell, word) = resolve_in(&self.slots, &self.states, name)?;
        let shape = self.shape;
        let Some(zspage) = self.zspages[at.zspage].as_mut() else {
            return Err(ZsError::InvalidHandle(name.id));
        };
        if !swap_word(cell, word, FREE) {
            return Err(ZsError::InvalidHandle(name.id));
        }
        zspage.free_obj(mm, shape, at.obj);
        self.objs_inuse -= 1;
        self.release_slot(name.slot);
        Ok(self.regroup_or_unlink(mm, at.zspage))
    }

    /// Moves zspage `id` to the group its use now puts it in; unlinks it
    /// and returns its pages if it is empty.
    pub(crate) fn regroup_or_unlink(&mut self, mm: &PageAllocator, id: usize) -> Option<Vec<PageBlock>> {
        let inuse = self.zspages[id].as_ref().map_or(0, |z| z.inuse);
        if inuse != 0 {
            self.regroup(id);
            return None;
        }
        self.unlink(id);
        let zspage = self.zspages[id].take()?;
        self.free_ids.push(id as u32);
        let page_size = mm.geometry().page_size() as usize;
        self.objs_allocated -= Zspage::backed_objs(self.shape, page_size, zspage.pages.len()) as u64;
        self.pages -= zspage.pages.len() as u64;
        Some(zspage.pages)
    }

    /// Points slot `slot` at its object's new place (compaction).
    pub(crate) fn relocate(&mut self, slot: usize, zspage: usize, obj: u16) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.zspage = zspage as u32;
            s.obj = obj;
        }
    }

    pub(crate) fn regroup(&mut self, id: usize) {
        let Some(z) = self.zspages[id].as_ref() else { return };
        let group = self.group_of(z.inuse);
        if usize::from(z.group) != group {
            self.unlink(id);
            self.link(id, group);
        }
    }

    fn link(&mut self, id: usize, group: usize) {
        let list = &mut self.groups[group];
        list.push(id as u32);
        let pos = list.len() as u32 - 1;
        if let Some(z) = self.zspages[id].as_mut() {
            z.group = group as u8;
            z.pos = pos;
        }
    }

    fn unlink(&mut self, id: usize) {
        let Some(z) = self.zspages[id].as_ref() else { return };
        let (group, pos) = (usize::from(z.group), z.pos as usize);
        let list = &mut self.groups[group];
        list.swap_remove(pos);
        if let Some(&moved) = list.get(pos) {
            if let Some(m) = self.zspages[moved as usize].as_mut() {
                m.pos = pos as u32;
            }
        }
    }

    /// Whether every slot a handle can name is live or retired.
    pub(crate) fn slots_exhausted(&self) -> bool {
        self.free_slots.is_empty() && self.slots.len() >= MAX_SLOTS
    }

    /// A free handle slot; `None` when the class has every slot a handle
    /// can name in use.
    fn take_slot(&mut self) -> Option<u32> {
        match self.free_slots.pop() {
            Some(slot) => Some(slot),
            None if self.slots.len() < MAX_SLOTS => {
                // The state word first: a slot in `slots` always has one.
                self.states.grow_to(self.slots.len());
                self.slots.push(Slot { generation: 1, ..Slot::default() });
                Some(self.slots.len() as u32 - 1)
            }
            None => None,
        }
    }

    /// Frees slot `slot` (its state word already `FREE`) with its
    /// generation bumped; a slot whose next generation would reach the
    /// pool's limit is retired instead (never handed out again):
    /// generations do not wrap.
    fn release_slot(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.zspage = 0;
        s.generation += 1;
        if s.generation < self.gen_limit {
            self.free_slots.push(slot as u32);
        }
    }

    /// Test hook: slot `slot`'s generation set to `generation` (a free
    /// slot only), to reach the limit without 2^28 cycles.
    #[cfg(test)]
    pub(crate) fn set_generation(&mut self, slot: usize, generation: u64) {
        if self.states.load(slot) == FREE {
            self.slots[slot].generation = generation;
        }
    }

    /// Linux's `zs_can_compact`: pages a perfect compaction would free
    /// (counting only the objects the zspages' pages can hold).
    pub(crate) fn can_compact(&self) -> u64 {
        let wasted = self.objs_allocated - self.objs_inuse;
        wasted / self.shape.objs_per_zspage as u64 * self.shape.pages_per_zspage as u64
    }

    /// Every page of the class, for the pool's teardown.
    pub(crate) fn take_all_pages(&mut self) -> Vec<PageBlock> {
        let mut pages = Vec::new();
        for zspage in self.zspages.iter_mut().filter_map(Option::take) {
            pages.extend(zspage.pages);
        }
        self.groups = Default::default();
        self.pages = 0;
        self.objs_allocated = 0;
        pages
    }

    /// Checks the class's bookkeeping: counts, groups, handles. For tests.
    pub(crate) fn check(&self, mm: &PageAllocator) -> Result<(), String> {
        let page_size = mm.geometry().page_size() as usize;
        let (mut inuse, mut zspages, mut backed, mut pages) = (0u64, 0u64, 0u64, 0u64);
        for (g, list) in self.groups.iter().enumerate() {
            for (pos, &id) in list.iter().enumerate() {
                let z = self.zspages[id as usize]
                    .as_ref()
                    .ok_or_else(|| format!("class {}: listed zspage {id} gone", self.index))?;
                if usize::from(z.group) != g || z.pos as usize != pos || self.group_of(z.inuse) != g {
                    return Err(format!("class {}: zspage {id} in group {g} pos {pos} is wrong", self.index));
                }
                if z.pages.is_empty() || z.pages.len() > self.shape.pages_per_zspage {
                    return Err(format!("class {}: zspage {id} has {} pages", self.index, z.pages.len()));
                }
                inuse += u64::from(z.inuse);
                zspages += 1;
                backed += Zspage::backed_objs(self.shape, page_size, z.pages.len()) as u64;
                pages += z.pages.len() as u64;
            }
        }
        if !self.groups[0].is_empty() {
            return Err(format!("class {}: {} empty zspages kept instead of freed", self.index, self.groups[0].len()));
        }
        if zspages as usize != self.zspages.iter().flatten().count() {
            return Err(format!("class {}: a zspage is in no group", self.index));
        }
        if inuse != self.objs_inuse || backed != self.objs_allocated || pages != self.pages {
            return Err(format!("class {}: counts disagree", self.index));
        }
        let mut live = 0u64;
        for (i, slot) in self.slots.iter().enumerate() {
            let word = self.states.load(i);
            if word == FREE {
                continue;
            }
            live += 1;
            let handle = format!("pool {} class {} slot {i} gen {}", self.pool, self.index, slot.generation);
            if holder(word) == FREE || word != state(holder(word), slot.generation) || slot.generation >= self.gen_limit
            {
                return Err(format!("class {}: {handle} has state word {word:#x} past the limits", self.index));
            }
            let z = self.zspages[slot.zspage as usize].as_ref().ok_or_else(|| format!("{handle} in a freed zspage"))?;
            if usize::from(slot.obj) >= Zspage::backed_objs(self.shape, page_size, z.pages.len())
                || slot.obj >= z.used()
            {
                return Err(format!("class {}: object of {handle} lies past its zspage's pages", self.index));
            }
            if z.header(mm, self.shape, slot.obj) != header_of(i) {
                return Err(format!("class {}: object of handle {handle} has another header", self.index));
            }
        }
        if live != self.objs_inuse {
            return Err(format!("class {}: {live} live handles, {inuse} objects in use", self.index));
        }
        Ok(())
    }
}

/// The live object `name` names in a class with slots `slots` and state
/// words `states`, or why it names none: the slot must be live, held as
/// the name says (by a handle, or by a raw word), and of the name's
/// generation (all 64 bits for a handle, the low bits a raw word carries
/// for a word). With the state word and its value, for a compare-and-swap
/// from it (a free).
fn resolve_in<'a>(
    slots: &[Slot],
    states: &'a SlotStates,
    name: &Name,
) -> Result<(Resolved, &'a StateWord, u32), ZsError> {
    let refused = ZsError::InvalidHandle(name.id);
    let (Some(slot), Some(cell)) = (slots.get(name.slot), states.get(name.slot)) else { return Err(refused) };
    let word = load_word(cell);
    let low = slot.generation & (RAW_GEN_LIMIT - 1);
    let named = match name.held {
        Held::Handle(generation) => slot.generation == generation && word == state(HANDLE, generation),
        Held::Raw(g) => g == low && word == state(RAW, g),
        Held::Queued(g) => g == low && (word == state(QUEUED, g) || word == state(HANDLE, g)),
    };
    if !named {
        return Err(refused);
    }
    Ok((Resolved { zspage: slot.zspage as usize, obj: slot.obj, len: usize::from(slot.len) }, cell, word))
}

/// The in-object header of the object in slot `slot`: what compaction
/// reads to find a live object's slot (never 0, which marks a free object).
pub(crate) fn header_of(slot: usize) -> u64 {
    slot as u64 + 1
}

/// The slot an in-object header names; `None` for a free object.
pub(crate) fn slot_of_header(header: u64) -> Option<usize> {
    header.checked_sub(1).map(|slot| slot as usize)
}
