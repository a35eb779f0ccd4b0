//! The control socket: what zram users do through sysfs (`cat mm_stat`,
//! `echo all > idle`, `echo huge > writeback`), over a Unix socket of mode
//! 0600 that `mmkit zram ctl` talks to.
//!
//! The exchange is one request per connection: the client sends one line,
//! `NAME` or `NAME VALUE` (`mm_stat`, `idle all`, `recompress type=huge`,
//! `mem_limit 64M`); the server answers `ok` on the first line followed by
//! the attribute's text in the kernel's format, or `error MESSAGE`, and
//! closes. A bare `NAME` shows the attribute, or for `compact` and `reset`
//! performs it; `NAME VALUE` stores. The device's `attr_show` and
//! `attr_store` do the work.
//!
//! Owns the socket's life (bound under a temporary name, made 0600, then
//! renamed into place so no other user can ever connect) and the request
//! format; knows nothing of nbdkit.

use mmkit_zram::{Zram, SHOW_ATTRS};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Longest request line taken.
const MAX_REQUEST: u64 = 4096;

/// A bound control socket, not yet serving.
#[derive(Debug)]
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path` with mode 0600. An existing file at `path` is an
    /// error, never replaced.
    ///
    /// # Errors
    /// The path exists, or binding, `chmod` or `rename` failed.
    pub fn bind(path: &Path) -> std::io::Result<Self> {
        if path.symlink_metadata().is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists; remove it or choose another control path", path.display()),
            ));
        }
        let mut staging = path.as_os_str().to_owned();
        staging.push(format!(".{}.tmp", std::process::id()));
        let staging = PathBuf::from(staging);
        let _ = std::fs::remove_file(&staging);
        let listener = UnixListener::bind(&staging)?;
        let placed = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::rename(&staging, path));
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&staging);
            return Err(e);
        }
        Ok(Self { listener, path: path.to_owned() })
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers requests on a thread of its own, one connection at a time,
    /// for as long as the process lives.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn serve(self, zram: Arc<Zram>) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("mmkit-zram-control".into()).spawn(move || {
            for stream in self.listener.incoming() {
                match stream {
                    Ok(stream) => handle(stream, &zram),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
    }
}

/// One connection: a request line in, the answer out. A client that sends
/// nothing for 10 s is dropped, so it cannot hold the socket. What follows
/// the request line is read and dropped after the answer: closing a Unix
/// socket with unread input would reset the connection and lose the
/// answer.
fn handle(stream: UnixStream, zram: &Zram) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let Ok(reader) = stream.try_clone() else { return };
    let mut reader = BufReader::new(reader);
    let mut line = String::new();
    let reply = match (&mut reader).take(MAX_REQUEST).read_line(&mut line) {
        Ok(_) => match answer(zram, &line) {
            Ok(text) => format!("ok\n{text}"),
            Err(message) => format!("error {message}\n"),
        },
        Err(e) => format!("error reading the request: {e}\n"),
    };
    let mut stream = stream;
    if stream.write_all(reply.as_bytes()).is_ok() && stream.shutdown(std::net::Shutdown::Write).is_ok() {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let _ = std::io::copy(&mut reader.take(1 << 20), &mut std::io::sink());
    }
}

/// The answer to one request line, or why it was refused.
///
/// # Errors
/// An unknown attribute, a store the device refused (nothing changed), an
/// empty request.
pub fn answer(zram: &Zram, request: &str) -> Result<String, String> {
    let request = request.trim();
    let (name, value) = request.split_once(char::is_whitespace).unwrap_or((request, ""));
    let value = value.trim();
    if name.is_empty() {
        return Err("empty request; try mm_stat".into());
    }
    let result = if !value.is_empty() {
        zram.attr_store(name, value)
    } else if matches!(name, "compact" | "reset") {
        zram.attr_store(name, "1")
    } else if SHOW_ATTRS.contains(&name) {
        zram.attr_show(name)
    } else {
        zram.attr_store(name, value)
    };
    result.map_err(|e| e.to_string())
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
        zram.write(0, &page()).unwrap();
        zram.write(PAGE_SIZE as u64, &[5; PAGE_SIZE]).unwrap();
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
        answer(&zram, "reset").unwrap();
        assert_eq!(answer(&zram, "mm_stat").unwrap().split_whitespace().next(), Some("0"), "reset empties the device");
    }

    #[test]
    fn bad_requests_are_refused_and_change_nothing() {
        let zram = device();
        zram.write(0, &page()).unwrap();
        let before = zram.mm_stat();
        for request in
            ["", "  \n", "colour", "colour blue", "idle sometimes", "writeback huge", "reset 0", "recompress type=nope"]
        {
            assert!(answer(&zram, request).is_err(), "{request:?} was taken");
        }
        assert_eq!(zram.mm_stat(), before);
    }

    #[test]
    fn the_socket_is_private_answers_each_connection_and_never_replaces_a_file() {
        let dir = std::env::temp_dir().join(format!("mmkit-nbdkit-control-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let _ = std::fs::remove_file(&path);
        let socket = ControlSocket::bind(&path).unwrap();
        assert_eq!(socket.path(), path);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(ControlSocket::bind(&path).is_err(), "an existing file is never replaced");
        let zram = device();
        zram.write(0, &page()).unwrap();
        socket.serve(Arc::clone(&zram)).unwrap();
        let reply = ask(&path, "mm_stat\n");
        let (status, body) = reply.split_once('\n').unwrap();
        assert_eq!(status, "ok");
        assert_eq!(body.split_whitespace().next(), Some(PAGE_SIZE.to_string().as_str()), "{reply}");
        assert!(ask(&path, "colour\n").starts_with("error "));
        assert!(ask(&path, &"x".repeat(10_000)).starts_with("error "), "an overlong request");
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("ctl.sock")], "no staging file left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
