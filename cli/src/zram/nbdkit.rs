//! Running nbdkit: finding mmkit's plugin next to the `mmkit` binary,
//! starting nbdkit in the foreground on a Unix socket or a TCP address,
//! waiting until it is ready, its NBD URI, and stopping it so that no
//! socket or pid file is left behind (nbdkit itself removes neither).
//!
//! Owns the nbdkit child process and the files it creates; `serve` and the
//! `nbd` benchmark both start servers through it. Knows nothing of zram's
//! parameters beyond passing them on.

use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The plugin's file name, as `cargo build` names the `mmkit-nbdkit`
/// cdylib.
pub const PLUGIN_FILE: &str = "libmmkit_nbdkit.so";

/// What to install when nbdkit is missing.
pub const INSTALL_HINT: &str = "nbdkit is not installed: install it with `apt-get install nbdkit` (Debian, Ubuntu) or `dnf install nbdkit` (Fedora); the clients are in libnbd-bin (nbdinfo, nbdcopy, nbdfuse), python3-libnbd (nbdsh), qemu-utils and fio";

/// The nbdkit option that works around releases which abort when a client
/// hangs up with several requests in flight, or `None` when this nbdkit
/// is not one of them or `nbdkit_args` already choose the thread count.
///
/// nbdkit 1.32.4–1.32.5 and 1.33.3–1.33.9 (the versions with upstream
/// commit daef505e, "server: Give client EOF when we are done writing",
/// and without its fix 9d82aa4f, "server: Don't assert on send if client
/// hangs up early") abort on `raw_send_socket: Assertion 'sock >= 0'` when
/// one worker thread closes the socket of a client that vanished while
/// another still has a reply to send: a killed client takes the server,
/// and every byte the device holds, with it. One worker thread per
/// connection (`--threads=1`) avoids it, at the price of serving each
/// connection's requests one at a time.
pub fn hangup_workaround(nbdkit_args: &[String]) -> Option<&'static str> {
    let chooses_threads = nbdkit_args.iter().any(|a| a.starts_with("-t") || a.starts_with("--threads"));
    if chooses_threads {
        return None;
    }
    let out = Command::new("nbdkit").arg("--version").stdin(Stdio::null()).output().ok()?;
    let version = parse_version(&String::from_utf8_lossy(&out.stdout))?;
    aborts_on_early_hangup(version).then_some("--threads=1")
}

/// nbdkit's options that [`Nbdkit::start`] sets itself or that would
/// contradict how it runs nbdkit (in the foreground, on the socket it
/// names, with the pid file it waits for): long names, and the short
/// letters. `--run` and `-s` would make nbdkit serve something else than
/// the socket whose URI is printed.
const OWN_LONG: &[&str] = &[
    "unix",
    "ipaddr",
    "ip-addr",
    "port",
    "foreground",
    "no-fork",
    "pidfile",
    "pid-file",
    "exit-with-parent",
    "run",
    "single",
    "stdin",
    "vsock",
];
const OWN_SHORT: &[char] = &['U', 'i', 'p', 'f', 'P', 's'];
/// nbdkit's short options that take a value (the rest of the word, or the
/// next word), after which a cluster of letters ends.
const SHORT_WITH_VALUE: &[char] = &['D', 'e', 'g', 'i', 'p', 'P', 't', 'u', 'U'];

/// A message naming the first of `nbdkit_args` that `serve` sets itself
/// (`-U`, `--unix=…`, `-p`, `-f`, `-P`, `--exit-with-parent`, `--run`, …),
/// or `None`. A word that is the value of the option before it is not an
/// option.
pub fn contradicting_option(nbdkit_args: &[String]) -> Option<String> {
    let refuse = |option: &str| {
        Some(format!(
            "nbdkit option {option}: mmkit zram serve sets it itself (it runs nbdkit in the foreground with \
             -f --exit-with-parent -P PIDFILE and -U SOCKET or -i ADDR -p PORT); use --unix, --listen and \
             --control instead, and leave --run, -s and --vsock out"
        ))
    };
    let mut value_next = false;
    for arg in nbdkit_args {
        if std::mem::take(&mut value_next) {
            continue;
        }
        if arg == "--" {
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let name = long.split_once('=').map_or(long, |(name, _)| name);
            if OWN_LONG.contains(&name) {
                return refuse(&format!("--{name}"));
            }
            // Long options of nbdkit that take the next word as their value.
            value_next = !long.contains('=')
                && matches!(
                    name,
                    "debug"
                        | "export"
                        | "export-name"
                        | "exportname"
                        | "group"
                        | "threads"
                        | "user"
                        | "filter"
                        | "mask-handshake"
                        | "tls"
                        | "tls-certificates"
                        | "tls-psk"
                        | "selinux-label"
                        | "log"
                );
            continue;
        }
        let Some(letters) = arg.strip_prefix('-') else { continue };
        for (i, letter) in letters.char_indices() {
            if OWN_SHORT.contains(&letter) {
                return refuse(&format!("-{letter}"));
            }
            if SHORT_WITH_VALUE.contains(&letter) {
                value_next = i + letter.len_utf8() == letters.len();
                break;
            }
        }
    }
    None
}

/// Whether `nbdkit_args` ask nbdkit for TLS that clients must or may use
/// (`--tls=on`, `--tls=require`, or either as the next word): the URI then
/// says `nbds`.
pub fn tls_requested(nbdkit_args: &[String]) -> bool {
    let mut words = nbdkit_args.iter();
    while let Some(arg) = words.next() {
        let value = match arg.strip_prefix("--tls") {
            Some(rest) if rest.starts_with('=') => Some(rest[1..].to_owned()),
            Some("") => words.next().cloned(),
            _ => None,
        };
        if value.is_some_and(|v| matches!(v.as_str(), "on" | "require")) {
            return true;
        }
    }
    false
}

/// `(major, minor, patch)` from `nbdkit --version` ("nbdkit 1.32.5").
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    let mut parts = word.split('.').map(|p| p.trim_end_matches(|c: char| !c.is_ascii_digit()).parse::<u32>());
    Some((parts.next()?.ok()?, parts.next()?.ok()?, parts.next().and_then(Result::ok).unwrap_or(0)))
}

/// See [`hangup_workaround`].
fn aborts_on_early_hangup((major, minor, patch): (u32, u32, u32)) -> bool {
    major == 1 && ((minor == 32 && (4..=5).contains(&patch)) || (minor == 33 && (3..=9).contains(&patch)))
}

/// How long nbdkit has to stop after `SIGTERM` before it is killed. nbdkit
/// waits for connected clients to hang up, and an idle client never does;
/// a device in RAM has nothing to write out, so waiting longer than the
/// requests in flight take only delays the stop.
pub const STOP_GRACE: Duration = Duration::from_millis(600);

/// Why a server could not be started or ran into trouble.
#[derive(Debug)]
pub struct NbdkitError(pub String);

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A Unix socket at this path.
    Unix(PathBuf),
    /// TCP on this address.
    Tcp(SocketAddr),
}

impl Listen {
    /// The NBD URI a client connects to (`nbd+unix:///?socket=PATH` with the
    /// path percent-encoded, `nbd://ADDR:PORT`), per the NBD URI
    /// specification (the NBD project's `doc/uri.md`, RFC 3986).
    pub fn uri(&self) -> String {
        self.uri_with("nbd")
    }

    /// The NBD URI of a server that offers TLS (`nbds`, as libnbd names
    /// it): a client connects with TLS.
    pub fn tls_uri(&self) -> String {
        self.uri_with("nbds")
    }

    fn uri_with(&self, scheme: &str) -> String {
        match self {
            Self::Unix(path) => format!("{scheme}+unix:///?socket={}", percent_encode(path.as_os_str().as_bytes())),
            Self::Tcp(addr) => format!("{scheme}://{addr}"),
        }
    }
}

/// `bytes` for a URI's query value: every byte but RFC 3986's unreserved
/// characters and `/` as `%XX`, so that a blank, `&`, `#`, `%`, `?`, `+`
/// or a byte that is not UTF-8 in a socket path reaches the client as it
/// is.
pub fn percent_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The TCP port process `pid` listens on, from `/proc`: the socket inodes
/// among its file descriptors, looked up among the listening sockets of
/// its network namespace. With `--listen ADDR:0` nbdkit binds a port the
/// kernel chooses, and this is how the URI learns it.
fn listening_port(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("socket:[").and_then(|rest| rest.strip_suffix(']')).map(str::to_owned)
        })
        .collect();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st ... uid timeout inode
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9)) else { continue };
            if *state == "0A" && inodes.iter().any(|i| i == inode) {
                let port = local.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
                if port.is_some() {
                    return port;
                }
            }
        }
    }
    None
}

/// Removes the socket at `path` if nothing listens on it (connecting is
/// refused); anything else is left.
fn remove_if_dead_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = path.symlink_metadata().is_ok_and(|m| m.file_type().is_socket());
    if is_socket
        && std::os::unix::net::UnixStream::connect(path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
    {
        let _ = std::fs::remove_file(path);
    }
}

/// A file this process saw a server create: removed when the server stops
/// only while its path still names that file, so that a server which lost
/// a race for a path (two started at once on one `--unix`) removes the
/// winner's socket never.
#[derive(Debug)]
struct Created {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Created {
    /// The file at `path` now, if any.
    fn at(path: &Path) -> Option<Self> {
        let meta = path.symlink_metadata().ok()?;
        Some(Self { path: path.to_owned(), dev: meta.dev(), ino: meta.ino() })
    }

    /// Removes it if its path still names it.
    fn remove(&self) {
        if Self::at(&self.path).is_some_and(|now| now.dev == self.dev && now.ino == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The plugin next to the running `mmkit` binary (`cargo build` puts both
/// in `target/<profile>/`).
///
/// # Errors
/// The binary's own path is unknown, or the plugin is not there; the
/// message says how to build it.
pub fn plugin_beside_binary() -> Result<PathBuf, NbdkitError> {
    let exe = std::env::current_exe().map_err(|e| NbdkitError(format!("where is mmkit itself? {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let plugin = dir.join(PLUGIN_FILE);
    if plugin.is_file() {
        Ok(plugin)
    } else {
        Err(NbdkitError(format!(
            "the nbdkit plugin {} is not next to mmkit in {}: build it with `cargo build --release` (the whole \
             workspace) or `cargo build --release -p mmkit-nbdkit`, or name it with --plugin",
            PLUGIN_FILE,
            dir.display()
        )))
    }
}

/// A server to start.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The plugin: a path to a `.so` or the name of one of nbdkit's own
    /// (`memory`).
    pub plugin: std::ffi::OsString,
    /// The plugin's `key=value` arguments.
    pub plugin_args: Vec<String>,
    /// nbdkit options placed before the plugin (`--filter=…`, `-t 4`, `-v`).
    pub nbdkit_args: Vec<String>,
    /// Where to listen.
    pub listen: Listen,
    /// A private directory for the pid file.
    pub run_dir: PathBuf,
    /// Other files the server creates (the control socket), removed when
    /// it stops.
    pub also_remove: Vec<PathBuf>,
    /// A file for nbdkit's stderr (its debug output under `-v`); none:
    /// this process's stderr.
    pub stderr: Option<PathBuf>,
}

/// A running nbdkit.
#[derive(Debug)]
pub struct Nbdkit {
    child: Option<Child>,
    /// Where it listens: a TCP port 0 resolved once it is ready.
    listen: Listen,
    pid_file: PathBuf,
    also_remove: Vec<PathBuf>,
    /// The socket and `also_remove` files as they were once it was ready:
    /// only these are removed (none when it never was).
    created: Vec<Created>,
}

impl Nbdkit {
    /// Starts nbdkit in the foreground (`-f`) and waits until it has
    /// written its pid file, which nbdkit does once its socket listens and
    /// the plugin is ready. nbdkit dies with this process
    /// (`--exit-with-parent`).
    ///
    /// # Errors
    /// nbdkit is missing, exits before it is ready (its own message went to
    /// stderr), or is not ready within `timeout`.
    pub fn start(spec: &Spec, timeout: Duration, interrupted: &dyn Fn() -> bool) -> Result<Self, NbdkitError> {
        let pid_file = spec.run_dir.join("nbdkit.pid");
        let _ = std::fs::remove_file(&pid_file);
        let mut command = Command::new("nbdkit");
        command.args(["-f", "--exit-with-parent", "-P"]).arg(&pid_file);
        match &spec.listen {
            Listen::Unix(path) => {
                command.arg("-U").arg(path);
            }
            Listen::Tcp(addr) => {
                command.args(["-i", &addr.ip().to_string(), "-p", &addr.port().to_string()]);
            }
        }
        command.args(&spec.nbdkit_args).arg(&spec.plugin).args(&spec.plugin_args).stdin(Stdio::null());
        if let Some(path) = &spec.stderr {
            let file = std::fs::File::create(path)
                .map_err(|e| NbdkitError(format!("nbdkit's log {}: {e}", path.display())))?;
            command.stderr(file);
        }
        let child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => NbdkitError(INSTALL_HINT.into()),
            _ => NbdkitError(format!("starting nbdkit: {e}")),
        })?;
        let mut server = Self {
            child: Some(child),
            listen: spec.listen.clone(),
            pid_file,
            also_remove: spec.also_remove.clone(),
            created: Vec::new(),
        };
        let started = Instant::now();
        loop {
            if server.pid_file.is_file() {
                server.ready()?;
                return Ok(server);
            }
            if let Some(status) = server.try_wait()? {
                return Err(NbdkitError(format!("nbdkit stopped before it was ready ({status})")));
            }
            if interrupted() {
                server.stop();
                return Err(NbdkitError("interrupted before nbdkit was ready".into()));
            }
            if started.elapsed() > timeout {
                server.stop();
                return Err(NbdkitError(format!("nbdkit was not ready within {} s", timeout.as_secs())));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Once nbdkit is ready: records the files it made (they are its until
    /// it stops), and the port it chose for a TCP port 0.
    fn ready(&mut self) -> Result<(), NbdkitError> {
        let socket = match &self.listen {
            Listen::Unix(path) => Some(path.clone()),
            Listen::Tcp(_) => None,
        };
        self.created = socket.iter().chain(&self.also_remove).filter_map(|p| Created::at(p)).collect();
        if let Listen::Tcp(addr) = self.listen {
            if addr.port() == 0 {
                let pid = self.child.as_ref().map(Child::id);
                let Some(port) = pid.and_then(listening_port) else {
                    self.stop();
                    return Err(NbdkitError(format!(
                        "nbdkit listens on {addr} with a port of the kernel's choice, which /proc does not show; \
                         name a port"
                    )));
                };
                self.listen = Listen::Tcp(SocketAddr::new(addr.ip(), port));
            }
        }
        Ok(())
    }

    /// The NBD URI to connect to.
    pub fn uri(&self) -> String {
        self.listen.uri()
    }

    /// The NBD URI to connect to with TLS.
    pub fn tls_uri(&self) -> String {
        self.listen.tls_uri()
    }

    /// nbdkit's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status if nbdkit has stopped by itself (its files are then
    /// removed).
    ///
    /// # Errors
    /// Waiting failed.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, NbdkitError> {
        let Some(child) = self.child.as_mut() else { return Ok(None) };
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                self.remove_files();
                Ok(Some(status))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(NbdkitError(format!("waiting for nbdkit: {e}"))),
        }
    }

    /// Stops nbdkit as `SIGTERM` does (it finishes the requests in flight),
    /// kills it if it has not stopped within [`STOP_GRACE`], and removes
    /// its files. Returns how it ended (`None` if it had already been
    /// reaped).
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let pid = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                _ => {
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        self.remove_files();
        status
    }

    /// Removes the pid file (in the caller's private directory) and the
    /// files recorded when nbdkit was ready, while their paths still name
    /// them: a server that never became ready (it lost a race for its
    /// socket, say) removes nothing it did not create.
    fn remove_files(&mut self) {
        let _ = std::fs::remove_file(&self.pid_file);
        if self.created.is_empty() {
            // Never ready: nbdkit can exit without unloading the plugin,
            // whose control socket then stays. Only a dead socket is
            // removed (nothing answers on it), never a live server's.
            for path in &self.also_remove {
                remove_if_dead_socket(path);
            }
        }
        for file in self.created.drain(..) {
            file.remove();
        }
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_percent_encoded() {
        assert_eq!(Listen::Unix("/run/x/nbd.sock".into()).uri(), "nbd+unix:///?socket=/run/x/nbd.sock");
        let odd = std::ffi::OsStr::from_bytes(b"/t dir/a&b#c%d?e+f\xff.sock");
        assert_eq!(Listen::Unix(odd.into()).uri(), "nbd+unix:///?socket=/t%20dir/a%26b%23c%25d%3Fe%2Bf%FF.sock");
        assert_eq!(Listen::Tcp("127.0.0.1:10809".parse().unwrap()).uri(), "nbd://127.0.0.1:10809");
        assert_eq!(Listen::Tcp("[::1]:10809".parse().unwrap()).uri(), "nbd://[::1]:10809");
        assert_eq!(Listen::Tcp("127.0.0.1:10809".parse().unwrap()).tls_uri(), "nbds://127.0.0.1:10809");
        assert_eq!(Listen::Unix("/run/x/nbd.sock".into()).tls_uri(), "nbds+unix:///?socket=/run/x/nbd.sock");
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_serve_sets_itself_are_caught_in_every_spelling() {
        for refused in [
            "-U other.sock",
            "-Uother.sock",
            "--unix other.sock",
            "--unix=other.sock",
            "-p 10810",
            "--port=10810",
            "-i 0.0.0.0",
            "-f",
            "-vf",
            "--foreground",
            "-P x.pid",
            "--pidfile=x.pid",
            "--exit-with-parent",
            "--run sh",
            "-s",
            "--vsock",
            "-t 4 -U x",
            "--tls-verify-peer -U x",
            "--threads 4 --unix=x",
            "--no-fork",
            "--pid-file=p",
            "--ip-addr=::",
            "--stdin",
            "--export x -p 1",
        ] {
            assert!(contradicting_option(&words(refused)).is_some(), "{refused} was let through");
        }
        for taken in
            ["-t 4", "-t4", "--threads 8", "-v", "--filter=log logfile=x", "-D mmkit.x=1", "--tls=require", "-e -U"]
        {
            assert_eq!(contradicting_option(&words(taken)), None, "{taken} was refused");
        }
        let message = contradicting_option(&words("-U x")).unwrap();
        assert!(message.contains("-U") && message.contains("--unix"), "{message}");
    }

    #[test]
    fn tls_on_or_required_makes_the_uri_nbds() {
        for yes in ["--tls=require", "--tls=on", "--tls require", "-t 2 --tls on --tls-psk=k"] {
            assert!(tls_requested(&words(yes)), "{yes}");
        }
        for no in ["", "--tls=off", "--tls off", "--tls-psk=k", "-v"] {
            assert!(!tls_requested(&words(no)), "{no}");
        }
    }
}
