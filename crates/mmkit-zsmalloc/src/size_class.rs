//! One size class's state, all of it behind the class lock: its zspages
//! sorted into fullness groups, its handle table and its object counts.
//!
//! Owns the fullness groups (Linux's `ZS_INUSE_RATIO_0, _10, …, _99, _100`:
//! allocation takes the fullest zspage that is not full, `find_get_zspage`),
//! the handle slots and the object operations on them. Must not allocate or
//! free pages: a zspage that empties is handed back to the caller, which
//! returns its pages after dropping the lock (the first patch of Linux's
//! 2026 `zs_free` series: the zone lock is not taken under the class lock).

use crate::class::ClassShape;
use crate::handle::{next_generation, Handle};
use crate::zspage::Zspage;
use crate::ZsError;
use mmkit::{PageAllocator, PageBlock};

/// Fullness groups: 0 %, then one per 10 % up to 99 %, then 100 %.
pub(crate) const NR_GROUPS: usize = 12;
/// The group of full zspages.
pub(crate) const GROUP_FULL: usize = NR_GROUPS - 1;

/// Where a live object is.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Slot {
    generation: u32,
    live: bool,
    zspage: u32,
    obj: u16,
    /// Bytes the caller asked for.
    len: u16,
}

/// A class's zspages, groups, handles and counts.
pub(crate) struct ClassState {
    pub(crate) shape: ClassShape,
    pub(crate) index: usize,
    pub(crate) zspages: Vec<Option<Zspage>>,
    free_ids: Vec<u32>,
    pub(crate) groups: [Vec<u32>; NR_GROUPS],
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    /// Objects the class's zspages can hold (Linux's `ZS_OBJS_ALLOCATED`).
    pub(crate) objs_allocated: u64,
    /// Objects in use (`ZS_OBJS_INUSE`).
    pub(crate) objs_inuse: u64,
}

/// A live object, as resolved from its handle under the class lock.
#[derive(Clone, Copy)]
pub(crate) struct Resolved {
    pub(crate) zspage: usize,
    pub(crate) obj: u16,
    pub(crate) len: usize,
}

impl ClassState {
    pub(crate) fn new(index: usize, shape: ClassShape) -> Self {
        Self {
            shape,
            index,
            zspages: Vec::new(),
            free_ids: Vec::new(),
            groups: Default::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            objs_allocated: 0,
            objs_inuse: 0,
        }
    }

    /// Linux's `get_fullness_group`.
    pub(crate) fn group_of(&self, inuse: u16) -> usize {
        let objs = self.shape.objs_per_zspage;
        match usize::from(inuse) {
            0 => 0,
            n if n == objs => GROUP_FULL,
            n => 100 * n / objs / 10 + 1,
        }
    }

    /// The fullest zspage that has room (Linux scans `ZS_INUSE_RATIO_99`
    /// down to `ZS_INUSE_RATIO_0`).
    fn zspage_with_room(&self) -> Option<usize> {
        (0..GROUP_FULL).rev().find_map(|g| self.groups[g].last()).map(|&id| id as usize)
    }

    /// Allocates an object of `len` bytes in an existing zspage.
    pub(crate) fn alloc(&mut self, mm: &PageAllocator, len: usize) -> Option<Handle> {
        let id = self.zspage_with_room()?;
        self.alloc_in(mm, id, len)
    }

    /// Allocates an object of `len` bytes in zspage `id`, which has room.
    pub(crate) fn alloc_in(&mut self, mm: &PageAllocator, id: usize, len: usize) -> Option<Handle> {
        let slot = self.take_slot();
        let handle = Handle::new(slot, self.index, self.slots[slot as usize].generation);
        let shape = self.shape;
        let zspage = self.zspages[id].as_mut()?;
        let obj = zspage.alloc_obj(mm, shape, handle.to_raw())?;
        self.slots[slot as usize] =
            Slot { live: true, zspage: id as u32, obj, len: len as u16, ..self.slots[slot as usize] };
        self.objs_inuse += 1;
        self.regroup(id);
        Some(handle)
    }

    /// Adds a new, empty zspage to the class; returns its id.
    pub(crate) fn insert_zspage(&mut self, zspage: Zspage) -> usize {
        let id = match self.free_ids.pop() {
            Some(id) => id as usize,
            None => {
                self.zspages.push(None);
                self.zspages.len() - 1
            }
        };
        self.objs_allocated += self.shape.objs_per_zspage as u64;
        self.zspages[id] = Some(zspage);
        self.link(id, 0);
        id
    }

    /// The live object `handle` names, or why it names none.
    pub(crate) fn resolve(&self, handle: Handle) -> Result<Resolved, ZsError> {
        match self.slots.get(handle.slot()) {
            Some(slot) if slot.live && slot.generation == handle.generation() => {
                Ok(Resolved { zspage: slot.zspage as usize, obj: slot.obj, len: usize::from(slot.len) })
            }
            _ => Err(ZsError::InvalidHandle(handle)),
        }
    }

    /// Writes `data` at the start of `handle`'s object.
    pub(crate) fn write_obj(&mut self, mm: &PageAllocator, handle: Handle, data: &[u8]) -> Result<(), ZsError> {
        let at = self.resolve(handle)?;
        if data.len() > at.len {
            return Err(ZsError::TooLong { len: data.len(), size: at.len });
        }
        let offset = Zspage::payload_offset(self.shape, at.obj);
        let zspage = self.zspages[at.zspage].as_mut().ok_or(ZsError::InvalidHandle(handle))?;
        zspage.write(mm, offset, data);
        Ok(())
    }

    /// Frees `handle`'s object. A zspage left empty is unlinked and its
    /// pages returned, for the caller to free once the lock is dropped.
    pub(crate) fn free(&mut self, mm: &PageAllocator, handle: Handle) -> Result<Option<Vec<PageBlock>>, ZsError> {
        let at = self.resolve(handle)?;
        let shape = self.shape;
        let Some(zspage) = self.zspages[at.zspage].as_mut() else {
            return Err(ZsError::InvalidHandle(handle));
        };
        zspage.free_obj(mm, shape, at.obj);
        self.objs_inuse -= 1;
        self.release_slot(handle.slot());
        Ok(self.regroup_or_unlink(at.zspage))
    }

    /// Moves zspage `id` to the group its use now puts it in; unlinks it
    /// and returns its pages if it is empty.
    pub(crate) fn regroup_or_unlink(&mut self, id: usize) -> Option<Vec<PageBlock>> {
        let inuse = self.zspages[id].as_ref().map_or(0, |z| z.inuse);
        if inuse != 0 {
            self.regroup(id);
            return None;
        }
        self.unlink(id);
        let zspage = self.zspages[id].take()?;
        self.free_ids.push(id as u32);
        self.objs_allocated -= self.shape.objs_per_zspage as u64;
        Some(zspage.pages)
    }

    /// Points `handle`'s slot at its object's new place (compaction).
    pub(crate) fn relocate(&mut self, handle: Handle, zspage: usize, obj: u16) {
        if let Some(slot) = self.slots.get_mut(handle.slot()) {
            slot.zspage = zspage as u32;
            slot.obj = obj;
        }
    }

    pub(crate) fn regroup(&mut self, id: usize) {
        let inuse = self.zspages[id].as_ref().map_or(0, |z| z.inuse);
        let group = self.group_of(inuse);
        if self.zspages[id].as_ref().is_some_and(|z| usize::from(z.group) != group) {
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

    fn take_slot(&mut self) -> u32 {
        match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot { generation: 1, ..Slot::default() });
                self.slots.len() as u32 - 1
            }
        }
    }

    fn release_slot(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.live = false;
        s.generation = next_generation(s.generation);
        self.free_slots.push(slot as u32);
    }

    /// Linux's `zs_can_compact`: pages a perfect compaction would free.
    pub(crate) fn can_compact(&self) -> u64 {
        let wasted = self.objs_allocated - self.objs_inuse;
        wasted / self.shape.objs_per_zspage as u64 * self.shape.pages_per_zspage as u64
    }

    /// Zspages in the class.
    pub(crate) fn nr_zspages(&self) -> usize {
        self.groups.iter().map(Vec::len).sum()
    }

    /// Every page of the class, for the pool's teardown.
    pub(crate) fn take_all_pages(&mut self) -> Vec<PageBlock> {
        let mut pages = Vec::new();
        for zspage in self.zspages.iter_mut().filter_map(Option::take) {
            pages.extend(zspage.pages);
        }
        self.groups = Default::default();
        pages
    }

    /// Checks the class's bookkeeping: counts, groups, handles. For tests.
    pub(crate) fn check(&self, mm: &PageAllocator) -> Result<(), String> {
        let mut inuse = 0u64;
        let mut zspages = 0u64;
        for (g, list) in self.groups.iter().enumerate() {
            for (pos, &id) in list.iter().enumerate() {
                let z = self.zspages[id as usize]
                    .as_ref()
                    .ok_or(format!("class {}: listed zspage {id} gone", self.index))?;
                if usize::from(z.group) != g || z.pos as usize != pos || self.group_of(z.inuse) != g {
                    return Err(format!("class {}: zspage {id} in group {g} pos {pos} is wrong", self.index));
                }
                inuse += u64::from(z.inuse);
                zspages += 1;
            }
        }
        if !self.groups[0].is_empty() {
            return Err(format!("class {}: {} empty zspages kept instead of freed", self.index, self.groups[0].len()));
        }
        if zspages as usize != self.zspages.iter().flatten().count() {
            return Err(format!("class {}: a zspage is in no group", self.index));
        }
        if inuse != self.objs_inuse || zspages * self.shape.objs_per_zspage as u64 != self.objs_allocated {
            return Err(format!("class {}: counts disagree", self.index));
        }
        let live: Vec<(usize, &Slot)> = self.slots.iter().enumerate().filter(|(_, s)| s.live).collect();
        if live.len() as u64 != self.objs_inuse {
            return Err(format!("class {}: {} live handles, {} objects in use", self.index, live.len(), inuse));
        }
        for (i, slot) in live {
            let handle = Handle::new(i as u32, self.index, slot.generation);
            let z = self.zspages[slot.zspage as usize].as_ref().ok_or(format!("handle {handle} in a freed zspage"))?;
            if z.header(mm, self.shape, slot.obj) != handle.to_raw() {
                return Err(format!("class {}: object of handle {handle} has another header", self.index));
            }
        }
        Ok(())
    }
}
