//! One memory check for every size change, and the slot table in
//! `mm_stat`: a `disksize` after a `reset` is checked as `serve --size` is
//! (a table larger than the machine is refused, the device left
//! uninitialised), and the table's chunks, allocated as pages are written,
//! count in `mem_used_total` and against `mem_limit`: one-byte writes
//! 16 MiB apart, each of which costs a 64 KiB chunk, stop with ENOSPC at
//! the limit, and without one nbdkit's resident size grows no more than
//! `mem_used_total` says.

use crate::common::{python, require, Server};
use crate::reclaim::{nbdkit_pid, status_bytes};

/// One-byte writes 16 MiB apart from `first` (in 16 MiB steps), `count`
/// of them, over one connection; prints how many were taken and how many
/// failed with ENOSPC (any other error fails the script).
const SPARSE_WRITES: &str = "
import errno, nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
first, count = int(sys.argv[2]), int(sys.argv[3])
ok = nospc = 0
for k in range(first, first + count):
    try:
        h.pwrite(b'x', k << 24)
        ok += 1
    except nbd.Error as e:
        if e.errno != errno.ENOSPC and 'ENOSPC' not in str(e):
            raise
        nospc += 1
print(ok, nospc)
";

fn sparse_writes(server: &Server, first: u64, count: u64) -> (u64, u64) {
    let out = crate::common::check(&mut python(SPARSE_WRITES, &[server.uri(), &first.to_string(), &count.to_string()]));
    let numbers: Vec<u64> = out.split_whitespace().map(|n| n.parse().expect("a count")).collect();
    (numbers[0], numbers[1])
}

#[test]
fn disksize_after_reset_is_checked_and_the_slot_table_counts_in_mm_stat_and_mem_limit() {
    if !require(&["nbdkit", "nbdsh"]) {
        return;
    }
    let server = Server::start("4M", &[]);
    let pid = nbdkit_pid(&server);
    server.ctl(&["reset"]).expect("reset with no client");
    let err = server.ctl(&["disksize", "20T"]).unwrap_err();
    assert!(err.contains("slot table alone would need") && err.contains("GiB"), "{err}");
    assert_eq!(server.ctl(&["initstate"]).unwrap(), "0\n", "a refused disksize leaves the device uninitialised");

    server.ctl(&["mem_limit", "2M"]).unwrap();
    server.ctl(&["disksize", "64G"]).expect("a 64 GiB device: 256 MiB of slot table at most");
    let directory = 4096 * 24;
    assert_eq!(server.mm_stat()[2], directory, "mem_used_total of a fresh device: the table's directory");
    let rss_before = status_bytes(pid, "VmRSS:");
    let (ok, nospc) = sparse_writes(&server, 0, 400);
    let mm = server.mm_stat();
    let rss_limited = status_bytes(pid, "VmRSS:");
    eprintln!("mem_limit 2M: {ok} writes taken, {nospc} ENOSPC; mm_stat {mm:?}; rss {rss_before} -> {rss_limited}");
    assert!(nospc > 0 && ok < 40, "{ok} writes of a new 64 KiB chunk each fit a 2 MiB limit");
    assert!(mm[2] >= directory + ok * (64 << 10), "every chunk counted: {mm:?}");
    assert!(mm[2] <= (2 << 20) + (64 << 10) + (32 << 10), "mem_used_total past the limit: {mm:?}");
    assert!(rss_limited < rss_before + (8 << 20), "nbdkit grew {} bytes under a 2 MiB limit", rss_limited - rss_before);

    // No limit: the table grows, and mm_stat shows it grow.
    server.ctl(&["mem_limit", "0"]).unwrap();
    let (ok, nospc) = sparse_writes(&server, 1000, 400);
    assert_eq!((ok, nospc), (400, 0));
    let grown = server.mm_stat();
    let rss_after = status_bytes(pid, "VmRSS:");
    let counted = grown[2] - mm[2];
    let resident = rss_after.saturating_sub(rss_limited);
    eprintln!("no limit: 400 writes; mem_used_total +{counted}, rss +{resident}");
    assert!(counted >= 400 * (64 << 10), "400 chunks of 64 KiB: {counted} bytes counted");
    assert!(resident <= counted + (8 << 20), "nbdkit grew {resident} bytes, mm_stat counts {counted}");
}
