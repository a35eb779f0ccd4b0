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
use super::latency::{parse_line, TouchTimes};
use mmkit_testkit::kernel_zram::real_pages;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
/// `memory.high` where that is the hierarchy. Made without a limit, so that
/// the child's own footprint can be measured before the limit is set.
///
/// The child must never be OOM-killed: a memory cgroup at its limit whose
/// threads fault faster than reclaim frees pages (two threads refaulting
/// pages the LRU had just activated) can fail reclaim often enough in a row
/// to call its OOM killer, though there is swap to spare. So v1's OOM
/// killer is disabled (`memory.oom_control`): a thread that would have been
/// killed sleeps until the cgroup uncharges a page, which, when every
/// thread of the child sleeps, nothing would do (and the sleepers' own
/// reclaim may fail again as soon as they wake). A watchdog thread sees
/// `under_oom`, lowers the limit by [`RESCUE_BYTES`], which reclaims that
/// much in the watchdog's thread, and puts it back, which wakes the
/// sleepers (where the lowering is refused, it lifts the limit by as much
/// until none sleeps), and counts those rescues: the data's resident budget
/// is the kernel's as before, less (rarely more) by a MiB for a moment.
/// v2 has no such switch; its limit is `memory.high`, which throttles and
/// reclaims but never kills.
pub struct MemCgroup {
    dir: PathBuf,
    /// The file a process writes its pid to, to join.
    pub procs: PathBuf,
    limit_file: &'static str,
    usage_file: &'static str,
    /// The limit set, for the watchdog to put back (0: none yet).
    limit: Arc<AtomicU64>,
    /// The v1 watchdog, once a limit is set.
    watchdog: Option<Watchdog>,
}

/// How far the watchdog lowers (or lifts) a v1 limit to wake a child
/// sleeping in the cgroup's OOM wait.
pub const RESCUE_BYTES: u64 = 1 << 20;

/// The thread that wakes a v1 cgroup's OOM sleepers (see [`MemCgroup`]).
struct Watchdog {
    stop: Arc<AtomicBool>,
    rescues: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl MemCgroup {
    /// A cgroup named `name`, not limited yet.
    pub fn create(name: &str) -> Result<Self, String> {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let (dir, limit_file, usage_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), "memory.limit_in_bytes", "memory.usage_in_bytes")
        } else if PathBuf::from("/sys/fs/cgroup/cgroup.controllers").exists() {
            (PathBuf::from("/sys/fs/cgroup").join(name), "memory.high", "memory.current")
        } else {
            return Err("no memory cgroup controller".into());
        };
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let group = Self {
            procs: dir.join("cgroup.procs"),
            dir,
            limit_file,
            usage_file,
            limit: Arc::new(AtomicU64::new(0)),
            watchdog: None,
        };
        // v1 only: reclaim anonymous memory as readily as file pages, so that
        // reclaim keeps the child's program text and swaps its buffer.
        // Best effort: v2 has no such file.
        let _ = std::fs::write(group.dir.join("memory.swappiness"), "100");
        if group.is_v1() {
            sys(&group.dir.join("memory.oom_control").to_string_lossy(), "1")?;
        }
        Ok(group)
    }

    fn is_v1(&self) -> bool {
        self.limit_file == "memory.limit_in_bytes"
    }

    /// Limits the cgroup to `bytes` (and, on v1, starts the watchdog).
    pub fn set_limit(&mut self, bytes: u64) -> Result<(), String> {
        sys(&self.dir.join(self.limit_file).to_string_lossy(), &bytes.to_string())?;
        self.limit.store(bytes, Relaxed);
        if self.is_v1() && self.watchdog.is_none() {
            self.watchdog = Some(Watchdog::start(self.dir.clone(), self.limit.clone()));
        }
        Ok(())
    }

    /// Bytes charged to the cgroup now: its processes' memory, the page
    /// cache they brought in and the kernel's memory for them.
    pub fn usage(&self) -> Result<u64, String> {
        let path = self.dir.join(self.usage_file);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        text.trim().parse().map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Times the watchdog moved the limit to wake the child's threads
    /// sleeping at it.
    pub fn rescues(&self) -> u64 {
        self.watchdog.as_ref().map_or(0, |w| w.rescues.load(Relaxed))
    }

    /// Processes the kernel's OOM killer killed in the cgroup (v1's
    /// `oom_kill`, v2's `memory.events` `oom_kill`); 0 where unreadable.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.is_v1() { "memory.oom_control" } else { "memory.events" };
        oom_field(&self.dir.join(file), "oom_kill").unwrap_or(0)
    }
}

/// The number after `key` in a cgroup's `key value` lines.
fn oom_field(path: &std::path::Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

impl Watchdog {
    /// How long the watchdog waits for the cgroup's OOM notification
    /// before it looks at `under_oom` anyway (and at whether to stop).
    const PERIOD: Duration = Duration::from_millis(20);

    fn start(dir: PathBuf, limit: Arc<AtomicU64>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let rescues = Arc::new(AtomicU64::new(0));
        let (stop2, rescues2) = (stop.clone(), rescues.clone());
        let thread = std::thread::Builder::new()
            .name("memcg-watchdog".into())
            .spawn(move || {
                let oom = dir.join("memory.oom_control");
                let limit_file = dir.join("memory.limit_in_bytes").to_string_lossy().into_owned();
                let set = |bytes: u64| sys(&limit_file, &bytes.to_string()).is_ok();
                // v1's OOM notification: an eventfd the kernel signals when
                // a task of the cgroup goes to sleep at its limit, so that
                // the sleep lasts one wake-up, not a polling period.
                let notify = oom_eventfd(&dir, &oom);
                let mut raised = false;
                while !stop2.load(Relaxed) {
                    match &notify {
                        Some((efd, _)) => {
                            let mut fds = [rustix::event::PollFd::new(efd, rustix::event::PollFlags::IN)];
                            let timeout =
                                rustix::event::Timespec { tv_sec: 0, tv_nsec: Self::PERIOD.as_nanos() as i64 };
                            if matches!(rustix::event::poll(&mut fds, Some(&timeout)), Ok(n) if n > 0) {
                                let _ = rustix::io::read(efd, &mut [0u8; 8]);
                            }
                        }
                        None => std::thread::sleep(Duration::from_millis(1)),
                    }
                    let under_oom = oom_field(&oom, "under_oom") == Some(1);
                    let base = limit.load(Relaxed);
                    if under_oom {
                        rescues2.fetch_add(1, Relaxed);
                        // Lowering the limit reclaims down to it in this
                        // thread (which succeeds where the sleepers'
                        // reclaim kept failing); raising it back wakes them
                        // (the kernel's recovery on a larger limit). Where
                        // the lowering is refused (EBUSY), the limit goes
                        // above the budget instead, until none sleeps.
                        if set(base.saturating_sub(RESCUE_BYTES)) {
                            raised = !set(base);
                        } else {
                            raised = set(base + RESCUE_BYTES);
                        }
                    } else if raised {
                        raised = !set(base);
                    }
                }
                if raised {
                    set(limit.load(Relaxed));
                }
            })
            .ok();
        Self { stop, rescues, thread }
    }
}

/// An eventfd registered for `oom_control`'s notifications through
/// `cgroup.event_control` (v1), with the open control file it names; `None`
/// where the kernel refuses (the watchdog then polls).
fn oom_eventfd(dir: &std::path::Path, oom: &std::path::Path) -> Option<(std::os::fd::OwnedFd, std::fs::File)> {
    use std::os::fd::AsRawFd;
    let efd =
        rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK).ok()?;
    let control = std::fs::File::open(oom).ok()?;
    let line = format!("{} {}", efd.as_raw_fd(), control.as_raw_fd());
    std::fs::write(dir.join("cgroup.event_control"), line).ok()?;
    Some((efd, control))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        drop(self.watchdog.take());
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
    /// What the cgroup held besides the buffer once the child had filled
    /// it and run its loops once, with no limit set.
    pub footprint: u64,
}

impl AccessChild {
    /// Starts `mmkit __zswap-access` with a buffer of `bytes` in `cgroup`
    /// (not limited yet), waits until the child has filled its buffer and
    /// run its loops once, measures its footprint (what the cgroup holds
    /// besides the buffer: the program, libraries, stacks, page tables) and
    /// limits the cgroup to `limit(footprint)`, which swaps out whatever is
    /// over it.
    pub fn start(cgroup: &mut MemCgroup, bytes: u64, limit: impl Fn(u64) -> u64) -> Result<Self, BenchError> {
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
        // From here on, Drop ends the child.
        let mut me = Self { child, stdin, stdout: BufReader::new(stdout), footprint: 0 };
        me.expect("ready")?;
        me.footprint = cgroup.usage().map_err(BenchError)?.saturating_sub(bytes);
        cgroup.set_limit(limit(me.footprint)).map_err(BenchError)?;
        Ok(me)
    }

    fn expect(&mut self, word: &str) -> Result<(), BenchError> {
        let line = self.line()?;
        if line == word {
            Ok(())
        } else {
            Err(BenchError(format!("access child: {line}")))
        }
    }

    fn send(&mut self, line: &str) -> Result<(), BenchError> {
        writeln!(self.stdin, "{line}").map_err(|e| BenchError::context("writing to the access child", e))
    }

    fn line(&mut self) -> Result<String, BenchError> {
        let mut line = String::new();
        self.stdout.read_line(&mut line).map_err(|e| BenchError::context("reading the access child", e))?;
        if line.is_empty() {
            return Err(BenchError("the access child exited".into()));
        }
        Ok(line.trim().to_string())
    }

    /// Has the child run `n` touches of `pattern` (`rand`, `seq`, or
    /// `rand2`: two threads of `n / 2` random touches each) and returns the
    /// nanoseconds they took, as it timed them.
    pub fn accesses(&mut self, pattern: &str, n: u64) -> Result<f64, BenchError> {
        self.send(&format!("{pattern} {n}"))?;
        let line = self.line()?;
        line.parse().map_err(|_| BenchError(format!("access child answered {line:?}")))
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Forgets the per-touch times recorded so far.
    pub fn reset_times(&mut self) -> Result<(), BenchError> {
        self.send("reset")?;
        self.expect("ok")
    }

    /// Count, mean and p99 (ns) of the touches since the last reset.
    pub fn touch_stats(&mut self) -> Result<(u64, f64, f64), BenchError> {
        self.send("stats")?;
        let line = self.line()?;
        parse_line(&line).ok_or_else(|| BenchError(format!("access child answered {line:?}")))
    }
}

impl Drop for AccessChild {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

/// CPU time, in ns, of the kernel's side: the child process (its threads,
/// with their direct reclaim and the zram compression it does) and every
/// `kswapd` (the background reclaim it may wake).
pub fn kernel_cpu_ns(child: u32) -> f64 {
    let ticks: u64 = std::iter::once(child).chain(kswapd_pids()).map(super::nbd::cpu_ticks_of).sum();
    ticks as f64 * 1e9 / super::nbd::clock_ticks_per_second()
}

/// CPU time, in ns, of every thread of this process, finished ones
/// included (`/proc/self/stat`).
pub fn own_cpu_ns() -> f64 {
    super::nbd::cpu_ticks_of(std::process::id()) as f64 * 1e9 / super::nbd::clock_ticks_per_second()
}

/// The pids of the kernel's `kswapd` threads.
fn kswapd_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with("kswapd")))
        .collect()
}

/// Distinct real pages both sides fill their buffers with, in turn.
pub const DATA_PAGES: usize = 4096;

/// The page an access loop's buffer holds at `page`: `data`'s pages in
/// turn, the same on both sides.
pub fn page_data(data: &[Vec<u8>], page: usize) -> Option<&[u8]> {
    (!data.is_empty()).then(|| data[page % data.len()].as_slice())
}

/// The `k`th page of an access loop: at random (`rand`, xorshift from
/// `state`) or the next one from `state` on (`seq`); every fourth touch
/// writes.
fn next_page(sequential: bool, pages: u64, state: &mut u64) -> u64 {
    if sequential {
        *state = (*state + 1) % pages;
        *state
    } else {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state % pages
    }
}

/// The access loop both sides run: `n` touches of 4 KiB pages of a buffer
/// of `pages` pages, at random pages (`rand`, xorshift from `state`) or at
/// consecutive ones from `state` on (`seq`); each touch reads the page's
/// first word, and every fourth also writes it back incremented. Each touch
/// is timed into `times`.
pub fn access_loop(
    pattern: &str,
    n: u64,
    pages: u64,
    state: &mut u64,
    times: &mut TouchTimes,
    mut touch: impl FnMut(u64, bool),
) {
    let sequential = pattern == "seq";
    for k in 0..n {
        let page = next_page(sequential, pages, state);
        times.time(|| touch(page, k % 4 == 3));
    }
}

/// The seed of thread `t`'s random touches: threads of one run touch
/// different sequences.
pub fn thread_seed(t: u64) -> u64 {
    0x9e37_79b9_7f4a_7c15u64 ^ (t.wrapping_add(1)).wrapping_mul(0xd1b5_4a32_d192_ed03)
}

/// The child's side (`mmkit __zswap-access --procs P --bytes N`): joins the
/// cgroup, fills a buffer with real pages, runs each loop once (so that its
/// code, stacks and threads are part of the footprint the parent measures
/// next), says `ready`, then serves `rand N`, `seq N` and `rand2 N` with
/// the nanoseconds taken, `reset` with `ok` and `stats` with a
/// [`TouchTimes::line`], until `quit` or EOF.
pub fn child_main(procs: &str, bytes: u64) -> Result<(), String> {
    std::fs::write(procs, std::process::id().to_string()).map_err(|e| format!("{procs}: {e}"))?;
    let pages = (bytes / 4096) as usize;
    let buf: Vec<AtomicU64> = {
        let data = real_pages(DATA_PAGES.min(pages));
        (0..pages * 512)
            .map(|w| {
                let word = page_data(&data, w / 512).map_or(0, |p| {
                    let at = (w % 512) * 8;
                    u64::from_ne_bytes(p[at..at + 8].try_into().unwrap_or_default())
                });
                AtomicU64::new(word)
            })
            .collect()
    };
    let mut child = Loops {
        buf: &buf,
        times: Default::default(),
        rand_state: thread_seed(0),
        pair_states: [thread_seed(0), thread_seed(1)],
        seq_state: 0,
    };
    for warm_up in ["rand 64", "seq 64", "rand2 64", "reset"] {
        child.serve(warm_up);
    }
    let mut out = std::io::stdout().lock();
    let mut say = |line: &str| writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| e.to_string());
    say("ready")?;
    for line in std::io::stdin().lock().lines() {
        match child.serve(&line.map_err(|e| e.to_string())?) {
            Some(reply) => say(&reply)?,
            None => break,
        }
    }
    Ok(())
}

/// The child's buffer and loop state.
struct Loops<'a> {
    buf: &'a [AtomicU64],
    /// One thread's touches, then the two threads' of `rand2`.
    times: [TouchTimes; 3],
    rand_state: u64,
    /// The two threads' states of `rand2`, as the mmkit side seeds its own.
    pair_states: [u64; 2],
    seq_state: u64,
}

impl Loops<'_> {
    /// Runs one command and returns the reply; `None` ends the child.
    fn serve(&mut self, line: &str) -> Option<String> {
        let buf = self.buf;
        let pages = (buf.len() / 512) as u64;
        let touch = |page: u64, write: bool| {
            let word = &buf[page as usize * 512];
            let v = std::hint::black_box(word.load(Relaxed));
            if write {
                word.store(v.wrapping_add(1), Relaxed);
            }
        };
        let mut words = line.split_whitespace();
        let start = Instant::now();
        match (words.next(), words.next().and_then(|n| n.parse::<u64>().ok())) {
            (Some("reset"), None) => {
                self.times.iter_mut().for_each(TouchTimes::clear);
                Some("ok".into())
            }
            (Some("stats"), None) => {
                let [all, a, b] = &mut self.times;
                all.merge(a);
                all.merge(b);
                a.clear();
                b.clear();
                Some(all.line())
            }
            (Some("rand2"), Some(n)) => {
                let [_, a, b] = &mut self.times;
                let [x, y] = &mut self.pair_states;
                std::thread::scope(|s| {
                    for (state, times) in [(x, a), (y, b)] {
                        s.spawn(move || access_loop("rand", n / 2, pages, state, times, touch));
                    }
                });
                Some(start.elapsed().as_nanos().to_string())
            }
            (Some(pattern @ ("rand" | "seq")), Some(n)) => {
                let state = if pattern == "seq" { &mut self.seq_state } else { &mut self.rand_state };
                access_loop(pattern, n, pages, state, &mut self.times[0], touch);
                Some(start.elapsed().as_nanos().to_string())
            }
            _ => None,
        }
    }
}
