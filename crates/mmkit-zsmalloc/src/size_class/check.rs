//! The consistency check of a class's bookkeeping, for tests
//! (`ZsPool::check_invariants`): counts, fullness groups, freed stacks,
//! every live slot's object and header.

use super::{header_of, ClassState};
use crate::slot_state::{holder, state, FREE};
use crate::zspage::{self, Zspage};
use mmkit::PageAllocator;

impl ClassState {
    /// Checks the class's bookkeeping: counts, groups, freed stacks,
    /// handles. For tests.
    pub(crate) fn check(&self, mm: &PageAllocator) -> Result<(), String> {
        let class = self.index;
        let listed =
            self.groups.check(&self.zspages, |z| self.group_of(z.inuse)).map_err(|e| format!("class {class}: {e}"))?;
        if !self.groups.list(0).is_empty() {
            return Err(format!("class {class}: {} empty zspages kept instead of freed", self.groups.list(0).len()));
        }
        let (mut inuse, mut backed, mut pages) = (0u64, 0u64, 0u64);
        for (id, z) in self.zspages.iter().enumerate().filter(|(_, z)| z.is_live()) {
            if usize::from(z.npages) > self.chain
                || usize::from(z.backed) != Zspage::backed_objs(self.shape, self.page_size, usize::from(z.npages))
                || self.chain_of(id).iter().take(usize::from(z.npages)).any(Option::is_none)
            {
                return Err(format!("class {class}: zspage {id} has {} pages, {} backed objects", z.npages, z.backed));
            }
            let mut freed: Vec<u16> = self.freed[id * self.objs..][..usize::from(z.nfreed)].to_vec();
            freed.sort_unstable();
            freed.dedup();
            if freed.len() != usize::from(z.nfreed)
                || freed.last().is_some_and(|&o| o >= z.used)
                || z.inuse + z.nfreed != z.used
                || z.used > z.backed
            {
                return Err(format!("class {class}: zspage {id}'s freed objects disagree with its counts"));
            }
            inuse += u64::from(z.inuse);
            backed += u64::from(z.backed);
            pages += u64::from(z.npages);
        }
        if listed != self.zspages.iter().filter(|z| z.is_live()).count() {
            return Err(format!("class {class}: a zspage is in no group"));
        }
        if inuse != self.objs_inuse || backed != self.objs_allocated || pages != self.pages_held {
            return Err(format!("class {class}: counts disagree"));
        }
        let mut live = 0u64;
        for i in 0..self.nr_slots {
            let entry = self.states.get(i).ok_or(format!("class {class}: slot {i} has no entry"))?;
            let word = entry.state();
            if word == FREE {
                continue;
            }
            live += 1;
            let generation = entry.generation();
            let handle = format!("pool {} class {class} slot {i} gen {generation}", self.pool);
            if holder(word) == FREE || word != state(holder(word), generation) || generation >= self.gen_limit {
                return Err(format!("class {class}: {handle} has state word {word:#x} past the limits"));
            }
            let (id, obj) = entry.place();
            let z = self.zspage(id).ok_or_else(|| format!("{handle} in a freed zspage"))?;
            if obj >= z.backed || obj >= z.used || self.freed[id * self.objs..][..usize::from(z.nfreed)].contains(&obj)
            {
                return Err(format!("class {class}: object of {handle} lies past its zspage's pages or is free"));
            }
            let header = if self.huge {
                z.huge_handle
            } else {
                zspage::header_at(mm, self.chain_of(id), self.page_shift, self.offsets(obj).0)
            };
            if header != header_of(i) {
                return Err(format!("class {class}: object of handle {handle} has another header"));
            }
        }
        if live != self.objs_inuse {
            return Err(format!("class {class}: {live} live handles, {inuse} objects in use"));
        }
        Ok(())
    }
}
