//! What `serve` prints and where its files go, as a user meets them: every
//! printed URI connects with `nbdinfo` as printed (a TCP port 0 resolved
//! to the port nbdkit listens on, a socket path made absolute and
//! percent-encoded, a private directory under a `TMPDIR` with blanks); a
//! wildcard address is warned about; of two servers started at once on one
//! `--unix` path the loser removes nothing; a relative path sent with
//! `ctl` names the file in the caller's directory; the size options share
//! one grammar; a refused write leaves `mem_used_total` within the limit.

use crate::common::{mmkit, plugin, require, serve_in, Server};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `mmkit zram serve --size 4M ARGS` in `cwd` (with `env`), its URI once
/// printed.
fn serve(args: &[OsString], cwd: &Path, env: &[(&str, &Path)]) -> (Child, Option<String>) {
    let mut all = vec![OsString::from("--size"), OsString::from("4M")];
    all.extend_from_slice(args);
    serve_in(&all, cwd, env)
}

fn stop(child: Child) -> String {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "serve stopped by SIGTERM exits 0: {:?}", out.status);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn nbdinfo_size(uri: &str) -> String {
    let out = Command::new("nbdinfo").args(["--size", uri]).output().unwrap();
    assert!(out.status.success(), "nbdinfo {uri}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

#[test]
fn every_printed_uri_connects_with_nbdinfo_as_printed() {
    if !require(&["nbdkit", "nbdinfo"]) {
        return;
    }
    plugin();
    let scene = tempfile::tempdir().unwrap();
    // A TCP port of the kernel's choice: the URI names the real one.
    let (child, uri) = serve(&[os("--listen"), os("127.0.0.1:0")], scene.path(), &[]);
    let uri = uri.expect("a URI");
    assert!(uri.starts_with("nbd://127.0.0.1:") && !uri.ends_with(":0"), "{uri}");
    assert_eq!(nbdinfo_size(&uri), "4194304");
    stop(child);
    // IPv6 loopback, where the machine has it.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let (child, uri) = serve(&[os("--listen"), os("[::1]:0")], scene.path(), &[]);
        let uri = uri.expect("a URI");
        assert!(uri.starts_with("nbd://[::1]:") && !uri.ends_with(":0"), "{uri}");
        assert_eq!(nbdinfo_size(&uri), "4194304");
        stop(child);
    }
    // A socket path with every character the URI must encode, given
    // relative from another directory.
    let odd = OsString::from_vec(b"a b&c#d%e?f+g\xff.sock".to_vec());
    let elsewhere = scene.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let mut relative = OsString::from("../");
    relative.push(&odd);
    let (child, uri) = serve(&[os("--unix"), relative], &elsewhere, &[]);
    let uri = uri.expect("a URI");
    assert!(uri.starts_with("nbd+unix:///?socket=/"), "absolute: {uri}");
    assert!(uri.contains("a%20b%26c%23d%25e%3Ff%2Bg%FF.sock"), "percent-encoded: {uri}");
    assert_eq!(nbdinfo_size(&uri), "4194304");
    stop(child);
    assert!(std::fs::read_dir(scene.path()).unwrap().count() == 1, "the socket is removed at the stop");
    // The private directory under a TMPDIR with blanks and `%`.
    let tmp = scene.path().join("t dir %20");
    std::fs::create_dir(&tmp).unwrap();
    let (child, uri) = serve(&[], scene.path(), &[("TMPDIR", &tmp)]);
    let uri = uri.expect("a URI");
    assert!(uri.contains("t%20dir%20%2520"), "{uri}");
    assert_eq!(nbdinfo_size(&uri), "4194304");
    let stderr = stop(child);
    assert!(stderr.contains("'"), "the ctl command it suggests quotes the path: {stderr}");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "the private directory is gone");
}

#[test]
fn a_wildcard_listen_address_is_warned_about() {
    plugin();
    let scene = tempfile::tempdir().unwrap();
    // Stopped before anything listens: a directory given as the plugin.
    for addr in ["0.0.0.0:10809", "[::]:10809"] {
        let out = Command::new(mmkit())
            .args(["zram", "serve", "--size", "4M", "--listen", addr, "--plugin"])
            .arg(scene.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("warning") && stderr.contains("every network address"), "{addr}: {stderr}");
        assert_eq!(out.status.code(), Some(2), "{stderr}");
    }
    let out = Command::new(mmkit())
        .args(["zram", "serve", "--size", "4M", "--listen", "127.0.0.1:10809", "--plugin"])
        .arg(scene.path())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"), "loopback is not warned about");
}

#[test]
fn of_two_servers_racing_for_one_socket_the_loser_removes_nothing() {
    if !require(&["nbdkit", "nbdinfo"]) {
        return;
    }
    plugin();
    let scene = tempfile::tempdir().unwrap();
    let sock = scene.path().join("n.sock");
    for round in 0..3 {
        let start = |ctl: &str| {
            Command::new(mmkit())
                .args(["zram", "serve", "--size", "4M", "--unix"])
                .arg(&sock)
                .arg("--control")
                .arg(scene.path().join(ctl))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (mut a, mut b) = (start("a.ctl"), start("b.ctl"));
        // One prints its URI; the other exits.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let (winner, loser) = loop {
            if a.try_wait().unwrap().is_some() {
                break (b, a);
            }
            if b.try_wait().unwrap().is_some() {
                break (a, b);
            }
            assert!(std::time::Instant::now() < deadline, "round {round}: both still run");
            std::thread::sleep(Duration::from_millis(20));
        };
        let lost = loser.wait_with_output().unwrap();
        assert!(!lost.status.success(), "round {round}: the loser failed");
        assert!(sock.symlink_metadata().unwrap().file_type().is_socket(), "round {round}: the loser removed it");
        let uri = format!("nbd+unix:///?socket={}", sock.display());
        assert_eq!(nbdinfo_size(&uri), "4194304", "round {round}: the winner still serves");
        stop(winner);
        assert_eq!(std::fs::read_dir(scene.path()).unwrap().count(), 0, "round {round}: all removed at the stop");
    }
}

#[test]
fn a_relative_path_sent_with_ctl_names_the_callers_file_not_the_servers() {
    if !require(&["nbdkit"]) {
        return;
    }
    let server_dir = tempfile::tempdir().unwrap();
    let caller_dir = tempfile::tempdir().unwrap();
    // The same name in both: the server's holds data that must stay.
    std::fs::write(server_dir.path().join("victim.img"), vec![0x5a; 1 << 20]).unwrap();
    std::fs::write(caller_dir.path().join("victim.img"), vec![0; 1 << 20]).unwrap();
    let control = server_dir.path().join("ctl.sock");
    let (child, uri) = serve(&[os("--control"), control.clone().into()], server_dir.path(), &[]);
    uri.expect("a URI");
    let ctl = |words: &[&str]| {
        let out = Command::new(mmkit())
            .current_dir(caller_dir.path())
            .args(["zram", "ctl"])
            .arg(&control)
            .args(words)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    assert!(ctl(&["reset"]).0);
    assert!(ctl(&["backing_dev", "victim.img"]).0);
    assert_eq!(ctl(&["backing_dev"]).1.trim(), caller_dir.path().join("victim.img").to_str().unwrap());
    // Relative on the wire is refused by the server itself.
    let mut raw = std::os::unix::net::UnixStream::connect(&control).unwrap();
    std::io::Write::write_all(&mut raw, b"backing_dev victim.img\n").unwrap();
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut raw, &mut reply).unwrap();
    assert!(reply.contains("relative path"), "{reply}");
    stop(child);
    assert_eq!(std::fs::read(server_dir.path().join("victim.img")).unwrap(), vec![0x5a; 1 << 20], "the server's file");
}

#[test]
fn one_size_grammar_for_every_option() {
    for args in [
        ["info", "--memory", "10 G"].as_slice(),
        &["zram", "serve", "--size", "10 G"],
        &["zram", "serve", "--mem-limit", "10 G"],
        &["zram", "train-dict", "--out", "x", "--size", "10 K", "y"],
        &["replay", "t", "--memory", "10 G"],
    ] {
        // A deadline: a size taken by mistake would start a server.
        let out = crate::forms::run_with_deadline(Command::new(mmkit()).args(args), Duration::from_secs(60));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("unknown unit"), "{args:?}: {stderr}");
    }
    let out = Command::new(mmkit()).args(["zram", "ctl", "x", "--timeout", "0", "mm_stat"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("more than 0 seconds"));
    let out = Command::new(mmkit()).args(["zram", "train-dict", "--out", "x", "--samples", "0", "y"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("8 pages"), "{out:?}");
    let out = Command::new(mmkit()).args(["info", "--memory", "1E"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("more than half") && stderr.contains("up to about"), "{stderr}");
}

#[test]
fn a_memory_limit_of_64k_is_never_passed() {
    if !require(&["nbdkit", "qemu-io"]) {
        return;
    }
    let server = Server::start("64M", &["--mem-limit", "64K"]);
    let out = Command::new("qemu-io").args(["-f", "raw", server.uri(), "-c", "write -P 0x61 0 4k"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("No space left"), "{said}");
    let mm = server.mm_stat();
    assert!(mm[2] <= 65536, "mem_used_total {} past the limit", mm[2]);
    assert_eq!(mm[0], 0, "nothing stored");
}
