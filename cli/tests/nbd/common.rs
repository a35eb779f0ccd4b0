//! What every real-client test shares: the plugin built for this test run,
//! the client tools (a missing one skips the test with a message, or fails
//! it when `MMKIT_REQUIRE_NBD_CLIENTS=1`, as CI sets), a server started
//! with `mmkit zram serve` in a private directory, and test data.

use mmkit_testkit::XorShift64;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The `mmkit` binary under test.
pub fn mmkit() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mmkit"))
}

/// Builds the plugin into the directory of the `mmkit` binary under test,
/// where `mmkit zram serve` looks for it, once per test run.
///
/// No test target depends on the `mmkit-nbdkit` cdylib (a cdylib cannot
/// be a Rust dependency), so `cargo test` alone may not have built it, or
/// may have left an old one. Running cargo again with the same target
/// directory and profile is cheap when it is up to date and always right:
/// cargo releases its build lock before it runs the tests.
pub fn plugin() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let bin_dir = mmkit().parent().ok_or("no directory for mmkit")?;
            let target_dir = bin_dir.parent().ok_or("no target directory")?;
            let profile = match bin_dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") => "dev",
                Some(other) => other,
                None => return Err("no profile directory".to_owned()),
            };
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let out = Command::new(cargo)
                .args(["build", "--quiet", "-p", "mmkit-nbdkit", "--profile", profile, "--target-dir"])
                .arg(target_dir)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .map_err(|e| format!("running cargo: {e}"))?;
            if !out.status.success() {
                return Err(format!("cargo build -p mmkit-nbdkit failed:\n{}", String::from_utf8_lossy(&out.stderr)));
            }
            let plugin = bin_dir.join("libmmkit_nbdkit.so");
            if plugin.is_file() {
                Ok(plugin)
            } else {
                Err(format!("{} was not built", plugin.display()))
            }
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Whether `name` is an executable on `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

/// A Python that can import libnbd's `nbd` module (what `nbdsh` runs):
/// the first `python3` on `PATH`, else the system's.
pub fn nbd_python() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            ["python3", "/usr/bin/python3"].into_iter().map(PathBuf::from).find(|python| {
                Command::new(python)
                    .args(["-c", "import nbd"])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
        })
        .clone()
}

/// True when every tool is there. Otherwise the test is skipped with a
/// message naming the packages, or fails when `MMKIT_REQUIRE_NBD_CLIENTS`
/// is `1` (CI installs the tools and must not skip silently).
pub fn require(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|&tool| if tool == "nbdsh" { nbd_python().is_none() } else { !on_path(tool) })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let message =
        format!("missing {}: apt-get install nbdkit libnbd-bin python3-libnbd fio qemu-utils", missing.join(", "));
    if std::env::var("MMKIT_REQUIRE_NBD_CLIENTS").is_ok_and(|v| v == "1") {
        panic!("{message} (MMKIT_REQUIRE_NBD_CLIENTS=1 turns this skip into a failure)");
    }
    eprintln!("skipped: {message}");
    false
}

/// Runs a command to completion, failing the test if it cannot start.
pub fn run(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{command:?}: {e}"))
}

/// Runs a command that must succeed; returns its stdout.
pub fn check(command: &mut Command) -> String {
    let out = run(command);
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `nbdsh`-style Python: `script` runs with `uri` and the extra `args` in
/// `sys.argv[1..]`.
pub fn python(script: &str, args: &[&str]) -> Command {
    let python = nbd_python().expect("require(&[\"nbdsh\"]) first");
    let mut command = Command::new(python);
    command.arg("-c").arg(script).args(args);
    command
}

/// A device served by `mmkit zram serve` on a Unix socket in a private
/// directory, with its control socket beside it; stopped (SIGTERM) when
/// dropped.
pub struct Server {
    child: Option<Child>,
    dir: tempfile::TempDir,
    uri: String,
}

impl Server {
    /// `mmkit zram serve --size SIZE ARGS…`, once it printed its URI.
    pub fn start(size: &str, args: &[&str]) -> Self {
        plugin();
        let dir = tempfile::Builder::new().prefix("mmkit-nbd-test-").tempdir().expect("a temporary directory");
        let mut child = Command::new(mmkit())
            .args(["zram", "serve", "--size", size, "--unix"])
            .arg(dir.path().join("nbd.sock"))
            .arg("--control")
            .arg(dir.path().join("ctl.sock"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mmkit zram serve starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let uri = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.starts_with("nbd") => line.trim().to_owned(),
            other => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("mmkit exits");
                panic!("no URI from mmkit zram serve ({other:?}); stderr: {}", String::from_utf8_lossy(&out.stderr));
            }
        };
        Self { child: Some(child), dir, uri }
    }

    /// The NBD URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The private directory holding the sockets.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The control socket.
    pub fn control(&self) -> PathBuf {
        self.dir.path().join("ctl.sock")
    }

    /// `mmkit zram ctl CONTROL REQUEST…`: its output, or the error it
    /// printed.
    pub fn ctl(&self, request: &[&str]) -> Result<String, String> {
        let out = run(Command::new(mmkit()).args(["zram", "ctl"]).arg(self.control()).args(request));
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            assert_eq!(out.status.code(), Some(1), "ctl failures exit 1");
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// fio's nbd engine on the export, ready to run: four jobs (four
    /// connections) writing 4 KiB blocks at random at queue depth 16, each
    /// `per_job` bytes of its own, `loops` times, every block checked with
    /// crc32c when read back; JSON on stdout. It runs in the server's
    /// private directory, where fio would keep its verify state (it is told
    /// to keep none).
    pub fn fio_verify(&self, per_job: &str, loops: u32) -> Command {
        let mut fio = Command::new("fio");
        fio.current_dir(self.dir()).args([
            "--name=verify",
            "--ioengine=nbd",
            &format!("--uri={}", self.uri()),
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--numjobs=4",
            &format!("--size={per_job}"),
            &format!("--loops={loops}"),
            &format!("--offset_increment={per_job}"),
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--buffer_compress_percentage=50",
            "--refill_buffers",
            "--output-format=json",
        ]);
        fio
    }

    /// `mm_stat`'s nine columns.
    pub fn mm_stat(&self) -> Vec<u64> {
        let text = self.ctl(&["mm_stat"]).expect("mm_stat");
        text.split_whitespace().map(|c| c.parse().expect("a number")).collect()
    }

    /// Sends `signal` to `mmkit zram serve` and waits for it (30 s at
    /// most).
    pub fn signal(&mut self, signal: rustix::process::Signal) -> ExitStatus {
        let mut child = self.child.take().expect("still running");
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, signal).expect("kill");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("mmkit zram serve did not stop within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal(rustix::process::Signal::TERM);
        }
    }
}

/// `len` bytes from `seed`: pseudo-random, incompressible.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = XorShift64::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A real file's worth of test data, `len` bytes: pages of the system's
/// libraries (compressible as real data is), a run of zeroes, random bytes
/// and a short text tail.
pub fn real_file(dir: &Path, len: usize) -> PathBuf {
    let mut data = Vec::with_capacity(len);
    for page in mmkit_testkit::kernel_zram::real_pages(len / 2 / 4096) {
        data.extend_from_slice(&page);
    }
    data.resize(data.len() + len / 8, 0);
    data.extend_from_slice(&random_bytes(7, len / 8));
    let text = b"mmkit zram over NBD: the last bytes of a file that does not end on a page\n";
    while data.len() < len {
        data.extend_from_slice(text);
    }
    data.truncate(len);
    let path = dir.join("real.img");
    std::fs::File::create(&path).and_then(|mut f| f.write_all(&data)).expect("test file written");
    path
}

/// `mmkit zram serve ARGS` run in `cwd` (with `env` set), and its URI once
/// printed (`None` when it exits or says nothing within 60 s). Builds the
/// plugin first: a test that runs before any other has built it must not
/// see a server that cannot start.
pub fn serve_in(args: &[std::ffi::OsString], cwd: &Path, env: &[(&str, &Path)]) -> (Child, Option<String>) {
    plugin();
    let mut command = Command::new(mmkit());
    command.current_dir(cwd).args(["zram", "serve"]).args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
    let uri = line.trim().to_owned();
    (child, uri.starts_with("nbd").then_some(uri))
}
