//! zram's lifecycle and the server's edges as a user meets them: `reset`
//! refused while a client is connected (the kernel's EBUSY), a reset device
//! set up again through `ctl`, one backing file per device, sizes and
//! limits checked before nbdkit starts, a control socket that serves peers
//! at once, SIGTERM with an idle client, and a dead server's socket.

use crate::common::{check, mmkit, plugin, python, require, run, Server};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A client that writes and flushes 8 KiB, asks for a reset while it is
/// connected (through `mmkit zram ctl`), then reads its data back.
const WRITE_RESET_READ: &str = r#"
import nbd, subprocess, sys
uri, mmkit, ctl = sys.argv[1:4]
h = nbd.NBD()
h.connect_uri(uri)
data = bytes(range(256)) * 32
h.pwrite(data, 0)
h.flush()
r = subprocess.run([mmkit, "zram", "ctl", ctl, "reset"], capture_output=True)
print("reset", r.returncode, r.stderr.decode().strip())
assert h.pread(8192, 0) == data, "data lost after reset"
h.shutdown()
"#;

#[test]
fn reset_is_refused_while_a_client_is_connected_and_a_reset_device_is_set_up_again() {
    if !require(&["nbdkit", "nbdsh", "qemu-io"]) {
        return;
    }
    let server = Server::start("16M", &[]);
    let ctl = server.control().display().to_string();
    let out = check(&mut python(WRITE_RESET_READ, &[server.uri(), &mmkit().display().to_string(), &ctl]));
    assert!(out.starts_with("reset 1 "), "reset taken with a client connected: {out}");
    assert!(out.to_lowercase().contains("busy"), "{out}");
    assert_eq!(server.mm_stat()[0], 8192, "the data is still there");
    // Nobody connected now: the reset goes through, to an uninitialised device.
    server.ctl(&["compact"]).unwrap();
    server.ctl(&["reset"]).unwrap();
    assert_eq!(server.ctl(&["initstate"]).unwrap(), "0\n");
    assert_eq!(server.ctl(&["disksize"]).unwrap(), "0\n");
    assert!(server.mm_stat().iter().all(|&v| v == 0), "every stat zeroed: {:?}", server.mm_stat());
    let io = run(Command::new("qemu-io").args(["-f", "raw", server.uri(), "-c", "read 0 4k"]));
    let said = format!("{}{}", String::from_utf8_lossy(&io.stdout), String::from_utf8_lossy(&io.stderr));
    assert!(!said.contains("read 4096/4096"), "I/O on an uninitialised device: {said}");
    // Configured while uninitialised, then initialised by disksize.
    server.ctl(&["comp_algorithm", "zstd"]).unwrap();
    server.ctl(&["disksize", "8M"]).unwrap();
    assert_eq!(server.ctl(&["initstate"]).unwrap(), "1\n");
    assert!(server.ctl(&["comp_algorithm"]).unwrap().contains("[zstd]"));
    check(Command::new("qemu-io").args([
        "-f",
        "raw",
        server.uri(),
        "-c",
        "write -P 0x33 8380416 8k",
        "-c",
        "read -P 0x33 8380416 8k",
    ]));
    // Configuration attributes of an initialised device are busy, not unknown.
    for request in [&["disksize", "4M"][..], &["comp_algorithm", "lz4"], &["backing_dev", "x"]] {
        let err = server.ctl(request).unwrap_err();
        assert!(err.contains("busy") && !err.contains("no attribute"), "{request:?}: {err}");
    }
}

#[test]
fn two_servers_cannot_share_one_backing_file_by_any_name() {
    if !require(&["nbdkit"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("bk.img");
    std::fs::write(&backing, vec![0u8; 1 << 20]).unwrap();
    let hard = dir.path().join("hard.img");
    std::fs::hard_link(&backing, &hard).unwrap();
    let soft = dir.path().join("soft.img");
    std::os::unix::fs::symlink(&backing, &soft).unwrap();
    let _first = Server::start("4M", &["--backing-dev", &backing.display().to_string()]);
    for other in [&backing, &hard, &soft] {
        let sock = dir.path().join("second.sock");
        let mut second = Command::new(mmkit())
            .args(["zram", "serve", "--size", "4M", "--backing-dev"])
            .arg(other)
            .arg("--unix")
            .arg(&sock)
            .arg("--control")
            .arg(dir.path().join("second.ctl"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A second device that starts serves until stopped: give it 30 s.
        let deadline = Instant::now() + Duration::from_secs(30);
        while second.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = second.kill();
        let out = second.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a second device on {}", other.display());
        assert!(stderr.contains("busy") && stderr.contains(&other.display().to_string()), "{stderr}");
    }
}

/// `mmkit zram serve ARGS` that must exit with `code` without starting.
fn serve_fails(args: &[&str], code: i32) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = run(Command::new(mmkit())
        .args(["zram", "serve"])
        .args(args)
        .arg("--control")
        .arg(dir.path().join("c.sock"))
        .env("MMKIT_NO_SUCH", "1"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("memory allocation"), "{stderr}");
    stderr
}

#[test]
fn serve_checks_sizes_limits_and_paths_before_nbdkit_starts() {
    plugin();
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find(|l| l.starts_with("MemTotal:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()))
        .unwrap_or(0)
        * 1024;
    if ram < 40 << 30 {
        let said = serve_fails(&["--size", "10T"], 2);
        assert!(said.contains("--size 10T") && said.contains("GiB"), "{said}");
    }
    let said = serve_fails(&["--size", "20T"], 2);
    assert!(said.contains("--size 20T"), "{said}");
    serve_fails(&["--mem-limit", "1"], 2);
    let dir = tempfile::tempdir().unwrap();
    let same = dir.path().join("same.sock").display().to_string();
    let out = run(Command::new(mmkit()).args(["zram", "serve", "--unix", &same, "--control", &same]));
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_rounded_size_is_reported_and_ctl_refuses_nonsense() {
    if !require(&["nbdkit"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("bk.img");
    std::fs::write(&backing, vec![0u8; 2 * 4096]).unwrap();
    let server = Server::start("17", &["--backing-dev", &backing.display().to_string(), "--recomp", "zstd"]);
    assert_eq!(server.ctl(&["disksize"]).unwrap(), "4096\n");
    let err = server.ctl(&["mem_limit", "18446744073709551615"]).unwrap_err();
    assert!(err.contains("mem_limit"), "{err}");
    assert!(server.ctl(&["recompress"]).unwrap_err().contains("type="));
    drop(server);
    // Three pages to write back into a file of two.
    let server = Server::start("16K", &["--backing-dev", &backing.display().to_string()]);
    let random: Vec<u8> = (0..3 * 4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let file = dir.path().join("r.bin");
    std::fs::write(&file, &random).unwrap();
    check(Command::new("qemu-io").args([
        "-f",
        "raw",
        server.uri(),
        "-c",
        &format!("write -s {} 0 12k", file.display()),
    ]));
    server.ctl(&["idle", "all"]).unwrap();
    let err = server.ctl(&["writeback", "idle"]).unwrap_err();
    assert!(err.contains("2 pages"), "how many were written: {err}");
}

#[test]
fn the_control_socket_serves_peers_at_once() {
    if !require(&["nbdkit"]) {
        return;
    }
    let server = Server::start("4M", &[]);
    // A slow peer: connected, one byte and no newline.
    let mut slow = UnixStream::connect(server.control()).unwrap();
    slow.write_all(b"m").unwrap();
    let started = Instant::now();
    server.ctl(&["mm_stat"]).unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "held up {:?} by a slow peer", started.elapsed());
}

#[test]
fn sigterm_with_an_idle_client_stops_at_once_and_a_dead_servers_socket_is_replaced() {
    if !require(&["nbdkit", "nbdsh"]) {
        return;
    }
    let mut server = Server::start("4M", &[]);
    let mut idle = python(
        "import nbd, sys, time\nh = nbd.NBD()\nh.connect_uri(sys.argv[1])\nprint('up', flush=True)\ntime.sleep(60)\n",
        &[server.uri()],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(idle.stdout.as_mut().unwrap()), &mut line).unwrap();
    let started = Instant::now();
    let status = server.signal(rustix::process::Signal::TERM);
    let took = started.elapsed();
    let _ = idle.kill();
    let _ = idle.wait();
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(2), "SIGTERM took {took:?} with an idle client");

    // SIGKILL leaves the sockets behind; a restart on them must work.
    let dir = tempfile::tempdir().unwrap();
    let (sock, ctl) = (dir.path().join("n.sock"), dir.path().join("c.sock"));
    let start = || {
        Command::new(mmkit())
            .args(["zram", "serve", "--size", "1M", "--unix"])
            .arg(&sock)
            .arg("--control")
            .arg(&ctl)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let wait_uri = |child: &mut std::process::Child| {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
        line
    };
    let mut first = start();
    assert!(wait_uri(&mut first).starts_with("nbd"));
    // A live server's sockets are refused.
    let second = start().wait_with_output().unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", String::from_utf8_lossy(&second.stderr));
    first.kill().unwrap();
    first.wait().unwrap();
    // nbdkit dies with its parent; give it a moment.
    std::thread::sleep(Duration::from_millis(500));
    let mut third = start();
    let uri = wait_uri(&mut third);
    let pid = rustix::process::Pid::from_raw(third.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = third.wait_with_output().unwrap();
    assert!(uri.starts_with("nbd"), "restart over a dead server's sockets: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_killed_serve_leaves_no_private_directory_behind() {
    if !require(&["nbdkit"]) {
        return;
    }
    plugin();
    let mut serve = Command::new(mmkit())
        .args(["zram", "serve", "--size", "1M"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(serve.stdout.as_mut().unwrap()), &mut line).unwrap();
    let socket = line.trim().strip_prefix("nbd+unix:///?socket=").expect("a private Unix socket").to_owned();
    let dir = std::path::Path::new(&socket).parent().unwrap().to_owned();
    assert!(dir.is_dir());
    serve.kill().unwrap();
    serve.wait().unwrap();
    // nbdkit exits with its parent and the plugin removes the directory.
    let deadline = Instant::now() + Duration::from_secs(10);
    while dir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!dir.exists(), "{} left behind", dir.display());
}
