//! A class's fullness groups (Linux's `ZS_INUSE_RATIO_0, _10, …, _99,
//! _100` lists): which zspages are how full, so that allocation takes the
//! fullest zspage that is not full (`find_get_zspage`) and compaction the
//! emptiest.
//!
//! Owns the lists and a bitmap of the non-empty ones. A zspage records its
//! group and its position in the group's list, so moving it is a
//! `swap_remove` and a `push`; like Linux's `fix_fullness_group`, the
//! class moves a zspage only when the group its use puts it in changes.
//! Knows nothing of objects or pages.

use crate::zspage::Zspage;

/// Fullness groups: 0 %, then one per 10 % up to 99 %, then 100 %.
pub(crate) const NR_GROUPS: usize = 12;
/// The group of full zspages.
pub(crate) const GROUP_FULL: usize = NR_GROUPS - 1;

/// Linux's `get_fullness_group` for every count of objects in use of a
/// zspage of `objs` objects: `table[inuse]`.
pub(crate) fn fullness_table(objs: usize) -> Box<[u8]> {
    (0..=objs)
        .map(|n| match n {
            0 => 0,
            // floor(floor(100 n / objs) / 10) is floor(10 n / objs).
            n if n == objs => GROUP_FULL as u8,
            n => (10 * n / objs + 1) as u8,
        })
        .collect()
}

/// The lists of one class: `NR_GROUPS` of them, in an array of 16 so that
/// a group number masked to 4 bits indexes it without a bounds check.
#[derive(Default)]
pub(crate) struct Groups {
    lists: [Vec<u32>; 16],
    /// Bit `g` set when list `g` is not empty.
    nonempty: u16,
}

impl Groups {
    /// The zspages in group `g`, oldest first.
    pub(crate) fn list(&self, g: usize) -> &[u32] {
        &self.lists[g & 15]
    }

    /// Lists zspage `id` in group `group` (it is in none).
    #[inline(always)]
    pub(crate) fn link(&mut self, zspages: &mut [Zspage], id: usize, group: usize) {
        let list = &mut self.lists[group & 15];
        list.push(id as u32);
        let z = &mut zspages[id];
        z.group = group as u8;
        z.pos = list.len() as u32 - 1;
        self.nonempty |= 1 << group;
    }

    /// Takes zspage `id` off its group's list.
    #[inline(always)]
    pub(crate) fn unlink(&mut self, zspages: &mut [Zspage], id: usize) {
        let (group, pos) = (usize::from(zspages[id].group), zspages[id].pos as usize);
        let list = &mut self.lists[group & 15];
        list.swap_remove(pos);
        match list.get(pos) {
            Some(&moved) => zspages[moved as usize].pos = pos as u32,
            None if list.is_empty() => self.nonempty &= !(1 << group),
            None => {}
        }
    }

    /// Moves zspage `id` to group `group`.
    #[inline(always)]
    pub(crate) fn move_to(&mut self, zspages: &mut [Zspage], id: usize, group: usize) {
        self.unlink(zspages, id);
        self.link(zspages, id, group);
    }

    /// The fullest zspage that is not full and whose next free object is
    /// backed, other than `except`, or else (`Err`) the fullest that has
    /// room once it has another page (Linux's `find_get_zspage` scans
    /// `ZS_INUSE_RATIO_99` down to `ZS_INUSE_RATIO_0`). Only a zspage still
    /// growing its chain can lack a backed object (about one per class),
    /// so the search rarely looks past the first.
    #[inline]
    pub(crate) fn find(&self, zspages: &[Zspage], except: Option<usize>) -> Result<usize, Option<usize>> {
        let mut groups = self.nonempty & ((1 << GROUP_FULL) - 1);
        let mut needs_page = None;
        while groups != 0 {
            let g = (u16::BITS - 1 - groups.leading_zeros()) as usize;
            groups &= !(1 << g);
            for &id in self.lists[g & 15].iter().rev() {
                let id = id as usize;
                if Some(id) == except {
                    continue;
                }
                if zspages[id].has_backed_room() {
                    return Ok(id);
                }
                needs_page = needs_page.or(Some(id));
            }
        }
        Err(needs_page)
    }

    /// The emptiest zspage that holds anything (Linux's
    /// `isolate_src_zspage` scans from `ZS_INUSE_RATIO_10` upward).
    pub(crate) fn emptiest(&self) -> Option<usize> {
        (1..GROUP_FULL).find_map(|g| self.lists[g].first()).map(|&id| id as usize)
    }

    /// Checks that the lists and bitmap agree with `zspages`' records and
    /// `group_of`; returns the zspages listed. For tests.
    pub(crate) fn check(&self, zspages: &[Zspage], group_of: impl Fn(&Zspage) -> usize) -> Result<usize, String> {
        let mut listed = 0;
        for (g, list) in self.lists.iter().enumerate().take(NR_GROUPS) {
            if (self.nonempty >> g & 1 == 1) == list.is_empty() {
                return Err(format!("group {g}: bitmap says {:#x}, the list has {}", self.nonempty, list.len()));
            }
            for (pos, &id) in list.iter().enumerate() {
                let z = zspages.get(id as usize).filter(|z| z.is_live()).ok_or(format!("listed zspage {id} gone"))?;
                if usize::from(z.group) != g || z.pos as usize != pos || group_of(z) != g {
                    return Err(format!("zspage {id} in group {g} pos {pos} is wrong"));
                }
                listed += 1;
            }
        }
        Ok(listed)
    }
}
