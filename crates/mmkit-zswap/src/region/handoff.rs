//! The slots through which a `SIGBUS` handler hands a load to the handler
//! thread (`fault::hand_off`, `fault::serve_handoffs`): a slot and its
//! states, below both the pager that holds the slots and the fault path
//! that uses them. Owns no page state and calls no operating system.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};

/// A load the `SIGBUS` handler hands to the handler thread: the page's
/// claim (`LOADING`) is the handler's, the work the thread's.
pub(crate) struct Handoff {
    /// `FREE` → `FILLING` → `PENDING` → `TAKEN` → `DONE_OK` / `DONE_FAILED`
    /// → `FREE`; the handler sleeps on it (a futex).
    pub(super) state: AtomicU32,
    /// The page to load (its index in the region).
    pub(super) page: AtomicUsize,
    /// Whether the fault was a write (the page is loaded writable).
    pub(super) write: AtomicBool,
}

impl Handoff {
    pub(crate) fn new() -> Self {
        Self { state: AtomicU32::new(FREE), page: AtomicUsize::new(0), write: AtomicBool::new(false) }
    }
}

// A hand-off's states (`Handoff::state`).
pub(super) const FREE: u32 = 0;
pub(super) const FILLING: u32 = 1;
pub(super) const PENDING: u32 = 2;
pub(super) const TAKEN: u32 = 3;
pub(super) const DONE_OK: u32 = 4;
pub(super) const DONE_FAILED: u32 = 5;
