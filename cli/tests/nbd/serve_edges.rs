//! `serve`'s edges: nbdkit options that contradict its own are refused
//! before nbdkit starts; a stdout that cannot take the URI (closed, or
//! `/dev/full`) stops it with an error instead of a server nobody can find;
//! the URI says `nbds` when nbdkit is asked for TLS, and works as such; the
//! start-up line names the compression level.

use crate::common::{mmkit, plugin, require, run};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn nbdkit_options_serve_sets_itself_are_refused_before_anything_starts() {
    plugin();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.sock").display().to_string();
    for nbdkit_args in [
        vec!["-U", other.as_str()],
        vec![&format!("--unix={other}")],
        vec!["-p", "10811"],
        vec!["--run", "true"],
        vec!["-f"],
        vec!["-P", "x.pid"],
        vec!["--exit-with-parent"],
    ] {
        let out = run(Command::new(mmkit())
            .args(["zram", "serve", "--size", "4M", "--unix"])
            .arg(dir.path().join("n.sock"))
            .arg("--control")
            .arg(dir.path().join("c.sock"))
            .arg("--")
            .args(&nbdkit_args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{nbdkit_args:?}: {stderr}");
        assert!(stderr.contains("sets it itself"), "{nbdkit_args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "no URI printed");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{nbdkit_args:?} left {left:?}");
    }
}

#[test]
fn a_stdout_that_cannot_take_the_uri_stops_serve_with_an_error() {
    if !require(&["nbdkit"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("n.sock");
    // A private node with /dev/full's numbers (never the real /dev).
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: a private /dev/full node needs root (mknod)");
        return;
    }
    let full_node = dir.path().join("full");
    crate::forms::mknod_char(&full_node, 7);
    let full = std::fs::OpenOptions::new().write(true).open(&full_node).expect("the private full node");
    std::fs::remove_file(&full_node).unwrap();
    let out = Command::new(mmkit())
        .args(["zram", "serve", "--size", "4M", "--unix"])
        .arg(&sock)
        .arg("--control")
        .arg(dir.path().join("c.sock"))
        .stdin(Stdio::null())
        .stdout(full)
        .output()
        .expect("serve runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("printing the URI") && stderr.contains("stopped"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "the server left {left:?}");
    // A stdout whose reader is gone: the same.
    let mut child = Command::new(mmkit())
        .args(["zram", "serve", "--size", "4M", "--unix"])
        .arg(&sock)
        .arg("--control")
        .arg(dir.path().join("c.sock"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    drop(child.stdout.take());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve kept running with its stdout closed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("printing the URI"), "{stderr}");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

/// `serve ARGS…` until its URI, `client(URI)`, then SIGTERM. Returns the
/// URI, what `client` returned (none without a URI) and stderr.
fn serve_once<T>(dir: &std::path::Path, args: &[&str], client: impl FnOnce(&str) -> T) -> (String, Option<T>, String) {
    let mut child = Command::new(mmkit())
        .args(["zram", "serve", "--unix"])
        .arg(dir.join("n.sock"))
        .arg("--control")
        .arg(dir.join("c.sock"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let mut uri = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut uri).unwrap();
    let uri = uri.trim().to_owned();
    let answer = (!uri.is_empty()).then(|| client(&uri));
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = child.wait_with_output().unwrap();
    (uri, answer, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_uri_says_nbds_with_tls_and_the_start_up_line_names_the_level() {
    if !require(&["nbdkit", "nbdinfo"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (uri, _, stderr) = serve_once(dir.path(), &["--size", "4M", "--comp", "zstd:9"], |_| ());
    assert!(uri.starts_with("nbd+unix://"), "{uri}");
    assert!(stderr.contains("zstd level 9"), "{stderr}");
    let (_, _, stderr) = serve_once(dir.path(), &["--size", "4M", "--comp", "zstd"], |_| ());
    assert!(stderr.contains("zstd level 3"), "the default level is named too: {stderr}");

    let psk = dir.path().join("keys.psk");
    std::fs::write(&psk, "mmkit:6d6d6b69742d746573742d707368617265642d6b6579\n").unwrap();
    let psk_arg = format!("--tls-psk={}", psk.display());
    for tls in ["--tls=require", "--tls=on"] {
        let (uri, size, stderr) = serve_once(dir.path(), &["--size", "4M", "--", tls, &psk_arg], |uri| {
            // libnbd takes the PSK user from the URI's authority.
            let with_key =
                format!("{}&tls-psk-file={}", uri.replacen("nbds+unix://", "nbds+unix://mmkit@", 1), psk.display());
            run(Command::new("nbdinfo").args(["--size", &with_key]))
        });
        assert!(uri.starts_with("nbds+unix://"), "{tls}: {uri}; {stderr}");
        let size = size.expect("a URI");
        assert!(size.status.success(), "{tls}: {}", String::from_utf8_lossy(&size.stderr));
        assert_eq!(String::from_utf8_lossy(&size.stdout).trim(), "4194304", "{tls}: a TLS client reads the export");
    }
}
