//! Every path-taking option of `zram serve` and `zram ctl` against every
//! path form (`forms`, as `tests/paths.rs` does for the other commands):
//! sockets are made only at new names (anything else is refused, saying
//! what it is); files the device opens (`--backing-dev`, `dict=`,
//! `--plugin`, `ctl backing_dev`, `ctl algorithm_params dict=`) must be
//! regular files, and a relative one names the file in the caller's
//! directory, never the server's; the paths the plugin takes as text must
//! be UTF-8; a served URI connects with `nbdinfo` as printed. The cells and
//! their outcomes are printed (`--nocapture`).

use crate::common::{mmkit, plugin, require, serve_in};
use crate::forms::{self, arg_and_cwd, make, snapshot, Expect, FifoPeer, Form, ALL};
use std::ffi::OsString;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// What a row's path is and how a cell runs it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A `serve` option: the server runs until its URI is printed, is
    /// checked, then stopped.
    Serve,
    /// A `ctl` request to a served, reset device.
    Ctl,
}

struct Row {
    name: &'static str,
    kind: Kind,
    /// What the Relative and Odd forms are: a regular file or a new name.
    plain: Form,
    /// The arguments, given the path argument and the fixed directory.
    args: fn(&OsString, &Path) -> Vec<OsString>,
    expect: fn(Form) -> Expect,
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

fn cat(parts: &[&std::ffi::OsStr]) -> OsString {
    parts.iter().fold(OsString::new(), |mut s, p| {
        s.push(p);
        s
    })
}

/// A socket to create: only at a new name.
fn socket_expect(form: Form) -> Expect {
    match form {
        Form::New | Form::Relative | Form::Odd => Expect::Ok,
        Form::Regular => Expect::Refused("a regular file, not a socket"),
        Form::Directory => Expect::Refused("a directory, not a socket"),
        Form::Device => Expect::Refused("a character device, not a socket"),
        Form::Fifo => Expect::Refused("a FIFO"),
        _ => Expect::Refused("a symbolic link, not a socket"),
    }
}

/// A file the device opens: a regular file, by any route; `utf8`: the
/// path must be text.
fn device_file_expect(form: Form, missing: &'static str, not_file: &'static str) -> Expect {
    match form {
        Form::Regular | Form::LinkToRegular | Form::Relative | Form::Odd => Expect::Ok,
        Form::New | Form::LinkToNew => Expect::Refused(missing),
        Form::Directory | Form::LinkToDirectory => {
            Expect::Refused(if not_file.is_empty() { "a directory" } else { not_file })
        }
        Form::Device | Form::LinkToDevice => {
            Expect::Refused(if not_file.is_empty() { "a character device" } else { not_file })
        }
        Form::Fifo | Form::LinkToFifo => Expect::Refused(if not_file.is_empty() { "a FIFO" } else { not_file }),
    }
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "serve --unix PATH",
            kind: Kind::Serve,
            plain: Form::New,
            args: |arg, _| vec![os("--unix"), arg.clone()],
            expect: socket_expect,
        },
        Row {
            name: "serve --control PATH",
            kind: Kind::Serve,
            plain: Form::New,
            args: |arg, _| vec![os("--control"), arg.clone()],
            expect: |form| match form {
                Form::Odd => Expect::Refused("not UTF-8"),
                other => socket_expect(other),
            },
        },
        Row {
            name: "serve --backing-dev FILE",
            kind: Kind::Serve,
            plain: Form::Regular,
            args: |arg, _| vec![os("--backing-dev"), arg.clone()],
            expect: |form| match form {
                Form::Odd => Expect::Refused("not UTF-8"),
                Form::Directory | Form::LinkToDirectory => Expect::Refused("a directory, not a regular file"),
                Form::Device | Form::LinkToDevice => Expect::Refused("a character device, not a regular file"),
                Form::Fifo | Form::LinkToFifo => {
                    Expect::Refused("a FIFO (a named or unnamed pipe), not a regular file")
                }
                other => device_file_expect(other, "No such file", ""),
            },
        },
        Row {
            name: "serve --plugin PATH",
            kind: Kind::Serve,
            plain: Form::Regular,
            args: |arg, _| vec![os("--plugin"), arg.clone()],
            expect: |form| device_file_expect(form, "No such file", ""),
        },
        Row {
            name: "serve --algorithm-params dict=PATH",
            kind: Kind::Serve,
            plain: Form::Regular,
            args: |arg, _| {
                vec![os("--comp"), os("zstd"), os("--algorithm-params"), cat(&[os("algo=zstd dict=").as_os_str(), arg])]
            },
            expect: |form| match form {
                // clap takes the parameters as text.
                Form::Odd => Expect::Refused("UTF-8"),
                other => device_file_expect(other, "No such file", "not a regular file"),
            },
        },
        Row {
            name: "ctl SOCKET",
            kind: Kind::Ctl,
            plain: Form::LinkToRegular,
            args: |arg, _| vec![arg.clone(), os("mm_stat")],
            expect: |form| match form {
                Form::Relative | Form::Odd => Expect::Ok,
                Form::Regular | Form::LinkToRegular => Expect::Refused("a regular file, not a control socket"),
                Form::New | Form::LinkToNew => Expect::Refused("no control socket there"),
                Form::Directory | Form::LinkToDirectory => Expect::Refused("a directory, not a control socket"),
                Form::Device | Form::LinkToDevice => Expect::Refused("a character device, not a control socket"),
                Form::Fifo | Form::LinkToFifo => Expect::Refused("a FIFO (a named or unnamed pipe), not a control"),
            },
        },
        Row {
            name: "ctl backing_dev PATH",
            kind: Kind::Ctl,
            plain: Form::Regular,
            args: |arg, _| vec![os("backing_dev"), arg.clone()],
            expect: |form| match form {
                Form::Odd => Expect::Refused("UTF-8"),
                Form::Directory | Form::LinkToDirectory => Expect::Refused("a directory, not a regular file"),
                Form::Device | Form::LinkToDevice => Expect::Refused("a character device, not a regular file"),
                Form::Fifo | Form::LinkToFifo => {
                    Expect::Refused("a FIFO (a named or unnamed pipe), not a regular file")
                }
                other => device_file_expect(other, "No such file", ""),
            },
        },
        Row {
            name: "ctl algorithm_params dict=PATH",
            kind: Kind::Ctl,
            plain: Form::Regular,
            args: |arg, _| vec![os("algorithm_params"), cat(&[os("algo=zstd dict=").as_os_str(), arg])],
            expect: |form| match form {
                Form::Odd => Expect::Refused("UTF-8"),
                other => device_file_expect(other, "No such file", "not a regular file"),
            },
        },
    ]
}

/// A served device for the `ctl` rows, reset (no client holds it) so that
/// its configuration takes paths; its control socket.
struct Served {
    child: Child,
    control: PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("ctl.sock");
        let (child, uri) =
            serve_until_uri(&[os("--size"), os("4M"), os("--control"), control.clone().into()], dir.path());
        assert!(uri.is_some(), "the ctl rows' server did not start");
        let ctl = |words: &[&str]| {
            let out = Command::new(mmkit()).args(["zram", "ctl"]).arg(&control).args(words).output().unwrap();
            assert!(out.status.success(), "{words:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ctl(&["reset"]);
        ctl(&["comp_algorithm", "zstd"]);
        Self { child, control, _dir: dir }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

fn stop(child: &mut Child) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let _ = child.wait();
}

/// `mmkit zram serve ARGS` in `cwd`, until it prints its URI or exits.
fn serve_until_uri(args: &[OsString], cwd: &Path) -> (Child, Option<String>) {
    serve_in(args, cwd, &[])
}

/// One cell; returns its line of the printed table.
fn cell(row: &Row, form: Form, fixed: &Path, served: Option<&Served>) -> String {
    let scene = tempfile::tempdir().unwrap();
    let fill_from = match row.name {
        "serve --plugin PATH" => Some(plugin()),
        "serve --algorithm-params dict=PATH" | "ctl algorithm_params dict=PATH" => Some(fixed.join("d.dict")),
        _ => None,
    };
    let fill = |p: &Path| match &fill_from {
        Some(from) => {
            std::fs::copy(from, p).unwrap();
        }
        None => std::fs::write(p, vec![0u8; 1 << 20]).unwrap(),
    };
    let path = if row.kind == Kind::Ctl && row.name == "ctl SOCKET" && matches!(form, Form::Relative | Form::Odd) {
        // The live control socket, reached through a link of this form.
        let link = scene.path().join(forms::file_name(form, "target"));
        std::os::unix::fs::symlink(&served.unwrap().control, &link).unwrap();
        link
    } else {
        make(scene.path(), form, "target", row.plain, &fill)
    };
    let (arg, cwd) = arg_and_cwd(scene.path(), form, &path);
    let is_fifo = std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_fifo());
    // A FIFO must never be waited on: a writer that gives up when the
    // command is done.
    let peer = is_fifo.then(|| FifoPeer::feed(&path, vec![0u8; 4096]));
    let before = snapshot(scene.path());
    let what = format!("{} x {}", row.name, form.name());
    let (ok, stderr, detail) = match row.kind {
        Kind::Serve => serve_cell(row, &arg, &cwd, fixed, &path, form, &what),
        Kind::Ctl => ctl_cell(row, &arg, &cwd, served.unwrap(), &path, form, &what),
    };
    if let Some(peer) = peer {
        peer.finish();
    }
    match (row.expect)(form) {
        Expect::Refused(text) => {
            assert!(!ok, "{what}: succeeded");
            assert!(stderr.contains(text), "{what}: the message does not say {text:?}: {stderr}");
        }
        Expect::Ok => assert!(ok, "{what}: failed: {stderr}"),
    }
    assert_eq!(snapshot(scene.path()), before, "{what}: the scene changed (a socket or file left or replaced)");
    let first = stderr.lines().find(|l| l.contains("error")).unwrap_or(&detail);
    format!("| {} | {} | {} |", row.name, form.name(), first.replace('|', "/"))
}

/// A `serve` cell: whether it served (its URI connected with `nbdinfo`
/// as printed, and what the row's path names was used), its stderr.
fn serve_cell(
    row: &Row,
    arg: &OsString,
    cwd: &Path,
    _fixed: &Path,
    path: &Path,
    form: Form,
    what: &str,
) -> (bool, String, String) {
    let mut args = vec![os("--size"), os("4M")];
    args.extend((row.args)(arg, cwd));
    let (mut child, uri) = serve_until_uri(&args, cwd);
    let Some(uri) = uri else {
        let out = child.wait_with_output().unwrap();
        return (false, String::from_utf8_lossy(&out.stderr).into_owned(), String::new());
    };
    let info = Command::new("nbdinfo").args(["--size", &uri]).output().unwrap();
    let size = String::from_utf8_lossy(&info.stdout).trim().to_owned();
    assert_eq!(size, "4194304", "{what}: nbdinfo {uri}: {}", String::from_utf8_lossy(&info.stderr));
    let mut detail = format!("ok: {uri} connects");
    if row.name == "serve --unix PATH" {
        assert!(uri.contains("socket=/"), "{what}: not absolute: {uri}");
        let sock = std::fs::canonicalize(path.parent().unwrap()).unwrap().join(path.file_name().unwrap());
        assert!(sock.symlink_metadata().unwrap().file_type().is_socket(), "{what}: no socket at the path");
        detail = format!("ok: the URI names it absolutely, percent-encoded; nbdinfo connects ({form:?})");
    }
    stop(&mut child);
    let out = child.wait_with_output().unwrap();
    (true, String::from_utf8_lossy(&out.stderr).into_owned(), detail)
}

/// A `ctl` cell: whether the request ran and, for a path the device
/// takes, that it names the file in the caller's directory.
fn ctl_cell(
    row: &Row,
    arg: &OsString,
    cwd: &Path,
    served: &Served,
    path: &Path,
    _form: Form,
    what: &str,
) -> (bool, String, String) {
    let mut command = Command::new(mmkit());
    command.current_dir(cwd).args(["zram", "ctl"]);
    if row.name != "ctl SOCKET" {
        command.arg(&served.control);
    }
    let out = forms::run_with_deadline(command.args((row.args)(arg, cwd)), Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return (false, stderr, String::new());
    }
    let control = |words: &[&str]| {
        let out = Command::new(mmkit()).args(["zram", "ctl"]).arg(&served.control).args(words).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let detail = match row.name {
        "ctl backing_dev PATH" => {
            let shown = control(&["backing_dev"]);
            let expected = std::path::absolute(cwd.join(arg)).unwrap();
            assert_eq!(shown.trim(), expected.to_str().unwrap(), "{what}: the device took another file");
            let _ = path;
            control(&["backing_dev", "none"]);
            format!("ok: the device holds {}", shown.trim().replace(cwd.to_str().unwrap_or("?"), "."))
        }
        "ctl algorithm_params dict=PATH" => "ok: stored (the path sent absolute)".to_owned(),
        _ => "ok: mm_stat answered".to_owned(),
    };
    (true, stderr, detail)
}

#[test]
fn every_serve_and_ctl_path_option_against_every_path_form() {
    if !require(&["nbdkit", "nbdinfo"]) {
        return;
    }
    plugin();
    let fixed = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 251) as u8 ^ (i / 4096) as u8).collect();
    std::fs::write(fixed.path().join("data"), &data).unwrap();
    let out = Command::new(mmkit())
        .args(["zram", "train-dict", "--size", "4K", "--out"])
        .arg(fixed.path().join("d.dict"))
        .arg(fixed.path().join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    if !forms::is_root() {
        eprintln!("skipped: the device-node forms (mknod needs root); the other forms run");
    }
    let mut table = vec!["| option | path form | outcome |".to_owned(), "|---|---|---|".into()];
    for row in rows() {
        let served = (row.kind == Kind::Ctl).then(Served::start);
        for form in ALL {
            if form.needs_root() && !forms::is_root() {
                continue;
            }
            table.push(cell(&row, form, fixed.path(), served.as_ref()));
        }
    }
    println!("{}", table.join("\n"));
}
