//! The control socket: what zram users do through sysfs (`cat mm_stat`,
//! `echo all > idle`, `echo huge > writeback`), over a Unix socket of mode
//! 0600 that `mmkit zram ctl` talks to.
//!
//! The exchange is one request per connection: the client sends one line,
//! `NAME` or `NAME VALUE` (`mm_stat`, `idle all`, `recompress type=huge`,
//! `mem_limit 64M`); the server answers on its first line with one of
//!
//! - `busy MESSAGE`: too many requests at once; this one was not run, try
//!   again (sent only after the request line was read, so that closing
//!   does not reset the connection and lose the line);
//! - `running`: the request was taken and runs now; then, when it is done,
//!   `ok` followed by the attribute's text in the kernel's format, or
//!   `error MESSAGE` (refused: nothing changed);
//! - `error MESSAGE` alone: no request line came (it was not run);
//!
//! and closes. A client can thus give a silent peer a short deadline for
//! the first line and still wait for a long `writeback` or `recompress`
//! once it runs. A bare `NAME` shows the attribute, or for `compact` and
//! `reset` performs it; `NAME VALUE` stores. The device's `attr_show` and
//! `attr_store` do the work.
//!
//! Owns the socket's life (bound under a temporary name, made 0600, then
//! linked into place so no other user can ever connect and no socket put
//! there meanwhile is replaced; a socket left by
//! a dead server — nothing listening, connect refused — is replaced, a
//! live one never), the peers (each on a thread of its own, at most
//! [`MAX_PEERS`] at once, each with [`PEER_TIMEOUT`] to send its line and
//! take its answer, so a slow peer holds up nobody else; one more has
//! [`BUSY_READ_TIMEOUT`] to send its line before it is told `busy`) and the
//! request format; knows nothing of nbdkit.

use mmkit_zram::{Zram, SHOW_ATTRS, STORE_ATTRS};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::AcqRel};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest request line taken.
const MAX_REQUEST: usize = 4096;

/// Most peers answered at once; one more is told so and closed.
pub const MAX_PEERS: usize = 16;

/// How long a peer has to send its request line, and again to take the
/// answer.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a peer beyond [`MAX_PEERS`] has to send its request line
/// before it is told `busy`: the accepting thread reads it, so this bounds
/// how long one silent peer can hold up the others' accepts.
pub const BUSY_READ_TIMEOUT: Duration = Duration::from_millis(250);

/// The first line of an answer to a request taken and run.
pub const RUNNING: &str = "running";

/// The first word of the answer to a request not run because
/// [`MAX_PEERS`] are being answered.
pub const BUSY: &str = "busy";

/// Clears the way for a socket at `path`: nothing there, or a socket no
/// server listens on any more (connecting is refused), which is removed.
///
/// # Errors
/// `AddrInUse` when a server answers on it; `AlreadyExists` for anything
/// that is not a socket.
pub fn clear_dead_socket(path: &Path) -> std::io::Result<()> {
    let Ok(meta) = path.symlink_metadata() else { return Ok(()) };
    if !meta.file_type().is_socket() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket; remove it or choose another path", path.display()),
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("{}: a running server listens on it", path.display()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Err(e) => Err(std::io::Error::new(e.kind(), format!("{} exists and cannot be checked: {e}", path.display()))),
    }
}

/// A bound control socket, not yet serving.
#[derive(Debug)]
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path` with mode 0600. A dead server's socket at `path` is
    /// replaced; anything else there is an error, never replaced.
    ///
    /// # Errors
    /// A server listens on `path`, or it is not a socket
    /// ([`clear_dead_socket`]); binding, `chmod` or `rename` failed.
    pub fn bind(path: &Path) -> std::io::Result<Self> {
        clear_dead_socket(path)?;
        let mut staging = path.as_os_str().to_owned();
        staging.push(format!(".{}.tmp", std::process::id()));
        let staging = PathBuf::from(staging);
        let _ = std::fs::remove_file(&staging);
        let listener = UnixListener::bind(&staging)?;
        // A link, not a rename: a socket another server placed at `path`
        // since the check above is never replaced (link fails with EEXIST).
        let placed = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::hard_link(&staging, path));
        let _ = std::fs::remove_file(&staging);
        placed?;
        Ok(Self { listener, path: path.to_owned() })
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers requests for as long as the process lives: a thread
    /// accepts, and each peer gets a thread of its own.
    ///
    /// # Errors
    /// The accepting thread could not be started.
    pub fn serve(self, zram: Arc<Zram>) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("mmkit-zram-control".into()).spawn(move || {
            let peers = Arc::new(AtomicUsize::new(0));
            for stream in self.listener.incoming() {
                match stream {
                    Ok(stream) => accept(stream, &zram, &peers),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
    }
}

/// Hands a peer to a thread of its own, or tells it the server is busy.
fn accept(mut stream: UnixStream, zram: &Arc<Zram>, peers: &Arc<AtomicUsize>) {
    if peers.fetch_add(1, AcqRel) >= MAX_PEERS {
        peers.fetch_sub(1, AcqRel);
        // The request line first: closing with it unread would reset the
        // connection, and the peer would read the reset, not the line.
        let _ = read_request(&mut stream, BUSY_READ_TIMEOUT);
        let _ = stream.set_write_timeout(Some(BUSY_READ_TIMEOUT));
        let line = format!("{BUSY} {MAX_PEERS} control requests are being answered; not run, try again\n");
        if stream.write_all(line.as_bytes()).is_ok() {
            let _ = stream.shutdown(std::net::Shutdown::Write);
        }
        return;
    }
    let (zram, done) = (Arc::clone(zram), Arc::clone(peers));
    let spawned = std::thread::Builder::new().name("mmkit-zram-control-peer".into()).spawn(move || {
        handle(stream, &zram);
        done.fetch_sub(1, AcqRel);
    });
    if spawned.is_err() {
        // The peer went with the closure: closed unanswered.
        peers.fetch_sub(1, AcqRel);
    }
}

/// Reads one request line within `timeout` (however slowly the peer
/// trickles it in), at most [`MAX_REQUEST`] bytes, ended by a newline.
fn read_request(stream: &mut UnixStream, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no request line within {} s", timeout.as_secs_f64()));
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut chunk) {
            // A line cut short by a peer that went away is not run: `reset`
            // may be all that arrived of `reset_stats`, `writeback` of
            // `writeback page_index=7`.
            Ok(0) => return Err("the request line ended without a newline; not run".into()),
            Ok(n) => {
                line.extend_from_slice(&chunk[..n]);
                if line.contains(&b'\n') || line.len() >= MAX_REQUEST {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(format!("no request line within {} s", timeout.as_secs_f64()));
            }
            Err(e) => return Err(format!("reading the request: {e}")),
        }
    }
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    if end >= MAX_REQUEST {
        return Err(format!("the request is longer than {MAX_REQUEST} bytes"));
    }
    String::from_utf8(line[..end].to_vec()).map_err(|_| "the request is not UTF-8".to_owned())
}

/// One connection: a request line in, `running`, the answer out. What
/// follows the request line is read and dropped after the answer: closing
/// a Unix socket with unread input would reset the connection and lose the
/// answer.
fn handle(mut stream: UnixStream, zram: &Zram) {
    let _ = stream.set_write_timeout(Some(PEER_TIMEOUT));
    let reply = match read_request(&mut stream, PEER_TIMEOUT) {
        Ok(line) => {
            // Said before the request runs, so that the client's deadline
            // for a first line does not cut a long writeback short. A peer
            // gone already is answered no further, and the request not run.
            if stream.write_all(format!("{RUNNING}\n").as_bytes()).is_err() {
                return;
            }
            match answer(zram, &line) {
                Ok(text) => format!("ok\n{text}"),
                Err(message) => format!("error {message}\n"),
            }
        }
        Err(message) => format!("error {message}\n"),
    };
    if stream.write_all(reply.as_bytes()).is_ok() && stream.shutdown(std::net::Shutdown::Write).is_ok() {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let _ = std::io::copy(&mut (&mut stream).take(1 << 20), &mut std::io::sink());
    }
}

/// The answer to one request line, or why it was refused.
///
/// # Errors
/// An unknown attribute, a write-only one shown, a relative path (it would
/// be resolved in the server's directory, not the client's), a store the
/// device refused (nothing changed), an empty request.
pub fn answer(zram: &Zram, request: &str) -> Result<String, String> {
    let request = request.trim();
    let (name, value) = request.split_once(char::is_whitespace).unwrap_or((request, ""));
    let value = value.trim();
    if name.is_empty() {
        return Err("empty request; try mm_stat".into());
    }
    let result = if !value.is_empty() {
        if !SHOW_ATTRS.contains(&name) && !STORE_ATTRS.contains(&name) {
            return Err(unknown(name));
        }
        refuse_relative_paths(name, value)?;
        zram.attr_store(name, value)
    } else if matches!(name, "compact" | "reset") {
        zram.attr_store(name, "1")
    } else if SHOW_ATTRS.contains(&name) {
        zram.attr_show(name)
    } else if STORE_ATTRS.contains(&name) {
        return Err(format!(
            "{name} is write-only (as in the kernel's sysfs, there is nothing to show); store a value: {name} {}",
            store_usage(name)
        ));
    } else {
        return Err(unknown(name));
    };
    result.map_err(|e| e.to_string())
}

/// The values a write-only attribute takes, for its message.
fn store_usage(name: &str) -> &'static str {
    match name {
        "idle" => "all|SECONDS",
        "writeback" => "idle|huge|huge_idle|incompressible (or type=MODE), or page_index=N page_indexes=N-M",
        "recompress" => "type=idle|huge|huge_idle [threshold=N] [algo=NAME] [priority=N] [max_pages=N]",
        "algorithm_params" => "algo=NAME [priority=N] [level=N] [dict=PATH]",
        "backing_overwrite" => "1",
        _ => "VALUE",
    }
}

/// The message for a name that is no attribute.
fn unknown(name: &str) -> String {
    let mut stored: Vec<&str> = STORE_ATTRS.iter().copied().filter(|a| !SHOW_ATTRS.contains(a)).collect();
    stored.sort_unstable();
    format!("no attribute {name:?}; shown and stored: {}; stored only: {}", SHOW_ATTRS.join(" "), stored.join(" "))
}

/// A path the device would open, sent relative: refused, since this
/// process's directory is not the client's (`mmkit zram ctl` sends
/// absolute paths). `backing_dev PATH` and `algorithm_params … dict=PATH`.
fn refuse_relative_paths(name: &str, value: &str) -> Result<(), String> {
    let relative = |path: &str| !path.is_empty() && !Path::new(path).is_absolute();
    let bad = match name {
        "backing_dev" if value != "none" => relative(value).then_some(value),
        "algorithm_params" => value.split_whitespace().filter_map(|w| w.strip_prefix("dict=")).find(|p| relative(p)),
        _ => None,
    };
    match bad {
        Some(path) => Err(format!(
            "{name}: {path:?} is a relative path, which the server would resolve in its own directory, not the \
             client's; send an absolute path (mmkit zram ctl makes every path absolute)"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit_zram::{ZramConfig, PAGE_SIZE};

    fn device() -> Arc<Zram> {
        let mut config = ZramConfig::default();
        config.set("size", "1M").unwrap();
        config.set("recomp", "zstd:9").unwrap();
        Arc::new(Zram::with_own_memory(config).unwrap())
    }

    fn ask(path: &Path, request: &str) -> String {
        let mut stream = UnixStream::connect(path).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }

    fn page() -> Vec<u8> {
        (0..PAGE_SIZE).map(|i| (i % 13) as u8 ^ (i / 300) as u8).collect()
    }

    #[test]
    fn requests_show_and_store_attributes_in_the_kernels_formats() {
        let zram = device();
        zram.open().unwrap().write(0, &page()).unwrap();
        zram.open().unwrap().write(PAGE_SIZE as u64, &[5; PAGE_SIZE]).unwrap();
        let mm: Vec<u64> = answer(&zram, "mm_stat\n").unwrap().split_whitespace().map(|c| c.parse().unwrap()).collect();
        assert_eq!(mm.len(), 9);
        assert_eq!(mm[0], 2 * PAGE_SIZE as u64, "orig_data_size");
        assert_eq!(mm[5], 1, "same_pages");
        assert_eq!(answer(&zram, "io_stat").unwrap().split_whitespace().count(), 4);
        assert_eq!(answer(&zram, "bd_stat").unwrap().split_whitespace().count(), 3);
        assert!(answer(&zram, "debug_stat").unwrap().starts_with("version:"));
        answer(&zram, "idle all").unwrap();
        assert_eq!(answer(&zram, "recompress  type=idle ").unwrap().trim().parse::<u64>().unwrap(), 1);
        answer(&zram, "compact").unwrap().trim().parse::<u64>().unwrap();
        answer(&zram, "mem_limit 2M").unwrap();
        assert_eq!(answer(&zram, "mem_limit").unwrap(), format!("{}\n", 2 << 20));
        let open = zram.open().unwrap();
        assert!(answer(&zram, "reset").unwrap_err().contains("busy"), "reset while open");
        drop(open);
        answer(&zram, "reset").unwrap();
        assert_eq!(answer(&zram, "mm_stat").unwrap().split_whitespace().next(), Some("0"), "reset empties the device");
        assert_eq!(answer(&zram, "initstate").unwrap(), "0\n");
        answer(&zram, "disksize 64K").unwrap();
        assert_eq!(answer(&zram, "disksize").unwrap(), "65536\n");
    }

    #[test]
    fn bad_requests_are_refused_and_change_nothing() {
        let zram = device();
        zram.open().unwrap().write(0, &page()).unwrap();
        let before = zram.mm_stat();
        for request in [
            "",
            "  \n",
            "colour",
            "colour blue",
            "idle sometimes",
            "writeback huge",
            "reset 0",
            "recompress type=nope",
            "recompress",
            "mem_limit 1",
            "mem_limit 18446744073709551615",
            "comp_algorithm zstd",
        ] {
            assert!(answer(&zram, request).is_err(), "{request:?} was taken");
        }
        assert_eq!(zram.mm_stat(), before);
    }

    #[test]
    fn messages_name_what_happened_and_relative_paths_are_refused() {
        let zram = device();
        let err = answer(&zram, "colour").unwrap_err();
        assert!(err.starts_with("no attribute \"colour\";") && !err.contains("to store"), "{err}");
        assert!(answer(&zram, "colour blue").unwrap_err().starts_with("no attribute"));
        let err = answer(&zram, "algorithm_params").unwrap_err();
        assert!(err.contains("write-only") && !err.contains("busy"), "{err}");
        answer(&zram, "reset").unwrap();
        for request in ["backing_dev wb.img", "backing_dev ./wb.img", "algorithm_params algo=lz4 dict=d.dict"] {
            let err = answer(&zram, request).unwrap_err();
            assert!(err.contains("relative path") && err.contains("absolute"), "{request}: {err}");
        }
        let err = answer(&zram, "backing_dev /no/such/wb.img").unwrap_err();
        assert!(!err.contains("relative"), "an absolute path reaches the device: {err}");
        let err = answer(&zram, "comp_algorithm zstd:0").unwrap_err();
        assert!(err.contains("zstd takes levels 1..=22, not 0") && !err.contains("unknown"), "{err}");
    }

    #[test]
    fn peers_are_answered_at_once_and_a_dead_servers_socket_is_replaced() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let path = dir.join("ctl.sock");
        // A dead server's socket: bound, then its listener dropped.
        drop(UnixListener::bind(&path).unwrap());
        let socket = ControlSocket::bind(&path).expect("a dead socket is replaced");
        assert!(ControlSocket::bind(&path).is_err(), "a live one is not");
        socket.serve(device()).unwrap();
        // Slow peers, each holding a connection with half a request.
        let slow: Vec<UnixStream> = (0..3)
            .map(|_| {
                let mut s = UnixStream::connect(&path).unwrap();
                s.write_all(b"mm_").unwrap();
                s
            })
            .collect();
        let started = Instant::now();
        assert!(ask(&path, "mm_stat\n").starts_with("running\nok\n"));
        assert!(started.elapsed() < Duration::from_secs(2), "held up by slow peers: {:?}", started.elapsed());
        // A slow peer gets its error once its time is up, not before.
        let mut first = slow.into_iter().next().unwrap();
        let mut reply = String::new();
        first.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("error no request line"), "{reply}");
        assert!(started.elapsed() >= PEER_TIMEOUT - Duration::from_millis(500));
    }

    #[test]
    fn a_peer_beyond_the_limit_reads_busy_not_a_reset_and_nothing_runs() {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("ctl.sock");
        let zram = device();
        zram.open().unwrap().write(0, &page()).unwrap();
        ControlSocket::bind(&path).unwrap().serve(Arc::clone(&zram)).unwrap();
        // Every peer thread taken by a peer that sends half a line.
        let slow: Vec<UnixStream> = (0..MAX_PEERS)
            .map(|_| {
                let mut s = UnixStream::connect(&path).unwrap();
                s.write_all(b"mm_").unwrap();
                s
            })
            .collect();
        // The accepting thread counts them as it accepts: wait until a
        // request is refused.
        let started = Instant::now();
        let reply = loop {
            let reply = ask(&path, "idle all\n");
            if reply.starts_with(BUSY) || started.elapsed() > PEER_TIMEOUT {
                break reply;
            }
        };
        assert!(reply.starts_with("busy ") && reply.contains("not run"), "{reply:?}");
        drop(slow);
        let state = zram.attr_show("block_state").unwrap();
        assert!(!state.split_whitespace().nth(2).unwrap().contains('i'), "idle all ran: {state}");
        // Once they are gone, requests run again.
        let started = Instant::now();
        while !ask(&path, "mm_stat\n").starts_with("running\nok\n") {
            assert!(started.elapsed() < 2 * PEER_TIMEOUT, "still busy");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn the_socket_is_private_answers_each_connection_and_never_replaces_a_file() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let path = dir.join("ctl.sock");
        let _ = std::fs::remove_file(&path);
        let socket = ControlSocket::bind(&path).unwrap();
        assert_eq!(socket.path(), path);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(ControlSocket::bind(&path).is_err(), "a live socket is never replaced");
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap();
        assert!(ControlSocket::bind(&plain).is_err(), "nor a file that is not a socket");
        std::fs::remove_file(&plain).unwrap();
        let zram = device();
        zram.open().unwrap().write(0, &page()).unwrap();
        socket.serve(Arc::clone(&zram)).unwrap();
        let reply = ask(&path, "mm_stat\n");
        let reply = reply.strip_prefix("running\n").expect("running first");
        let (status, body) = reply.split_once('\n').unwrap();
        assert_eq!(status, "ok");
        assert_eq!(body.split_whitespace().next(), Some(PAGE_SIZE.to_string().as_str()), "{reply}");
        assert!(ask(&path, "colour\n").starts_with("running\nerror "));
        assert!(ask(&path, &"x".repeat(10_000)).starts_with("error "), "an overlong request");
        // A line cut short (the peer went away) is not run.
        let mut cut = UnixStream::connect(&path).unwrap();
        cut.write_all(b"reset").unwrap();
        cut.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = String::new();
        cut.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("error the request line ended without a newline"), "{reply}");
        assert!(zram.is_initialised(), "reset ran from a cut line");
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("ctl.sock")], "no staging file left");
    }
}
