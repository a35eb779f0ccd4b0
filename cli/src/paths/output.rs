//! Writing a file the user named as the user meant it: [`check_output`]
//! before the work (so that a command fails before its work, not after
//! it), [`Output::create`] to write, [`Output::finish`] to complete.
//!
//! - A new name, or an existing regular file: written to a temporary file
//!   beside it (the existing file's permission bits, else 0666 less the
//!   umask) and renamed over the name when complete, so that a cut-short
//!   output never carries the final name and the old contents stay until
//!   the new ones are whole. A name that appears meanwhile is not replaced.
//! - A character device (`/dev/null`, a terminal) or a FIFO (a named pipe,
//!   `/dev/stdout` on a pipe): opened and written through, never created,
//!   truncated, or replaced by a regular file.
//! - A symbolic link: the file it names, by the rules above (a regular
//!   file behind it is replaced atomically where it is; the link stays).
//! - A directory, a block device, a socket, a link to nothing, a missing
//!   directory: refused with a message naming what the path is.
//!
//! When the output is this process's own standard output (`/dev/stdout`,
//! or a file stdout is redirected to), [`stdout_is_an_output`] says so and
//! the command's own text goes to stderr instead, so it cannot be mixed
//! into the data.

use super::noun;
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Set once an output turns out to be this process's standard output.
static STDOUT_IS_AN_OUTPUT: AtomicBool = AtomicBool::new(false);

/// Whether a file opened by [`Output::create`] is standard output itself:
/// the command's report then goes to stderr.
pub fn stdout_is_an_output() -> bool {
    STDOUT_IS_AN_OUTPUT.load(Relaxed)
}

/// How a path is written.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// A new file at this path, by rename when complete.
    Create(PathBuf),
    /// The regular file at this path (a link's target, resolved), replaced
    /// by rename when complete.
    Replace(PathBuf),
    /// Opened and written in place: a character device or a FIFO.
    Through(PathBuf),
}

/// The directory a path's last component lives in.
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// How `path` would be written, or why it cannot be.
fn plan(path: &Path) -> Result<Plan, String> {
    let shown = path.display();
    let lmeta = match path.symlink_metadata() {
        Ok(m) => m,
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
            let dir = parent_of(path);
            return match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => Ok(Plan::Create(path.to_owned())),
                Ok(m) => Err(format!("{shown}: {} is {}, not a directory", dir.display(), noun(&m))),
                Err(e) => Err(format!("{shown}: directory {}: {e}", dir.display())),
            };
        }
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let (meta, through_link) = if lmeta.file_type().is_symlink() {
        match std::fs::metadata(path) {
            Ok(m) => (m, true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let to = std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
                return Err(format!(
                    "{shown}: a symbolic link to {to}, which does not exist; name the file to create itself"
                ));
            }
            Err(e) => return Err(format!("{shown}: {e}")),
        }
    } else {
        (lmeta, false)
    };
    let t = meta.file_type();
    if t.is_file() {
        if !through_link {
            return Ok(Plan::Replace(path.to_owned()));
        }
        // The file the link names, replaced where it is; the link stays.
        return std::fs::canonicalize(path).map(Plan::Replace).map_err(|e| format!("{shown}: resolving the link: {e}"));
    }
    if t.is_char_device() || t.is_fifo() {
        return Ok(Plan::Through(path.to_owned()));
    }
    let what = noun(&meta);
    let why = if t.is_dir() {
        "name a file to write"
    } else if t.is_block_device() {
        "mmkit writes files, not disks; name a file"
    } else {
        "it cannot be written as a file; name a file"
    };
    Err(format!("{shown}: {what}{}; {why}", if through_link { " (through a symbolic link)" } else { "" }))
}

/// Checks, before any work, that `path` can be written as [`Output::create`]
/// would: the message says what the path is when it cannot.
///
/// # Errors
/// A directory, a block device, a socket, a link to nothing, a missing
/// directory.
pub fn check_output(path: &Path) -> Result<(), String> {
    plan(path).map(|_| ())
}

/// Whether `meta` is this process's standard output.
fn is_stdout(meta: &Metadata) -> bool {
    let stdout = std::io::stdout();
    let Ok(fd) = stdout.as_fd().try_clone_to_owned() else { return false };
    File::from(fd).metadata().is_ok_and(|m| super::same_file(&m, meta))
}

/// Where the bytes go until [`Output::finish`].
enum Sink {
    /// A temporary file beside `dest`, renamed over it when complete;
    /// removed if dropped before.
    Staged { tmp: tempfile::NamedTempFile, dest: PathBuf, new: bool },
    /// The file itself.
    Through(File),
}

/// An output being written (see the module doc).
pub struct Output {
    sink: Sink,
    path: PathBuf,
    written: u64,
}

impl Output {
    /// Opens `path` for writing by the rules of the module doc. A FIFO
    /// blocks here until a reader opens it, as for any writer.
    ///
    /// # Errors
    /// What [`check_output`] refuses; the temporary file or the device
    /// cannot be opened.
    pub fn create(path: &Path) -> Result<Self, String> {
        let shown = path.display();
        let sink = match plan(path)? {
            Plan::Create(dest) => Sink::Staged { tmp: stage(&dest, None)?, dest, new: true },
            Plan::Replace(dest) => {
                let mode = std::fs::metadata(&dest).map(|m| m.permissions().mode() & 0o7777).ok();
                Sink::Staged { tmp: stage(&dest, mode)?, dest, new: false }
            }
            Plan::Through(dest) => {
                let file = File::options().write(true).open(&dest).map_err(|e| format!("{shown}: {e}"))?;
                Sink::Through(file)
            }
        };
        let meta = match &sink {
            Sink::Staged { dest, new: false, .. } => std::fs::metadata(dest).ok(),
            Sink::Staged { .. } => None,
            Sink::Through(file) => file.metadata().ok(),
        };
        if meta.as_ref().is_some_and(is_stdout) {
            STDOUT_IS_AN_OUTPUT.store(true, Relaxed);
        }
        Ok(Self { sink, path: path.to_owned(), written: 0 })
    }

    /// Bytes written so far (the offset of the next byte: a FIFO or a
    /// device cannot be asked).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Completes the output: a staged file is synced and renamed over its
    /// name (a name that appeared meanwhile, or that is no longer a
    /// regular file, is not replaced); a file written through is flushed.
    /// Returns the bytes written.
    ///
    /// # Errors
    /// Syncing or renaming failed, or the name changed meanwhile; the
    /// temporary file is removed.
    pub fn finish(self) -> Result<u64, String> {
        let shown = self.path.display().to_string();
        match self.sink {
            Sink::Through(mut file) => file.flush().map_err(|e| format!("{shown}: {e}"))?,
            Sink::Staged { tmp, dest, new } => {
                tmp.as_file().sync_all().map_err(|e| format!("{shown}: {e}"))?;
                if new {
                    tmp.persist_noclobber(&dest).map_err(|e| {
                        format!("{shown}: {} (something was created at this name meanwhile; not replaced)", e.error)
                    })?;
                } else {
                    match dest.symlink_metadata() {
                        Ok(m) if m.file_type().is_file() => {}
                        _ => return Err(format!("{shown}: no longer a regular file; not replaced")),
                    }
                    tmp.persist(&dest).map_err(|e| format!("{shown}: {}", e.error))?;
                }
            }
        }
        Ok(self.written)
    }

    fn file(&mut self) -> &mut File {
        match &mut self.sink {
            Sink::Staged { tmp, .. } => tmp.as_file_mut(),
            Sink::Through(file) => file,
        }
    }
}

/// A temporary file beside `dest`, with `mode` (else 0666 less the umask).
fn stage(dest: &Path, mode: Option<u32>) -> Result<tempfile::NamedTempFile, String> {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    builder.permissions(std::fs::Permissions::from_mode(0o666));
    let tmp = builder
        .tempfile_in(parent_of(dest))
        .map_err(|e| format!("{}: a temporary file beside it: {e}", dest.display()))?;
    if let Some(mode) = mode {
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    Ok(tmp)
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file().write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn write(path: &Path, bytes: &[u8]) -> Result<u64, String> {
        let mut out = Output::create(path)?;
        out.write_all(bytes).map_err(|e| e.to_string())?;
        out.finish()
    }

    #[test]
    fn regular_files_are_replaced_whole_and_new_names_created() {
        let d = tempfile::tempdir().unwrap();
        let new = d.path().join("new");
        assert_eq!(write(&new, b"abc"), Ok(3));
        assert_eq!(std::fs::read(&new).unwrap(), b"abc");
        let ino = std::fs::metadata(&new).unwrap().ino();
        std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o640)).unwrap();
        write(&new, b"defg").unwrap();
        let meta = std::fs::metadata(&new).unwrap();
        assert_eq!(std::fs::read(&new).unwrap(), b"defg");
        assert_ne!(meta.ino(), ino, "replaced by rename, not rewritten");
        assert_eq!(meta.permissions().mode() & 0o777, 0o640, "the old file's mode kept");
        // A link: the file it names is replaced, the link stays.
        std::os::unix::fs::symlink("new", d.path().join("link")).unwrap();
        write(&d.path().join("link"), b"via link").unwrap();
        assert!(d.path().join("link").symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&new).unwrap(), b"via link");
        // An output dropped before finish leaves nothing.
        let mut cut = Output::create(&d.path().join("cut")).unwrap();
        cut.write_all(b"half").unwrap();
        drop(cut);
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn fifos_are_written_through_and_the_rest_refused() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
            .unwrap();
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        assert_eq!(write(&fifo, b"through"), Ok(7));
        assert_eq!(reader.join().unwrap(), b"through");
        assert!(fifo.symlink_metadata().unwrap().file_type().is_fifo(), "still a FIFO");
        let err = check_output(d.path()).unwrap_err();
        assert!(err.contains("a directory"), "{err}");
        std::os::unix::fs::symlink("nowhere", d.path().join("dangling")).unwrap();
        let err = check_output(&d.path().join("dangling")).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        let err = check_output(&d.path().join("missing/out")).unwrap_err();
        assert!(err.contains("missing"), "{err}");
        std::fs::write(d.path().join("file"), b"").unwrap();
        assert!(check_output(&d.path().join("file/out")).unwrap_err().contains("not a directory"));
        let sock = d.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(check_output(&sock).unwrap_err().contains("a socket"));
    }
}
