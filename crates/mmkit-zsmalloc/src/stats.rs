//! The per-class table in the format of Linux's debugfs
//! `/sys/kernel/debug/zsmalloc/<pool>/classes` (`zs_stats_size_show`):
//! zspages per fullness group from 10 % to 100 %, objects allocated and in
//! use, pages used, pages per zspage and pages compaction could free.
//!
//! Owns formatting only; it takes each class lock briefly to read counts.

use crate::size_class::NR_GROUPS;
use std::fmt::Write;

impl crate::ZsPool {
    /// The per-class table, as Linux's debugfs `classes` file prints it.
    pub fn classes_table(&self) -> String {
        let inner = &self.inner;
        let mut out = String::new();
        let _ = write!(out, "{:>6} {:>5} ", "class", "size");
        for label in ["10%", "20%", "30%", "40%", "50%", "60%", "70%", "80%", "90%", "99%", "100%"] {
            let _ = write!(out, "{label:>9} ");
        }
        let _ = writeln!(
            out,
            "{:>13} {:>10} {:>10} {:>16} {:>8}",
            "obj_allocated", "obj_used", "pages_used", "pages_per_zspage", "freeable"
        );
        let mut totals = [0u64; NR_GROUPS];
        let (mut objs, mut used, mut pages, mut freeable) = (0u64, 0u64, 0u64, 0u64);
        for class in inner.serving_classes() {
            let state = inner.lock(class);
            let shape = state.shape;
            let class_pages = state.pages_held;
            let _ = write!(out, "{:>6} {:>5} ", class, shape.size);
            for (g, total) in totals.iter_mut().enumerate().skip(1) {
                let n = state.groups.list(g).len() as u64;
                *total += n;
                let _ = write!(out, "{n:>9} ");
            }
            let can = state.can_compact();
            let _ = writeln!(
                out,
                "{:>13} {:>10} {:>10} {:>16} {:>8}",
                state.objs_allocated, state.objs_inuse, class_pages, shape.pages_per_zspage, can
            );
            objs += state.objs_allocated;
            used += state.objs_inuse;
            pages += class_pages;
            freeable += can;
        }
        let _ = write!(out, "\n{:>6} {:>5} ", "Total", "");
        for total in &totals[1..] {
            let _ = write!(out, "{total:>9} ");
        }
        let _ = writeln!(out, "{objs:>13} {used:>10} {pages:>10} {:>16} {freeable:>8}", "");
        out
    }
}
