//! libnbd's clients: `nbdcopy` round trips, `nbdinfo` (flags, block sizes,
//! `--map` on a fresh export and after writes) and `nbdsh` scripts for the
//! edge cases: zero with and without `NO_HOLE` and `FAST_ZERO`, trim of
//! partial pages, reads and writes past the end, flush and FUA.

use crate::common::{check, python, real_file, require, run, Server};
use std::process::Command;

#[test]
fn nbdcopy_round_trip_is_byte_identical_over_several_connections() {
    if !require(&["nbdkit", "nbdcopy"]) {
        return;
    }
    let server = Server::start("16M", &[]);
    let source = real_file(server.dir(), 16 << 20);
    check(Command::new("nbdcopy").args(["-C", "4", "--flush"]).arg(&source).arg(server.uri()));
    let back = server.dir().join("back.img");
    check(Command::new("nbdcopy").arg(server.uri()).arg(&back));
    assert!(std::fs::read(&source).unwrap() == std::fs::read(&back).unwrap(), "round trip differs");
    let mm = server.mm_stat();
    assert!(mm[0] > 0 && mm[2] < mm[0], "stored compressed: {mm:?}");
}

/// `nbdinfo --map` lines as (offset, length, type).
fn map(uri: &str) -> Vec<(u64, u64, u32)> {
    check(Command::new("nbdinfo").args(["--map", uri]))
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0].parse().unwrap(), cols[1].parse().unwrap(), cols[2].parse().unwrap())
        })
        .collect()
}

#[test]
fn nbdinfo_reports_the_flags_and_block_status_of_fresh_and_written_ranges() {
    if !require(&["nbdkit", "nbdinfo", "qemu-io"]) {
        return;
    }
    let size: u64 = 1 << 30;
    let server = Server::start("1G", &[]);
    let info = check(Command::new("nbdinfo").arg(server.uri()));
    for flag in [
        "can_fast_zero: true",
        "can_flush: true",
        "can_fua: true",
        "can_multi_conn: true",
        "can_trim: true",
        "can_zero: true",
        "block_size_minimum: 1",
        "block_size_preferred: 4096",
    ] {
        assert!(info.contains(flag), "no {flag:?} in\n{info}");
    }
    // Never-written ranges (nbdkit's zstd allocator crashes here).
    assert_eq!(map(server.uri()), vec![(0, size, 3)]);
    check(Command::new("qemu-io").args([
        "-f",
        "raw",
        server.uri(),
        "-c",
        "write -P 0x5a 1M 8k",
        "-c",
        "write -z 2M 4k",
        "-c",
        "write -P 0x77 1073737728 4k",
    ]));
    // Data where written; qemu-io's `write -z` forbids holes, so a zero
    // page (type 2); holes reading zero (type 3) everywhere else.
    let mib = 1u64 << 20;
    let expected = vec![
        (0, mib, 3),
        (mib, 8192, 0),
        (mib + 8192, mib - 8192, 3),
        (2 * mib, 4096, 2),
        (2 * mib + 4096, size - 2 * mib - 8192, 3),
        (size - 4096, 4096, 0),
    ];
    assert_eq!(map(server.uri()), expected);
    let totals = check(Command::new("nbdinfo").args(["--map", "--totals", server.uri()]));
    assert!(totals.lines().any(|l| l.split_whitespace().eq(["12288", "0.0%", "0", "data"])), "{totals}");
    assert_eq!(map(server.uri()), expected, "the server still answers");
}

/// Edge cases, one nbdsh script; prints "ok" at the end.
const EDGES: &str = r#"
import errno, sys, nbd
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(sys.argv[1])
size = h.get_size()
assert h.can_zero() and h.can_fast_zero() and h.can_trim() and h.can_flush() and h.can_fua() and h.can_multi_conn()
assert h.get_block_size(nbd.SIZE_MINIMUM) == 1, h.get_block_size(nbd.SIZE_MINIMUM)
assert h.get_block_size(nbd.SIZE_PREFERRED) == 4096

def states(offset, length):
    found = []
    def cb(context, start, entries, err):
        if context == nbd.CONTEXT_BASE_ALLOCATION:
            at = start
            for i in range(0, len(entries), 2):
                found.append((at, entries[i], entries[i + 1]))
                at += entries[i]
        return 0
    h.block_status(length, offset, cb)
    return [(o, n, f) for (o, n, f) in found if o < offset + length]

HOLE_ZERO = nbd.STATE_HOLE | nbd.STATE_ZERO
page = bytes(range(256)) * 16

# Zero that may punch holes, then zero with NO_HOLE: both read as zeroes,
# the first is a hole, the second allocated zeroes.
h.pwrite(page * 4, 0)
h.zero(8192, 0)
h.zero(8192, 8192, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(16384, 0) == bytes(16384)
assert states(0, 16384) == [(0, 8192, HOLE_ZERO), (8192, 8192, nbd.STATE_ZERO)], states(0, 16384)
# Fast zero is honoured, with and without NO_HOLE, over data.
h.pwrite(page * 4, 16384)
h.zero(8192, 16384, nbd.CMD_FLAG_FAST_ZERO)
h.zero(8192, 24576, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE)
assert h.pread(16384, 16384) == bytes(16384)
# Zero of partial pages zeroes exactly those bytes.
h.pwrite(page * 2, 65536)
h.zero(100, 65536 + 4000, nbd.CMD_FLAG_NO_HOLE)
h.zero(100, 65536 + 5000)
two = bytearray(page * 2)
two[4000:4100] = bytes(100)
two[5000:5100] = bytes(100)
assert h.pread(8192, 65536) == two

# Trim of partial pages: the whole page inside is freed, the partial ones keep their bytes.
h.pwrite(page * 3, 131072)
h.trim(4096 + 2 * 1000, 131072 + 3096)
assert states(131072, 12288) == [(131072, 4096, 0), (135168, 4096, HOLE_ZERO), (139264, 4096, 0)], states(131072, 12288)
assert h.pread(4096, 131072) == page and h.pread(4096, 139264) == page
assert h.pread(4096, 135168) == bytes(4096)

# Past the end: refused by the server (libnbd's own bounds check is off so
# the requests reach it), nothing written.
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_BOUNDS)
for request in (lambda: h.pread(4096, size - 1024), lambda: h.pwrite(page, size - 1024),
                lambda: h.zero(8192, size - 4096), lambda: h.trim(8192, size - 4096),
                lambda: h.pread(1, size)):
    try:
        request()
        raise AssertionError("a request past the end was served")
    except nbd.Error as e:
        assert e.errnum in (errno.EINVAL, errno.ENOSPC), e
        assert "out of bounds" not in e.string, e
assert h.pread(1024, size - 1024) == bytes(1024)

# Flush, FUA, cache.
h.pwrite(page, 1 << 20, nbd.CMD_FLAG_FUA)
h.flush()
h.cache(4096, 1 << 20)
assert h.pread(4096, 1 << 20) == page
h.shutdown()
print("ok")
"#;

#[test]
fn nbdsh_edge_cases_zero_trim_past_the_end_flush() {
    if !require(&["nbdkit", "nbdsh"]) {
        return;
    }
    let server = Server::start("8M", &[]);
    let out = check(&mut python(EDGES, &[server.uri()]));
    assert_eq!(out.trim(), "ok");
    let io: Vec<u64> = server.ctl(&["io_stat"]).unwrap().split_whitespace().map(|c| c.parse().unwrap()).collect();
    assert_eq!(io[0..2], [0, 0], "no failed reads or writes: {io:?}");
    // A second client on the same export sees the same bytes.
    let out = run(&mut python(
        "import sys, nbd\nh = nbd.NBD()\nh.connect_uri(sys.argv[1])\nprint(h.pread(4096, 1 << 20) == bytes(range(256)) * 16)",
        &[server.uri()],
    ));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "True");
}
