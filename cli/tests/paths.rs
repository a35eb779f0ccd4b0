//! Every path-taking option of `convert`, `replay` and `zram train-dict`
//! against every path form (`forms`): a table whose rows are the options
//! and whose cells say what each form must give. An output that is a
//! device or a FIFO is written through and stays what it was; a regular
//! file is replaced whole; a directory, a link to nothing, a device or a
//! FIFO where a file to sample is needed are refused, naming what they
//! are, with nothing changed; an input that is a FIFO is read once and
//! replayed whole. `serve` and `ctl`'s options are the same table in
//! `tests/nbd/paths.rs`. The cells and their outcomes are printed
//! (`--nocapture`).

mod forms;

use forms::{arg_and_cwd, make, snapshot, Expect, FifoPeer, Form, ALL};
use std::ffi::OsString;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Events in [`trace`].
const EVENTS: usize = 3000;

/// A compact trace of `EVENTS` events: allocations of order 0 and 1 on
/// two CPUs, every third freed.
fn trace() -> Vec<u8> {
    let mut text = String::from("# a generated trace\n");
    let mut seq = 0;
    let mut i = 0u64;
    while seq < EVENTS {
        let pfn = 0x100000 + 4 * i;
        text.push_str(&format!("{seq} {seq} {} a {pfn:x} {} 0 0xcc0\n", i % 2, i % 2));
        seq += 1;
        if i % 3 == 0 && seq < EVENTS {
            text.push_str(&format!("{seq} {seq} {} f {pfn:x} {} - -\n", i % 2, i % 2));
            seq += 1;
        }
        i += 1;
    }
    text.into_bytes()
}

/// 64 pages that compress but are not same-filled.
fn training_data() -> Vec<u8> {
    let mut data = Vec::new();
    let mut i = 0u64;
    while data.len() < 64 * 4096 {
        data.extend_from_slice(format!("line {i}: key=value{} flag={}\n", i * 7 % 13, i % 3 == 0).as_bytes());
        i += 1;
    }
    data.truncate(64 * 4096);
    data
}

/// Whether a row's path is read or written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Input,
    Output,
}

/// One option: how to run it with its path, what a regular file of its
/// form holds, and what each form gives.
struct Row {
    name: &'static str,
    role: Role,
    /// The files the form is made at, from the base name (an output
    /// prefix names two).
    suffixes: &'static [&'static str],
    /// The command, given the argument, the fixed inputs' directory.
    args: fn(&OsString, &Path) -> Vec<OsString>,
    expect: fn(Form) -> Expect,
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

fn input_expect(form: Form) -> Expect {
    match form {
        Form::Regular | Form::Fifo | Form::LinkToRegular | Form::LinkToFifo | Form::Relative | Form::Odd => Expect::Ok,
        Form::New | Form::LinkToNew => Expect::Refused("No such file"),
        Form::Directory | Form::LinkToDirectory => Expect::Refused("a directory"),
        Form::Device | Form::LinkToDevice => Expect::Refused("a character device"),
    }
}

fn train_input_expect(form: Form) -> Expect {
    match form {
        Form::Fifo | Form::LinkToFifo => Expect::Refused("a FIFO"),
        // The directory form is empty: nothing to sample in it.
        Form::Directory | Form::LinkToDirectory => Expect::Refused("0 regular files"),
        other => input_expect(other),
    }
}

fn output_expect(form: Form) -> Expect {
    match form {
        Form::LinkToNew => Expect::Refused("does not exist"),
        Form::Directory | Form::LinkToDirectory => Expect::Refused("a directory"),
        _ => Expect::Ok,
    }
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "convert TRACE",
            role: Role::Input,
            suffixes: &[""],
            args: |arg, fixed| vec![os("convert"), arg.clone(), fixed.join("out.mmkt").into()],
            expect: input_expect,
        },
        Row {
            name: "replay TRACE",
            role: Role::Input,
            suffixes: &[""],
            args: |arg, _| vec![os("replay"), arg.clone(), os("--check"), os("--json")],
            expect: input_expect,
        },
        Row {
            name: "train-dict INPUT",
            role: Role::Input,
            suffixes: &[""],
            args: |arg, fixed| {
                vec![os("zram"), os("train-dict"), os("--out"), fixed.join("d.dict").into(), arg.clone()]
            },
            expect: train_input_expect,
        },
        Row {
            name: "convert TRACE OUT",
            role: Role::Output,
            suffixes: &[""],
            args: |arg, fixed| vec![os("convert"), fixed.join("trace").into(), arg.clone()],
            expect: output_expect,
        },
        Row {
            name: "replay --plot PREFIX",
            role: Role::Output,
            suffixes: &["-free-by-order.png", "-pageblocks.png"],
            args: |arg, fixed| vec![os("replay"), fixed.join("trace").into(), os("--plot"), arg.clone()],
            expect: output_expect,
        },
        Row {
            name: "train-dict --out PATH",
            role: Role::Output,
            suffixes: &[""],
            args: |arg, fixed| vec![os("zram"), os("train-dict"), os("--out"), arg.clone(), fixed.join("data").into()],
            expect: output_expect,
        },
    ]
}

/// One cell: makes the form, runs the option, checks the outcome; returns
/// the line for the printed table.
fn cell(row: &Row, form: Form, fixed: &Path) -> String {
    let scene = tempfile::tempdir().unwrap();
    let content: Vec<u8> = match (row.role, row.name) {
        (Role::Output, _) => b"old contents".to_vec(),
        (Role::Input, "train-dict INPUT") => training_data(),
        (Role::Input, _) => trace(),
    };
    let fill = |p: &Path| std::fs::write(p, &content).unwrap();
    let plain = Form::Regular;
    let base = "target";
    let made: Vec<PathBuf> =
        row.suffixes.iter().map(|s| make(scene.path(), form, &format!("{base}{s}"), plain, &fill)).collect();
    // The argument names the base; a prefix's files are its suffixed names.
    let base_path = {
        let first = &made[0];
        let name = first.file_name().unwrap().as_encoded_bytes();
        let cut = name.len() - row.suffixes[0].len();
        first.with_file_name(os_from_bytes(&name[..cut]))
    };
    let (arg, cwd) = arg_and_cwd(scene.path(), form, &base_path);
    let fifos: Vec<PathBuf> =
        made.iter().filter(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_fifo())).cloned().collect();
    let peers: Vec<FifoPeer> = fifos
        .iter()
        .map(|f| if row.role == Role::Input { FifoPeer::feed(f, content.clone()) } else { FifoPeer::drain(f) })
        .collect();
    let before = snapshot(scene.path());
    let out = forms::run_with_deadline(
        Command::new(env!("CARGO_BIN_EXE_mmkit")).current_dir(&cwd).args((row.args)(&arg, fixed)),
        Duration::from_secs(120),
    );
    let through: Vec<Vec<u8>> = peers.into_iter().map(FifoPeer::finish).collect();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let what = format!("{} x {}", row.name, form.name());
    match (row.expect)(form) {
        Expect::Refused(text) => {
            assert!(!out.status.success(), "{what}: succeeded; stdout {stdout}");
            assert!(stderr.contains(text), "{what}: the message does not say {text:?}: {stderr}");
            assert_eq!(snapshot(scene.path()), before, "{what}: refused, yet the scene changed");
        }
        Expect::Ok => {
            assert!(out.status.success(), "{what}: failed: {stderr}");
            match row.role {
                Role::Input => check_input(row, &stdout, &what),
                Role::Output => check_output(&made, form, &through, &what),
            }
            let after = snapshot(scene.path());
            let new_names = row.suffixes.len() * usize::from(form == Form::New);
            assert_eq!(after.len(), before.len() + new_names, "{what}: files appeared or went: {after:?}");
        }
    }
    let first = stderr.lines().find(|l| !l.is_empty()).unwrap_or("ok");
    format!("| {} | {} | {} |", row.name, form.name(), first.replace('|', "/"))
}

/// An OsString from raw bytes.
fn os_from_bytes(bytes: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStringExt;
    OsString::from_vec(bytes.to_vec())
}

/// An input read whole: the replay replayed every event, the conversion
/// counted them, the dictionary was trained.
fn check_input(row: &Row, stdout: &str, what: &str) {
    match row.name {
        "replay TRACE" => {
            let json: serde_json::Value = serde_json::from_str(stdout).unwrap();
            assert_eq!(json["counts"]["events"], EVENTS, "{what}: {stdout}");
        }
        "convert TRACE" => assert!(stdout.contains(&format!(": {EVENTS} events")), "{what}: {stdout}"),
        _ => assert!(stdout.contains("dictionary of"), "{what}: {stdout}"),
    }
}

/// An output written as its form means: a regular file replaced whole (a
/// link's file through the link, the link kept), a device or a FIFO
/// written through and still what it was.
fn check_output(made: &[PathBuf], form: Form, through: &[Vec<u8>], what: &str) {
    for path in made {
        let lmeta = path.symlink_metadata().unwrap();
        assert_eq!(lmeta.file_type().is_symlink(), form.linked().is_some(), "{what}: {}", path.display());
        let meta = std::fs::metadata(path).unwrap();
        match form.linked().unwrap_or(form) {
            Form::Device => assert!(meta.file_type().is_char_device(), "{what}: no longer a device"),
            Form::Fifo => assert!(meta.file_type().is_fifo(), "{what}: no longer a FIFO"),
            _ => {
                assert!(meta.is_file(), "{what}");
                let bytes = std::fs::read(path).unwrap();
                assert!(!bytes.is_empty() && bytes != b"old contents", "{what}: not written");
            }
        }
    }
    if matches!(form, Form::Fifo | Form::LinkToFifo) {
        assert!(through.iter().all(|b| !b.is_empty()), "{what}: nothing came through the FIFO");
    }
}

#[test]
fn every_path_option_against_every_path_form() {
    let fixed = tempfile::tempdir().unwrap();
    std::fs::write(fixed.path().join("trace"), trace()).unwrap();
    std::fs::write(fixed.path().join("data"), training_data()).unwrap();
    if !forms::is_root() {
        eprintln!("skipped: the device-node forms (mknod needs root); the other forms run");
    }
    let mut table = vec!["| option | path form | outcome (first line of stderr) |".to_owned(), "|---|---|---|".into()];
    for row in rows() {
        for form in ALL {
            if form.needs_root() && !forms::is_root() {
                continue;
            }
            table.push(cell(&row, form, fixed.path()));
        }
    }
    println!("{}", table.join("\n"));
}

/// `/dev/full`'s numbers in a private node: the write's error is reported
/// (exit non-zero) and the node stays a device.
#[test]
fn an_output_device_that_fails_writes_is_an_error_and_stays_a_device() {
    if !forms::is_root() {
        eprintln!("skipped: mknod needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("trace"), trace()).unwrap();
    let full = d.path().join("full");
    forms::mknod_char(&full, 7);
    let out = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .current_dir(d.path())
        .args(["convert", "trace", "full"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("No space left"), "{out:?}");
    assert!(full.symlink_metadata().unwrap().file_type().is_char_device());
}

/// An output that is standard output itself (here `/proc/self/fd/1`, on a
/// pipe): the data goes through the pipe whole, and the command's own
/// report goes to stderr instead of into the data.
#[test]
fn an_output_that_is_stdout_gets_the_data_and_the_report_goes_to_stderr() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("trace"), trace()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .current_dir(d.path())
        .args(["convert", "trace", "/proc/self/fd/1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.starts_with(&mmkit_trace::binary::BINARY_MAGIC), "the binary trace on stdout");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{EVENTS} events")), "the report on stderr");
    // The copy on the pipe replays like the file.
    std::fs::write(d.path().join("copy.mmkt"), &out.stdout).unwrap();
    let replay = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .current_dir(d.path())
        .args(["replay", "copy.mmkt", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(json["counts"]["events"], EVENTS);
}
