//! `mmkit zram ctl`: one request to a served device's control socket (what
//! sysfs offers for a kernel zram device), printing the answer, which is
//! in the kernel's format.
//!
//! Owns the client side of the control exchange that the plugin's
//! `control` module serves: one line out (`mm_stat`, `idle all`,
//! `recompress type=huge`); back `busy …` (not run: tried again for a
//! bounded time), or `running` then `ok` and the text or `error MESSAGE`.
//! The first line has a deadline, so a peer that accepts and says nothing
//! cannot hold a script; once `running` came, the action's own time is
//! waited for. The exit code says whether the action ran ([`CtlError`]).

use clap::Args;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `mmkit zram ctl`'s arguments.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Requests: mm_stat, io_stat, bd_stat, debug_stat, block_state, compact, reset, idle all, \
    idle SECONDS, recompress \"type=idle|huge|huge_idle [threshold=N] [algo=NAME] [priority=N] [max_pages=N]\", \
    writeback idle|huge|huge_idle|incompressible (or type=MODE) or \"page_index=N page_indexes=N-M ...\", \
    mem_limit [SIZE], writeback_limit [N], and while reset: disksize SIZE, comp_algorithm NAME, \
    recomp_algorithm \"algo=NAME priority=N\", algorithm_params \"algo=NAME level=N dict=PATH\", \
    backing_overwrite 1, backing_dev PATH.\n\n\
    Exit status: 0 the request ran (its answer is printed); 1 it did not run (refused, with the device's \
    message, or the socket could not be reached or did not answer within --timeout); 3 the server stayed \
    busy for --busy-retry seconds and it did not run; 4 it started but its answer was lost, so whether it \
    finished is unknown.")]
pub struct CtlArgs {
    /// The control socket (`mmkit zram serve --control PATH`, or the path it printed).
    #[arg(value_name = "SOCKET")]
    pub socket: PathBuf,
    /// The attribute, and a value to store into it.
    #[arg(value_name = "REQUEST", required = true, num_args = 1.., allow_hyphen_values = true)]
    pub request: Vec<String>,
    /// Seconds the server has to take the request (connect, send, its first line), more than 0;
    /// once it says the request runs, ctl waits for the action however long it takes.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = positive_seconds)]
    pub timeout: Duration,
    /// Seconds to keep trying while the server answers busy (0: once).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    pub busy_retry: Duration,
}

/// A clap value parser for a duration in seconds (`10`, `0.5`).
fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?}: want seconds, 0 to 86400"))
}

/// `--timeout`: seconds, more than zero (a deadline of 0 would fail every
/// request before it is sent).
fn positive_seconds(text: &str) -> Result<Duration, String> {
    let duration = seconds(text)?;
    if duration.is_zero() {
        return Err(format!("{text:?}: want more than 0 seconds, up to 86400"));
    }
    Ok(duration)
}

/// The request line with every path in it made absolute in this process's
/// directory: the server opens them in its own (`backing_dev PATH`,
/// `algorithm_params … dict=PATH`), and refuses a relative one.
///
/// # Errors
/// A path that cannot be made absolute or is not UTF-8 (the protocol is
/// text).
pub fn request_line(request: &[String]) -> Result<String, String> {
    let Some((name, rest)) = request.split_first() else { return Ok(String::new()) };
    let value = rest.join(" ");
    let value = match name.as_str() {
        "backing_dev" if !value.trim().is_empty() && value.trim() != "none" => {
            crate::paths::absolute_text(Path::new(value.trim()), "backing_dev")?
        }
        "algorithm_params" => crate::paths::absolute_dicts(&value)?,
        _ => value,
    };
    Ok(if value.is_empty() { name.clone() } else { format!("{name} {value}") })
}

/// Why a request gave no answer to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CtlError {
    /// It did not run: the device refused it (its message), or the socket
    /// could not be reached or did not take it in time (exit 1).
    NotRun(String),
    /// The server stayed busy; it did not run (exit 3).
    Busy(String),
    /// It started, and then the answer was lost (exit 4).
    Unknown(String),
}

impl CtlError {
    /// The exit code that says so.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::NotRun(_) => 1,
            Self::Busy(_) => 3,
            Self::Unknown(_) => 4,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        match self {
            Self::NotRun(m) | Self::Busy(m) | Self::Unknown(m) => m,
        }
    }
}

/// Sends the request and returns the answer's text.
///
/// # Errors
/// As [`CtlError`].
pub fn run(args: &CtlArgs) -> Result<String, CtlError> {
    let line = request_line(&args.request).map_err(CtlError::NotRun)?;
    check_socket(&args.socket).map_err(CtlError::NotRun)?;
    request_with(&args.socket, &line, args.timeout, args.busy_retry)
}

/// A control socket path that is something else (a regular file, a
/// directory), said before connecting: `connect` would only say
/// "Connection refused".
fn check_socket(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => Err(format!(
            "{}: {}, not a control socket (mmkit zram serve prints its control socket's path; --control names it)",
            path.display(),
            crate::paths::noun(&meta)
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "{}: {e}: no control socket there (mmkit zram serve prints its path; --control names it)",
            path.display()
        )),
    }
}

/// Sends one request line to the control socket at `socket` with the
/// default deadline and busy retry, and returns the answer's text.
///
/// # Errors
/// The message of a [`CtlError`].
pub fn request(socket: &Path, line: &str) -> Result<String, String> {
    request_with(socket, line, Duration::from_secs(10), Duration::from_secs(5)).map_err(|e| e.message().to_owned())
}

/// One request, tried again while the server is busy for up to
/// `busy_retry`, each try with `timeout` to be taken.
///
/// # Errors
/// As [`CtlError`].
pub fn request_with(socket: &Path, line: &str, timeout: Duration, busy_retry: Duration) -> Result<String, CtlError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    // Peers that were told busy together should not all come back at once.
    let jitter = u64::from(std::process::id() % 17);
    loop {
        match attempt(socket, line, timeout) {
            Err(Attempt::Busy(said)) => {
                let waited = started.elapsed();
                if waited + pause > busy_retry {
                    return Err(CtlError::Busy(format!(
                        "{}: the server stayed busy for {:.1} s ({said}); {line:?} was not run, try again later",
                        socket.display(),
                        waited.as_secs_f64()
                    )));
                }
                std::thread::sleep(pause + Duration::from_millis(jitter));
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            Err(Attempt::Failed(e)) => return Err(e),
            Ok(text) => return Ok(text),
        }
    }
}

/// How one try ended, when not with an answer.
enum Attempt {
    /// `busy …`: try again.
    Busy(String),
    /// Anything else.
    Failed(CtlError),
}

/// One connection: the request out, the answer in.
fn attempt(socket: &Path, line: &str, timeout: Duration) -> Result<String, Attempt> {
    let not_run = |what: String| Attempt::Failed(CtlError::NotRun(format!("{}: {what}", socket.display())));
    let deadline = Instant::now() + timeout;
    let mut stream = UnixStream::connect(socket)
        .map_err(|e| not_run(format!("cannot reach the control socket: {e}; {line:?} was not run")))?;
    let _ = stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))));
    stream
        .write_all(format!("{line}\n").as_bytes())
        .map_err(|e| not_run(format!("sending the request: {e}; {line:?} was not run")))?;
    let mut got = Vec::new();
    let first = read_line(&mut stream, &mut got, deadline)
        .map_err(|e| not_run(format!("no answer within {} s ({e}); {line:?} was not run", timeout.as_secs_f64())))?;
    if let Some(said) = first.strip_prefix("busy") {
        return Err(Attempt::Busy(said.trim().to_owned()));
    }
    if first != "running" {
        // An answer without `running`: a request that never ran (no line
        // came, or it was too long), or an older server's whole answer.
        let mut rest = Vec::new();
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let _ = stream.read_to_end(&mut rest);
        got.extend_from_slice(&rest);
        return parse_reply(&String::from_utf8_lossy(&got)).map_err(not_run);
    }
    // It runs: wait for the action however long it takes.
    let _ = stream.set_read_timeout(None);
    let mut rest = got.split_off(first.len() + 1);
    let lost = |e: String| {
        Attempt::Failed(CtlError::Unknown(format!(
            "{}: {line:?} started, then its answer was lost ({e}); whether it finished is unknown",
            socket.display()
        )))
    };
    stream.read_to_end(&mut rest).map_err(|e| lost(e.to_string()))?;
    let reply = String::from_utf8_lossy(&rest);
    if reply.is_empty() {
        return Err(lost("the server closed the connection".into()));
    }
    parse_reply(&reply).map_err(|m| {
        if reply.starts_with("error ") {
            Attempt::Failed(CtlError::NotRun(m))
        } else {
            lost(m)
        }
    })
}

/// Reads into `got` until it holds a whole first line, by `deadline`;
/// returns that line.
fn read_line(stream: &mut UnixStream, got: &mut Vec<u8>, deadline: Instant) -> Result<String, String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = got.iter().position(|&b| b == b'\n') {
            return Ok(String::from_utf8_lossy(&got[..end]).into_owned());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timed out".into());
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut chunk) {
            Ok(0) if got.is_empty() => return Err("the server closed the connection".into()),
            Ok(0) => return Ok(String::from_utf8_lossy(got).into_owned()),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err("timed out".into())
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// `ok\nTEXT` → `TEXT`; `error MESSAGE` → the message.
fn parse_reply(reply: &str) -> Result<String, String> {
    match reply.split_once('\n') {
        Some(("ok", text)) => Ok(text.to_owned()),
        _ => match reply.strip_prefix("error ") {
            Some(message) => Err(message.trim_end().to_owned()),
            None => Err(format!("unexpected answer {reply:?}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn replies() {
        assert_eq!(parse_reply("ok\n1 2 3\n"), Ok("1 2 3\n".into()));
        assert_eq!(parse_reply("ok\n"), Ok(String::new()));
        assert_eq!(parse_reply("error no attribute \"x\"\n"), Err("no attribute \"x\"".into()));
        assert!(parse_reply("").is_err());
        assert!(parse_reply("hello\n").is_err());
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert!(seconds("-1").is_err() && seconds("soon").is_err() && seconds("NaN").is_err());
    }

    #[test]
    fn paths_in_requests_are_made_absolute_here_and_zero_timeouts_refused() {
        let words = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let here = std::env::current_dir().unwrap();
        let line = request_line(&words(&["backing_dev", "wb.img"])).unwrap();
        assert_eq!(line, format!("backing_dev {}", here.join("wb.img").display()));
        assert_eq!(request_line(&words(&["backing_dev", "none"])).unwrap(), "backing_dev none");
        let line = request_line(&words(&["algorithm_params", "algo=zstd level=3 dict=d.dict"])).unwrap();
        assert_eq!(line, format!("algorithm_params algo=zstd level=3 dict={}", here.join("d.dict").display()));
        assert_eq!(request_line(&words(&["mm_stat"])).unwrap(), "mm_stat");
        assert_eq!(request_line(&words(&["writeback", "huge"])).unwrap(), "writeback huge");
        assert!(positive_seconds("0").is_err() && positive_seconds("0.0000000001").is_err());
        assert_eq!(positive_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds("0"), Ok(Duration::ZERO), "--busy-retry 0: once");
    }

    /// A fake server answering each connection with the next of `answers`
    /// after reading the request line.
    fn fake(answers: Vec<&'static str>) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            for (answer, stream) in answers.into_iter().zip(listener.incoming()) {
                let mut stream = stream.unwrap();
                let mut byte = [0u8; 1];
                while stream.read(&mut byte).is_ok_and(|n| n == 1 && byte[0] != b'\n') {}
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        (dir, path)
    }

    #[test]
    fn busy_is_tried_again_and_each_outcome_has_its_exit_code() {
        let (_dir, path) = fake(vec!["busy 16 at once\n", "busy 16 at once\n", "running\nok\n42\n"]);
        assert_eq!(request_with(&path, "compact", Duration::from_secs(5), Duration::from_secs(5)), Ok("42\n".into()));
        let (_dir, path) = fake(vec!["busy 16 at once\n"; 100]);
        let err = request_with(&path, "idle all", Duration::from_secs(5), Duration::from_millis(300)).unwrap_err();
        assert!(matches!(&err, CtlError::Busy(m) if m.contains("not run") && m.contains("16 at once")), "{err:?}");
        assert_eq!(err.exit_code(), 3);
        let (_dir, path) = fake(vec!["running\nerror busy: reset: the device is open (1 user)\n"]);
        let err = request_with(&path, "reset", Duration::from_secs(5), Duration::from_secs(5)).unwrap_err();
        assert_eq!(err, CtlError::NotRun("busy: reset: the device is open (1 user)".into()), "refused, not retried");
        let (_dir, path) = fake(vec!["running\n"]);
        let err = request_with(&path, "writeback idle", Duration::from_secs(5), Duration::ZERO).unwrap_err();
        assert_eq!(err.exit_code(), 4, "{err:?}");
        let (_dir, path) = fake(vec!["error no request line within 5 s\n"]);
        assert_eq!(request_with(&path, "x", Duration::from_secs(5), Duration::ZERO).unwrap_err().exit_code(), 1);
        let missing = tempfile::tempdir().unwrap();
        let err = request_with(&missing.path().join("no.sock"), "mm_stat", Duration::from_secs(1), Duration::ZERO);
        assert_eq!(err.unwrap_err().exit_code(), 1);
    }

    #[test]
    fn a_silent_peer_is_given_up_on_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let started = Instant::now();
        let err = request_with(&path, "mm_stat", Duration::from_millis(500), Duration::from_secs(5)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        assert!(matches!(&err, CtlError::NotRun(m) if m.contains("no answer within 0.5 s")), "{err:?}");
        drop(held.join());
    }
}
