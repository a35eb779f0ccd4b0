//! The path forms every path-taking option is tried against (shared by
//! `cli/tests/paths.rs` and `cli/tests/nbd/paths.rs`): a regular file, a
//! new name, a directory, a device node, a FIFO, a symbolic link to each,
//! a relative path from another directory, and a name with blanks and a
//! byte that is not UTF-8. Device nodes are private ones made with
//! `mknod` in the test's own directory (never the real `/dev`), so those
//! forms need root and are skipped, saying so, without it.
//!
//! A row of a table is an option; its cells say what each form must give.
//! A new option is covered by adding a row.

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Regular,
    New,
    Directory,
    Device,
    Fifo,
    LinkToRegular,
    LinkToNew,
    LinkToDirectory,
    LinkToDevice,
    LinkToFifo,
    /// The row's plain form (a regular file, or a new name where the
    /// option creates its file) reached as `../NAME` from another
    /// directory.
    Relative,
    /// The row's plain form under a name with blanks, `&`, `#`, `%` and a
    /// byte that is not UTF-8.
    Odd,
}

pub const ALL: [Form; 12] = [
    Form::Regular,
    Form::New,
    Form::Directory,
    Form::Device,
    Form::Fifo,
    Form::LinkToRegular,
    Form::LinkToNew,
    Form::LinkToDirectory,
    Form::LinkToDevice,
    Form::LinkToFifo,
    Form::Relative,
    Form::Odd,
];

impl Form {
    pub fn name(self) -> &'static str {
        match self {
            Form::Regular => "regular file",
            Form::New => "new name",
            Form::Directory => "directory",
            Form::Device => "char device",
            Form::Fifo => "FIFO",
            Form::LinkToRegular => "link to regular",
            Form::LinkToNew => "link to nothing",
            Form::LinkToDirectory => "link to directory",
            Form::LinkToDevice => "link to device",
            Form::LinkToFifo => "link to FIFO",
            Form::Relative => "relative, other dir",
            Form::Odd => "blanks + non-UTF-8",
        }
    }

    /// Whether the form needs root (a device node).
    pub fn needs_root(self) -> bool {
        matches!(self, Form::Device | Form::LinkToDevice)
    }

    /// The form at the end of a link, if any.
    pub fn linked(self) -> Option<Form> {
        match self {
            Form::LinkToRegular => Some(Form::Regular),
            Form::LinkToNew => Some(Form::New),
            Form::LinkToDirectory => Some(Form::Directory),
            Form::LinkToDevice => Some(Form::Device),
            Form::LinkToFifo => Some(Form::Fifo),
            _ => None,
        }
    }
}

/// What a cell expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Success.
    Ok,
    /// A non-zero exit whose stderr contains this text, with nothing in
    /// the scene changed.
    Refused(&'static str),
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A private character device with the numbers of `/dev/null` (1, 3) or
/// `/dev/full` (1, 7), made at `path` (root only).
pub fn mknod_char(path: &Path, minor: u32) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from(0o666),
        rustix::fs::makedev(1, minor),
    )
    .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
}

pub fn mkfifo(path: &Path) {
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// The file name a form's object gets for `name`.
pub fn file_name(form: Form, name: &str) -> OsString {
    if form == Form::Odd {
        let mut bytes = b"sp ace&#%\xff ".to_vec();
        bytes.extend_from_slice(name.as_bytes());
        OsString::from_vec(bytes)
    } else {
        OsString::from(name)
    }
}

/// Makes `form`'s object for `name` in `scene` (`plain` is what the
/// Relative and Odd forms are: [`Form::Regular`] or [`Form::New`]; `fill`
/// writes a regular file's contents). Returns the object's path.
pub fn make(scene: &Path, form: Form, name: &str, plain: Form, fill: &dyn Fn(&Path)) -> PathBuf {
    let path = scene.join(file_name(form, name));
    let what = match form {
        Form::Relative | Form::Odd => plain,
        other => other,
    };
    if let Some(to) = what.linked() {
        let target = scene.join(format!("{name}.target"));
        make_plain(&target, to, fill);
        std::os::unix::fs::symlink(&target, &path).unwrap();
    } else {
        make_plain(&path, what, fill);
    }
    path
}

fn make_plain(path: &Path, form: Form, fill: &dyn Fn(&Path)) {
    match form {
        Form::Regular => fill(path),
        Form::New => {}
        Form::Directory => std::fs::create_dir(path).unwrap(),
        Form::Device => mknod_char(path, 3),
        Form::Fifo => mkfifo(path),
        other => unreachable!("{other:?}"),
    }
}

/// The argument that names `path` for `form`, and the directory to run in:
/// `../NAME` from `scene/elsewhere` for the relative form, the absolute
/// path from `scene` otherwise.
pub fn arg_and_cwd(scene: &Path, form: Form, path: &Path) -> (OsString, PathBuf) {
    if form == Form::Relative {
        let elsewhere = scene.join("elsewhere");
        let _ = std::fs::create_dir(&elsewhere);
        let mut arg = OsString::from("../");
        arg.push(path.file_name().unwrap());
        (arg, elsewhere)
    } else {
        (path.as_os_str().to_owned(), scene.to_owned())
    }
}

/// Everything in `dir` and below: path, kind, size and contents of regular
/// files (FIFOs and devices by kind only, links by target).
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let meta = path.symlink_metadata().unwrap();
            let t = meta.file_type();
            let (kind, bytes) = if t.is_symlink() {
                ("link".to_owned(), std::fs::read_link(&path).unwrap().into_os_string().into_vec())
            } else if t.is_file() {
                ("file".to_owned(), std::fs::read(&path).unwrap())
            } else if t.is_dir() {
                stack.push(path.clone());
                ("dir".to_owned(), Vec::new())
            } else {
                (format!("{:?}", t), Vec::new())
            };
            out.push((path, kind, bytes));
        }
    }
    out
}

/// What a FIFO helper did.
pub struct FifoPeer {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u8>>,
}

impl FifoPeer {
    /// Feeds `data` into `fifo` once a reader opens it (never blocks a
    /// test whose command does not open it).
    pub fn feed(fifo: &Path, data: Vec<u8>) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let (fifo, stop) = (fifo.to_owned(), Arc::clone(&done));
        let thread = std::thread::spawn(move || {
            let mut file = loop {
                let flags = rustix::fs::OFlags::NONBLOCK.bits() as i32;
                match std::fs::OpenOptions::new().write(true).custom_flags(flags).open(&fifo) {
                    Ok(f) => break f,
                    Err(_) if !stop.load(Ordering::Relaxed) => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => return Vec::new(),
                }
            };
            let mut at = 0;
            while at < data.len() {
                match file.write(&data[at..]) {
                    Ok(n) => at += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => break,
                }
            }
            Vec::new()
        });
        Self { done, thread }
    }

    /// Reads whatever is written into `fifo` until the command is done.
    pub fn drain(fifo: &Path) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let flags = rustix::fs::OFlags::NONBLOCK.bits() as i32;
        let mut file = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(fifo).unwrap();
        let stop = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match file.read(&mut buf) {
                    Ok(0) if stop.load(Ordering::Relaxed) => return got,
                    Ok(0) => std::thread::sleep(Duration::from_millis(2)),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("reading the FIFO: {e}"),
                }
            }
        });
        Self { done, thread }
    }

    /// Ends the helper; returns what it read.
    pub fn finish(self) -> Vec<u8> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Runs `command` with a deadline (a hang is a failure, not a stuck
/// test); its output is read as it comes, so a long report cannot fill
/// the pipe and stall it.
pub fn run_with_deadline(command: &mut Command, limit: Duration) -> Output {
    let mut child: Child =
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("runs");
    let collect = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = r.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = collect(Box::new(child.stdout.take().unwrap()));
    let stderr = collect(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr.join().unwrap();
            panic!("{command:?} still ran after {limit:?}; stderr: {}", String::from_utf8_lossy(&err));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

/// `path`'s bytes as an argument.
pub fn os(path: &Path) -> &OsStr {
    OsStr::from_bytes(path.as_os_str().as_bytes())
}
