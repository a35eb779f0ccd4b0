//! # mmkit-nbdkit — mmkit's zram as an nbdkit plugin
//!
//! A `cdylib` that nbdkit (1.30 or later; Debian 12's 1.32.5 is what it is
//! tested with) loads like any of its plugins:
//!
//! ```text
//! nbdkit -U /tmp/zram.sock target/release/libmmkit_nbdkit.so size=1G comp=lz4 control=/tmp/zram.ctl
//! ```
//!
//! Every connection shares one `mmkit_zram::Zram` (thread model parallel,
//! multi-conn). Reads and writes go to the device; flush and FUA have
//! nothing to do in RAM; trim frees whole pages; zero frees whole pages
//! unless the client forbids holes (`NO_HOLE`), in which case they become
//! zero pages; fast zero is always honoured (zeroing never compresses);
//! block status reports holes and zero pages from the slot table;
//! `mem_limit` reaches the client as `ENOSPC`. The preferred block size
//! advertised is 4096. Memory freed by trims goes back to the OS a couple
//! of seconds later without a `compact` ([`reclaim`]). `mmkit zram serve`
//! starts nbdkit with this plugin.
//!
//! Parameters: see [`params`]; the control socket: see [`control`].

pub mod control;
#[cfg(all(not(test), feature = "plugin"))]
mod glue;
pub mod ops;
pub mod params;
pub mod reclaim;
