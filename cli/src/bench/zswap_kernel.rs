//! The kernel side of `mmkit bench zswap`: a private zram device used as
//! swap (hot-added, lz4, `mkswap`, `swapon`), a memory cgroup that makes a
//! child process swap to it, and the child itself (`mmkit
//! __zswap-access`), which runs the same access loop as the mmkit side on
//! commands from its parent.
//!
//! Owns these kernel resources' lives: it never touches `/dev/zram0` or a
//! device or cgroup it did not make, and `Drop` undoes everything made
//! (swapoff, reset, hot_remove, rmdir), on failure paths too.

use super::harness::BenchError;
use mmkit_testkit::kernel_zram::real_pages;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

fn sys(path: &str, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("{path}: {e}"))
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// A hot-added zram device in use as swap.
pub struct ZramSwap {
    /// N of `/dev/zramN`.
    pub id: u32,
    swapped_on: bool,
}

impl ZramSwap {
    /// Hot-adds a device of `bytes` with lz4 and swaps on it; the error says
    /// why not (not root, no zram-control, no mkswap).
    pub fn add(bytes: u64) -> Result<Self, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not root".into());
        }
        let id: u32 = std::fs::read_to_string("/sys/class/zram-control/hot_add")
            .map_err(|e| format!("/sys/class/zram-control/hot_add: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("hot_add answered {e}"))?;
        // From here on, Drop resets and removes the device.
        let mut dev = Self { id, swapped_on: false };
        if id == 0 {
            dev.id = u32::MAX;
            return Err("hot_add returned zram0, which is never used".into());
        }
        sys(&format!("/sys/block/zram{id}/comp_algorithm"), "lz4")?;
        sys(&format!("/sys/block/zram{id}/disksize"), &bytes.to_string())?;
        let path = format!("/dev/zram{id}");
        run("mkswap", &[&path])?;
        run("swapon", &["-p", "100", &path])?;
        dev.swapped_on = true;
        Ok(dev)
    }

    /// The device's `mm_stat` columns.
    pub fn mm_stat(&self) -> Option<Vec<u64>> {
        let text = std::fs::read_to_string(format!("/sys/block/zram{}/mm_stat", self.id)).ok()?;
        Some(text.split_whitespace().filter_map(|c| c.parse().ok()).collect())
    }
}

impl Drop for ZramSwap {
    fn drop(&mut self) {
        if self.id == u32::MAX {
            return;
        }
        if self.swapped_on {
            let _ = run("swapoff", &[&format!("/dev/zram{}", self.id)]);
        }
        let _ = sys(&format!("/sys/block/zram{}/reset", self.id), "1");
        let _ = sys("/sys/class/zram-control/hot_remove", &self.id.to_string());
    }
}

/// A memory cgroup made for one child: v1 `memory.limit_in_bytes`, or v2
/// `memory.max` where that is the hierarchy.
pub struct MemCgroup {
    dir: PathBuf,
    /// The file a process writes its pid to, to join.
    pub procs: PathBuf,
}

impl MemCgroup {
    /// A cgroup named `name` limited to `limit` bytes.
    pub fn create(name: &str, limit: u64) -> Result<Self, String> {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), "memory.limit_in_bytes")
        } else if PathBuf::from("/sys/fs/cgroup/cgroup.controllers").exists() {
            (PathBuf::from("/sys/fs/cgroup").join(name), "memory.max")
        } else {
            return Err("no memory cgroup controller".into());
        };
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let group = Self { procs: dir.join("cgroup.procs"), dir };
        sys(&group.dir.join(limit_file).to_string_lossy(), &limit.to_string())?;
        // v1 only: reclaim anonymous memory as readily as file pages, so that
        // reclaim keeps the child's program text and swaps its buffer (with
        // the default, the cgroup's OOM killer sometimes took the child on a
        // loaded machine). Best effort: v2 has no such file.
        let _ = std::fs::write(group.dir.join("memory.swappiness"), "100");
        Ok(group)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // The child has exited by now; its charge may take a moment to go.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// The child process running the access loop inside the cgroup.
pub struct AccessChild {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl AccessChild {
    /// Starts `mmkit __zswap-access` with a buffer of `bytes`, joining
    /// `cgroup` first; returns once it has filled the buffer.
    pub fn start(cgroup: &MemCgroup, bytes: u64) -> Result<Self, BenchError> {
        let exe = std::env::current_exe().map_err(|e| BenchError::context("current_exe", e))?;
        let mut child = Command::new(exe)
            .args(["__zswap-access", "--procs"])
            .arg(&cgroup.procs)
            .args(["--bytes", &bytes.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::context("starting the access child", e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(BenchError("access child without pipes".into()));
        };
        let mut me = Self { child, stdin, stdout: BufReader::new(stdout) };
        let line = me.line()?;
        if line != "ready" {
            return Err(BenchError(format!("access child: {line}")));
        }
        Ok(me)
    }

    fn line(&mut self) -> Result<String, BenchError> {
        let mut line = String::new();
        self.stdout.read_line(&mut line).map_err(|e| BenchError::context("reading the access child", e))?;
        if line.is_empty() {
            return Err(BenchError("the access child exited".into()));
        }
        Ok(line.trim().to_string())
    }

    /// Has the child run `n` accesses of `pattern` (`rand` or `seq`) and
    /// returns the nanoseconds they took, as it timed them.
    pub fn accesses(&mut self, pattern: &str, n: u64) -> Result<f64, BenchError> {
        writeln!(self.stdin, "{pattern} {n}").map_err(|e| BenchError::context("writing to the access child", e))?;
        let line = self.line()?;
        line.parse().map_err(|_| BenchError(format!("access child answered {line:?}")))
    }
}

impl Drop for AccessChild {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

/// The access loop both sides run: `n` touches of 4 KiB pages of a buffer
/// of `pages` pages, at random pages (`rand`, xorshift from `state`) or at
/// consecutive ones from `state` on (`seq`); each touch reads the page's
/// first word, and every fourth also writes it back incremented.
pub fn access_loop(pattern: &str, n: u64, pages: u64, state: &mut u64, mut touch: impl FnMut(u64, bool)) {
    for k in 0..n {
        let page = if pattern == "seq" {
            *state = (*state + 1) % pages;
            *state
        } else {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *state % pages
        };
        touch(page, k % 4 == 3);
    }
}

/// The child's side (`mmkit __zswap-access --procs P --bytes N`): joins the
/// cgroup, fills a buffer with real pages, says `ready`, then serves
/// `rand N` / `seq N` with the nanoseconds taken until `quit` or EOF.
pub fn child_main(procs: &str, bytes: u64) -> Result<(), String> {
    std::fs::write(procs, std::process::id().to_string()).map_err(|e| format!("{procs}: {e}"))?;
    let pages = (bytes / 4096) as usize;
    let mut buf = vec![0u8; pages * 4096];
    {
        let data = real_pages(pages);
        for (i, page) in buf.chunks_exact_mut(4096).enumerate() {
            if !data.is_empty() {
                page.copy_from_slice(&data[i % data.len()]);
            }
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").and_then(|()| out.flush()).map_err(|e| e.to_string())?;
    let mut rand_state = 0x9e37_79b9_7f4a_7c15u64;
    let mut seq_state = 0u64;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let mut words = line.split_whitespace();
        let (Some(pattern), Some(n)) = (words.next(), words.next().and_then(|n| n.parse::<u64>().ok())) else {
            break;
        };
        let state = if pattern == "seq" { &mut seq_state } else { &mut rand_state };
        let start = Instant::now();
        access_loop(pattern, n, pages as u64, state, |page, write| {
            let at = page as usize * 4096;
            let v = std::hint::black_box(buf[at]);
            if write {
                buf[at] = v.wrapping_add(1);
            }
        });
        writeln!(out, "{}", start.elapsed().as_nanos()).and_then(|()| out.flush()).map_err(|e| e.to_string())?;
    }
    Ok(())
}
