//! Reporting: `/proc`-style text, snapshots of zones and per-CPU lists, and
//! the invariant checker. Reads the allocator's state; changes none of it.

pub(crate) mod info;
pub(crate) mod invariants;
pub mod procfs;
