//! mmkit's zram served by nbdkit (`mmkit zram serve`), driven by real NBD
//! clients: qemu-io and qemu-img, libnbd's nbdinfo, nbdcopy and nbdsh, and
//! fio's nbd engine. Each test starts its own server on a Unix socket in
//! a private directory. A missing client skips the test with a message
//! (fails it when `MMKIT_REQUIRE_NBD_CLIENTS=1`, as `.ci/run` sets).

mod addresses;
mod backing;
mod common;
mod control;
mod faults;
mod fio;
#[path = "../forms/mod.rs"]
mod forms;
mod libnbd;
mod lifecycle;
mod memory;
mod paths;
mod protocol;
mod qemu;
mod reclaim;
mod serve_edges;
mod syntax;
