//! Recompression with secondary algorithms (Linux's
//! `CONFIG_ZRAM_MULTI_COMP`: `recompress "type=… threshold=… algo=…"`).
//!
//! Owns the recompression pass. Pages are chosen (idle, huge, or both;
//! larger than a threshold; not same-filled, written back or already
//! marked incompressible), marked `PP_SLOT`, and processed largest first,
//! as the kernel's size buckets do. A page is kept by the first secondary
//! algorithm, in priority order, that moves it to a smaller zsmalloc size
//! class; the slot's priority bits then say which algorithm reads it back.
//! A page that no algorithm up to the last one shrinks is marked
//! `INCOMPRESSIBLE` and skipped by later passes.

use crate::device::Device;
use crate::slot::{flags, SlotGuard};
use crate::ZramError;
use crate::PAGE_SIZE;
use std::sync::atomic::Ordering::Relaxed;

/// Which pages a recompression pass looks at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecompressType {
    /// Every stored page (through the API only: the attribute's text
    /// must name the pages).
    #[default]
    All,
    /// Pages marked idle.
    Idle,
    /// Pages stored uncompressed.
    Huge,
    /// Pages both huge and idle.
    HugeIdle,
}

/// A recompression request, as zram's `recompress` attribute takes it.
///
/// ```
/// use mmkit_zram::{RecompressParams, RecompressType};
/// let p = RecompressParams::parse("type=huge_idle threshold=3000").unwrap();
/// assert_eq!((p.kind, p.threshold), (RecompressType::HugeIdle, 3000));
/// assert!(RecompressParams::parse("type=sometimes").is_err());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecompressParams {
    /// Which pages.
    pub kind: RecompressType,
    /// Only pages whose compressed size is at least this (0: any), and
    /// only results below it.
    pub threshold: usize,
    /// Only the secondary algorithm of this name (`algo=`).
    pub algo: Option<String>,
    /// Only the secondary algorithm of this priority (`priority=`).
    pub priority: Option<usize>,
    /// At most this many pages (`max_pages=`; 0: no bound).
    pub max_pages: usize,
}

impl RecompressParams {
    /// Parses space-separated `key=value` words; `type=` is required.
    ///
    /// The kernel's `recompress_store` takes a request without `type=` as
    /// "every page", which a bare `echo > recompress` then does by mistake;
    /// here the pages must be named.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] naming the word, or saying `type=` is missing.
    pub fn parse(text: &str) -> Result<Self, ZramError> {
        if !text.split_whitespace().any(|w| w.starts_with("type=")) {
            return Err(ZramError::Invalid(format!(
                "recompress {:?}: say which pages with type=idle|huge|huge_idle",
                text.trim()
            )));
        }
        let mut params = Self::default();
        for word in text.split_whitespace() {
            let bad = || {
                ZramError::Invalid(format!("recompress: {word:?} (want type=idle|huge|huge_idle, threshold=N, algo=NAME, priority=N, max_pages=N)"))
            };
            let (key, value) = word.split_once('=').ok_or_else(bad)?;
            match key {
                "type" => {
                    params.kind = match value {
                        "idle" => RecompressType::Idle,
                        "huge" => RecompressType::Huge,
                        "huge_idle" => RecompressType::HugeIdle,
                        _ => return Err(bad()),
                    }
                }
                "threshold" => {
                    params.threshold = value.parse().ok().filter(|&n| n <= PAGE_SIZE).ok_or_else(bad)?;
                }
                "algo" => params.algo = Some(value.to_owned()),
                "priority" => params.priority = Some(value.parse().map_err(|_| bad())?),
                "max_pages" => params.max_pages = value.parse().map_err(|_| bad())?,
                _ => return Err(bad()),
            }
        }
        Ok(params)
    }

    fn wants(&self, slot_flags: u32) -> bool {
        let has = |f: u32| slot_flags & f != 0;
        match self.kind {
            RecompressType::All => true,
            RecompressType::Idle => has(flags::IDLE),
            RecompressType::Huge => has(flags::HUGE),
            RecompressType::HugeIdle => has(flags::HUGE) && has(flags::IDLE),
        }
    }
}

impl Device {
    /// Recompresses the pages `params` picks with the secondary
    /// algorithms; returns how many pages got smaller.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] when the device has no secondary algorithm or
    /// `algo`/`priority` names none of them; [`ZramError::NoSpace`] if the
    /// pool cannot hold a recompressed page (the pages done so far stay
    /// done, that page keeps its old contents).
    pub fn recompress(&self, params: &RecompressParams) -> Result<u64, ZramError> {
        let nr_algorithms = self.comps.len();
        if nr_algorithms < 2 {
            return Err(ZramError::Invalid(
                "recompress: the device has no secondary algorithm (recomp_algorithm)".into(),
            ));
        }
        let (first, end) = match (&params.algo, params.priority) {
            (Some(name), _) => {
                let priority = (1..nr_algorithms)
                    .find(|&p| self.comps[p].name() == name || self.comps[p].to_string() == *name)
                    .ok_or_else(|| ZramError::Invalid(format!("recompress: no secondary algorithm {name:?}")))?;
                (priority, priority + 1)
            }
            (None, Some(p)) if (1..nr_algorithms).contains(&p) => (p, p + 1),
            (None, Some(p)) => {
                return Err(ZramError::Invalid(format!("recompress: no secondary algorithm of priority {p}")))
            }
            (None, None) => (1, nr_algorithms),
        };
        let mut chosen = Vec::new();
        for (index, slot) in self.slots.iter() {
            let slot = slot.lock();
            let eligible = slot.allocated()
                && !slot.has(flags::WB | flags::SAME | flags::INCOMPRESSIBLE)
                && params.wants(slot.flags())
                && slot.size() >= params.threshold
                && slot.priority() + 1 < end;
            if eligible {
                slot.update_flags(flags::PP_SLOT, 0);
                chosen.push((slot.size(), index));
            }
        }
        // Largest first: they save the most (the kernel's size buckets).
        chosen.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let budget = if params.max_pages == 0 { usize::MAX } else { params.max_pages };
        let mut done = 0;
        let mut result = Ok(());
        for (n, &(_, index)) in chosen.iter().enumerate() {
            let Some(slot) = self.slots.get(index) else { continue };
            let slot = slot.lock();
            if !slot.has(flags::PP_SLOT) {
                continue;
            }
            slot.update_flags(0, flags::PP_SLOT);
            if n >= budget {
                continue;
            }
            match self.recompress_slot(index, &slot, first, end, params.threshold) {
                Ok(true) => done += 1,
                Ok(false) => {}
                Err(e) => {
                    result = Err(e);
                    drop(slot);
                    for &(_, rest) in &chosen[n + 1..] {
                        if let Some(slot) = self.slots.get(rest) {
                            slot.lock().update_flags(0, flags::PP_SLOT);
                        }
                    }
                    break;
                }
            }
        }
        result.map(|()| done)
    }

    /// Tries the algorithms of priorities `first..end` above the slot's own
    /// on one page, under its lock; true when the page got smaller.
    fn recompress_slot(
        &self,
        index: usize,
        slot: &SlotGuard<'_>,
        first: usize,
        end: usize,
        threshold: usize,
    ) -> Result<bool, ZramError> {
        let mut page = [0u8; PAGE_SIZE];
        self.load_locked(index, slot, &mut page)?;
        let old_size = slot.size();
        let old_class = self.pool.zs_lookup_class_index(old_size);
        let start = first.max(slot.priority() + 1);
        for priority in start..end {
            let attempt = self.comps[priority].compress(&page, |bytes| {
                let smaller = self.pool.zs_lookup_class_index(bytes.len()) < old_class
                    && bytes.len() < self.huge_size
                    && (threshold == 0 || bytes.len() < threshold);
                smaller.then(|| self.alloc_object(bytes))
            });
            if let Some(Some(stored)) = attempt {
                let (handle, size) = stored?;
                let idle = slot.flags() & flags::IDLE;
                let old = self.slot_free_extract(slot);
                slot.set_handle(handle);
                slot.set_size(size);
                slot.set_priority(priority);
                slot.update_flags(idle, 0);
                self.counters.hot().pages_stored.fetch_add(1, Relaxed);
                self.counters.hot().compr_data_size.fetch_add(size as i64, Relaxed);
                if let Some(old) = old {
                    let _ = self.pool.zs_free_raw(&self.key, old);
                }
                return Ok(true);
            }
        }
        if end == self.comps.len() {
            // Every algorithm up to the last has had its try.
            slot.update_flags(flags::INCOMPRESSIBLE, 0);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_parses_and_unknown_words_are_refused() {
        let p = RecompressParams::parse("type=idle threshold=1000 algo=zstd max_pages=5").unwrap();
        assert_eq!(p.kind, RecompressType::Idle);
        assert_eq!((p.threshold, p.algo.as_deref(), p.max_pages), (1000, Some("zstd"), 5));
        assert_eq!(RecompressParams::parse("type=huge priority=2").unwrap().priority, Some(2));
        for bad in
            ["", "priority=2", "threshold=100", "type", "type=idle threshold=9999", "type=idle speed=3", "type=all"]
        {
            assert!(matches!(RecompressParams::parse(bad), Err(ZramError::Invalid(_))), "{bad}");
        }
    }
}
