//! Reading a file the user named as the user meant it: [`Input::open`].
//!
//! - A regular file (a symbolic link to one included) is kept open and
//!   read where it is; every pass reads the file opened first, and
//!   [`Input::check_unchanged`] compares its size and modification time,
//!   and which file the path names, with what they were at the start, so a
//!   trace rewritten or replaced during a run is reported, not half read.
//! - A pipe or FIFO (`/dev/stdin` on a pipe, `<(…)`, `mkfifo`) can be read
//!   once: for a command that reads its input once it is read as it comes;
//!   for one that reads it twice it is first copied to an unnamed
//!   temporary file (`TMPDIR`; gone when the process ends, whatever ends
//!   it), so the second pass does not find it empty.
//! - A directory, a device (`/dev/zero` never ends, a terminal is no
//!   trace) or a socket is refused, naming what it is.

use super::noun;
use std::fs::{File, Metadata};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// How many times a command reads its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passes {
    /// Once, front to back: a stream is read as it comes.
    One,
    /// More than once, or with seeks: a stream is copied first.
    Many,
}

/// What identifies a regular file's contents for the run.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Seen {
    fn of(meta: &Metadata) -> Self {
        Self { dev: meta.dev(), ino: meta.ino(), len: meta.len(), modified: meta.modified().ok() }
    }
}

/// An input opened by the rules of the module doc.
#[derive(Debug)]
pub struct Input {
    path: PathBuf,
    file: File,
    /// `None` for a stream (read as it comes, or its copy).
    seen: Option<Seen>,
    /// A stream read as it comes: [`reader`](Self::reader) works once.
    once: bool,
}

impl Input {
    /// Opens `path` for a command that reads it `passes` times.
    ///
    /// # Errors
    /// A directory, a device or a socket (the message says which); the
    /// file cannot be opened; a stream cannot be copied.
    pub fn open(path: &Path, passes: Passes) -> Result<Self, String> {
        let shown = path.display();
        let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
        let t = meta.file_type();
        if t.is_dir() || t.is_char_device() || t.is_block_device() || t.is_socket() {
            let hint =
                if t.is_dir() { "name a file" } else { "name a file, a pipe or a FIFO (/dev/stdin when it is a pipe)" };
            return Err(format!("{shown}: {}, not a file to read; {hint}", noun(&meta)));
        }
        let mut file = File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        if t.is_file() {
            let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
            return Ok(Self { path: path.to_owned(), file, seen: Some(Seen::of(&meta)), once: false });
        }
        if passes == Passes::One {
            return Ok(Self { path: path.to_owned(), file, seen: None, once: true });
        }
        let mut copy = tempfile::tempfile().map_err(|e| format!("{shown}: a temporary file for the stream: {e}"))?;
        io::copy(&mut file, &mut copy).map_err(|e| format!("{shown}: copying the stream to a temporary file: {e}"))?;
        Ok(Self { path: path.to_owned(), file: copy, seen: None, once: false })
    }

    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size and modification time, for a regular file (what a cache
    /// of it records).
    pub fn size_and_mtime(&self) -> Option<(u64, Option<SystemTime>)> {
        self.seen.as_ref().map(|s| (s.len, s.modified))
    }

    /// A handle at the start of the contents: each pass reads through one.
    /// Passes take turns (the handles share one position).
    ///
    /// # Errors
    /// Cloning or seeking failed.
    pub fn reader(&self) -> io::Result<File> {
        let mut file = self.file.try_clone()?;
        if !self.once {
            file.seek(SeekFrom::Start(0))?;
        }
        Ok(file)
    }

    /// Whether the file is as it was when it was opened: the same size and
    /// modification time, and still the file its path names.
    ///
    /// # Errors
    /// Says what changed.
    pub fn check_unchanged(&self) -> Result<(), String> {
        let Some(seen) = &self.seen else { return Ok(()) };
        let shown = self.path.display();
        let now = self.file.metadata().map(|m| Seen::of(&m)).map_err(|e| format!("{shown}: {e}"))?;
        let changed = |what: String| {
            Err(format!("{shown} changed during the run ({what}); what was read no longer describes it, run again"))
        };
        if now.len != seen.len {
            return changed(format!("{} bytes, then {}", seen.len, now.len));
        }
        if now.modified != seen.modified {
            return changed("modified".into());
        }
        match std::fs::metadata(&self.path) {
            Ok(m) if m.dev() == seen.dev && m.ino() == seen.ino => Ok(()),
            Ok(_) => changed("another file was put at its path".into()),
            Err(e) => changed(format!("its path: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn read_all(input: &Input) -> Vec<u8> {
        let mut bytes = Vec::new();
        input.reader().unwrap().read_to_end(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_fifo_read_twice_gives_the_same_bytes_and_a_change_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
            .unwrap();
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, b"stream bytes").unwrap())
        };
        let input = Input::open(&fifo, Passes::Many).unwrap();
        writer.join().unwrap();
        assert!(input.size_and_mtime().is_none(), "a stream");
        assert_eq!(read_all(&input), b"stream bytes");
        assert_eq!(read_all(&input), b"stream bytes", "the second pass");
        assert!(input.check_unchanged().is_ok());

        let file = d.path().join("file");
        std::fs::write(&file, b"one").unwrap();
        let input = Input::open(&file, Passes::Many).unwrap();
        assert_eq!(read_all(&input), b"one");
        assert!(input.check_unchanged().is_ok());
        std::fs::write(&file, b"three").unwrap();
        let err = input.check_unchanged().unwrap_err();
        assert!(err.contains("changed during the run") && err.contains("3 bytes, then 5"), "{err}");
        // Replaced by rename: the same size, another file.
        let input = Input::open(&file, Passes::Many).unwrap();
        std::fs::write(d.path().join("other"), b"THREE").unwrap();
        std::fs::rename(d.path().join("other"), &file).unwrap();
        assert_eq!(read_all(&input), b"three", "the file opened first is read");
        let err = input.check_unchanged().unwrap_err();
        assert!(err.contains("changed during the run"), "{err}");

        let err = Input::open(d.path(), Passes::One).unwrap_err();
        assert!(err.contains("a directory"), "{err}");
    }
}
