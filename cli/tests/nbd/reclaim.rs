//! Trimmed memory goes back to the OS: real-ish data written through
//! `nbdcopy`, all of it trimmed with `qemu-io`; the nbdkit process's
//! resident size (`VmRSS` in `/proc/PID/status`) must fall below 40 % of
//! its peak — within 10 s with no `compact` (the plugin's reclaim thread
//! runs free page reporting after large frees), and at once after
//! `compact`. Both print the sizes they saw.

use crate::common::{check, real_file, require, Server};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const WRITTEN: u64 = 256 << 20;

/// The nbdkit process serving `server`: the one whose command line names
/// the server's private directory (its socket is there).
pub fn nbdkit_pid(server: &Server) -> u32 {
    let dir = server.dir().to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<String> =
                cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            args.first().is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "nbdkit"))
                && args.iter().any(|a| a.contains(&dir))
        })
        .expect("an nbdkit process serving the test's socket")
}

/// A `kB` line of `/proc/PID/status`, in bytes.
pub fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).expect("a number") * 1024
}

#[test]
fn trim_all_then_compact_gives_the_memory_back() {
    if !require(&["nbdkit", "nbdcopy", "qemu-io"]) {
        return;
    }
    let server = Server::start("512M", &[]);
    let pid = nbdkit_pid(&server);
    let source = real_file(server.dir(), WRITTEN as usize);
    check(Command::new("nbdcopy").arg(&source).arg(server.uri()));
    let written = status_bytes(pid, "VmRSS:");
    let peak = written.max(status_bytes(pid, "VmHWM:"));
    let stored = server.mm_stat()[2];
    assert!(stored > 32 << 20, "the device holds {stored} bytes after the copy");
    check(Command::new("qemu-io").args(["-f", "raw", server.uri(), "-c", &format!("discard 0 {WRITTEN}")]));
    let trimmed = status_bytes(pid, "VmRSS:");
    server.ctl(&["compact"]).expect("compact");
    let after = status_bytes(pid, "VmRSS:");
    let mm_stat = server.mm_stat();
    eprintln!(
        "nbdkit rss: peak {peak}, after the copy {written}, after the trim {trimmed}, after compact {after}; mm_stat {mm_stat:?}"
    );
    assert_eq!(mm_stat[0], 0, "orig_data_size after trimming everything");
    // What is left is the slot table: a 64 KiB chunk for each 16 MiB
    // written to (nbdcopy skips the zero run), and the directory (24 bytes
    // a 16 MiB of device).
    let chunks = (mm_stat[2] - 32 * 24) / (64 << 10);
    assert_eq!(mm_stat[2], chunks * (64 << 10) + 32 * 24, "mem_used_total after trimming everything: {mm_stat:?}");
    assert!((8..=16).contains(&chunks), "{chunks} chunks of slot table");
    assert!(after * 10 < peak * 4, "resident {after} bytes after compact, not below 40 % of the peak {peak}");
}

#[test]
fn trim_all_gives_the_memory_back_within_10_s_without_compact() {
    if !require(&["nbdkit", "nbdcopy", "qemu-io"]) {
        return;
    }
    const BIG: u64 = 512 << 20;
    let server = Server::start("1G", &[]);
    let pid = nbdkit_pid(&server);
    let source = real_file(server.dir(), BIG as usize);
    check(Command::new("nbdcopy").arg(&source).arg(server.uri()));
    std::fs::remove_file(&source).unwrap();
    let written = status_bytes(pid, "VmRSS:");
    let peak = written.max(status_bytes(pid, "VmHWM:"));
    let stored = server.mm_stat()[2];
    assert!(stored > 64 << 20, "the device holds {stored} bytes after the copy");
    check(Command::new("qemu-io").args(["-f", "raw", server.uri(), "-c", &format!("discard 0 {BIG}")]));
    let trimmed_at = Instant::now();
    let trimmed = status_bytes(pid, "VmRSS:");
    let mut seen = Vec::new();
    let after = loop {
        let rss = status_bytes(pid, "VmRSS:");
        seen.push((trimmed_at.elapsed().as_millis(), rss));
        if rss * 10 < peak * 4 || trimmed_at.elapsed() > Duration::from_secs(10) {
            break rss;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let took = trimmed_at.elapsed();
    let mm_stat = server.mm_stat();
    eprintln!(
        "nbdkit rss without compact: peak {peak}, after the copy {written}, after the trim {trimmed}, \
         {after} after {took:?}; samples (ms, bytes) {seen:?}; mm_stat {mm_stat:?}"
    );
    assert_eq!(mm_stat[0], 0, "orig_data_size after trimming everything");
    assert_eq!(mm_stat[6], 0, "no compact ran (pages_compacted)");
    assert!(after * 10 < peak * 4, "resident {after} bytes 10 s after the trim, not below 40 % of the peak {peak}");
}
