//! The control protocol as scripts use it: 50 `mmkit zram ctl` processes
//! at once while fio writes and verifies through four connections — each
//! request runs (exit 0) or ends busy after its retries (exit 3, saying
//! so), none ends in a socket error, and fio's data verifies; and a peer
//! that accepts and never answers holds `ctl` no longer than its 10 s
//! deadline.

use crate::common::{mmkit, require, Server};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The plugin's `control::MAX_PEERS`: requests answered at once.
const MAX_PEERS: usize = 16;
/// The plugin's `control::PEER_TIMEOUT`: how long a peer may take to send
/// its request before the server lets it go.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);
/// The plugin's `control::BUSY_READ_TIMEOUT`: how long a peer beyond the
/// limit may take to send its line before it is told busy.
const BUSY_READ_TIMEOUT: Duration = Duration::from_millis(250);

#[test]
fn fifty_ctl_clients_during_a_verified_fio_run_each_run_or_say_busy() {
    if !require(&["nbdkit", "fio"]) {
        return;
    }
    let server = Server::start("64M", &[]);
    let mut fio = server
        .fio_verify("16m", 8)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fio starts");
    // fio is writing once the device holds something.
    let started = Instant::now();
    while server.mm_stat()[0] == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "fio wrote nothing in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every peer thread of the server held by a peer that sent half a line,
    // so that the clients meet a busy server for a while: the first 20 try
    // once (busy, exit 3), the other 30 retry until the slots free up. A
    // peer that came while the thread of the last `mm_stat` above was still
    // finishing is told busy instead of holding a slot: it is replaced
    // until every slot is held by a silent peer.
    let mut held: Vec<UnixStream> = Vec::new();
    let mut held_at = Instant::now();
    while held.len() < MAX_PEERS {
        held_at = Instant::now();
        while held.len() < MAX_PEERS {
            let mut peer = UnixStream::connect(server.control()).expect("a slow peer connects");
            peer.write_all(b"mm_").unwrap();
            peer.set_nonblocking(true).unwrap();
            held.push(peer);
        }
        // Past the busy path's wait for a line, a peer told busy has its
        // answer (or its end) to read; a peer holding a slot has nothing.
        std::thread::sleep(BUSY_READ_TIMEOUT + Duration::from_millis(150));
        held.retain_mut(|peer| {
            let mut byte = [0u8; 1];
            matches!(peer.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        });
        assert!(held_at.elapsed() < Duration::from_secs(30), "the slots could not all be held");
    }
    let requests: [&[&str]; 5] = [&["mm_stat"], &["idle", "all"], &["compact"], &["io_stat"], &["mem_limit", "0"]];
    let ctl = |i: usize, retry: &str| {
        let request = requests[i % requests.len()];
        let child = Command::new(mmkit())
            .args(["zram", "ctl", "--busy-retry", retry])
            .arg(server.control())
            .args(request)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ctl starts");
        (i, request, child)
    };
    // The first 20 try once, and all of them end while every slot is
    // still held (however slowly a loaded machine starts them): busy.
    let once: Vec<_> = (0..20).map(|i| ctl(i, "0")).collect();
    // The other 30 retry, and find the slots free within their retries.
    let retrying: Vec<_> = (20..50).map(|i| ctl(i, "5")).collect();
    assert!(fio.try_wait().expect("fio").is_none(), "fio ended before the clients started");
    let (mut ran, mut busy) = (0, 0);
    let mut end = |(i, request, child): (usize, &[&str], std::process::Child)| {
        let out = child.wait_with_output().expect("ctl ends");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        match out.status.code() {
            Some(0) => ran += 1,
            Some(3) if stderr.contains("busy") && stderr.contains("not run") => busy += 1,
            other => panic!("client {i} {request:?}: exit {other:?}, neither ran nor busy: {stderr}"),
        }
        (out.status.code(), stderr)
    };
    for client in once {
        let i = client.0;
        let (code, stderr) = end(client);
        // The server lets a held peer go after PEER_TIMEOUT: a client seen
        // to end before then met every slot held. (On a machine loaded
        // enough to start it later, it may have found a free slot: either
        // answer is right then, and `end` checked it was one of the two.)
        if held_at.elapsed() < PEER_TIMEOUT - Duration::from_millis(500) {
            assert_eq!(code, Some(3), "client {i} tried once while every slot was held: {stderr}");
        }
    }
    drop(held);
    for client in retrying {
        end(client);
    }
    assert!(ran >= 25, "{ran} of the 30 retrying clients ran once the slots freed up");
    let fio = fio.wait_with_output().expect("fio ends");
    let stdout = String::from_utf8_lossy(&fio.stdout);
    assert!(fio.status.success(), "fio failed: {stdout}\n{}", String::from_utf8_lossy(&fio.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&stdout[stdout.find('{').expect("fio's JSON")..]).expect("fio's JSON parses");
    for job in json["jobs"].as_array().expect("jobs") {
        assert_eq!(job["error"], 0, "{job}");
        assert_eq!(job["read"]["io_bytes"], 8 * (16 << 20), "every block of every loop read back and verified: {job}");
    }
    eprintln!("50 ctl clients during fio: {ran} ran, {busy} busy");
    assert_eq!(ran + busy, 50);
}

#[test]
fn ctl_gives_up_on_a_silent_peer_at_its_deadline_and_says_it_did_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("silent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // Accepts, then says nothing and keeps the connection open.
    let holder = std::thread::spawn(move || {
        let held = listener.accept();
        std::thread::sleep(Duration::from_secs(20));
        drop(held);
    });
    let started = Instant::now();
    let out = Command::new(mmkit()).args(["zram", "ctl"]).arg(&path).arg("compact").output().expect("ctl runs");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no answer within 10 s") && stderr.contains("not run"), "{stderr}");
    assert!(took >= Duration::from_secs(9) && took < Duration::from_secs(15), "gave up after {took:?}");
    // A shorter deadline on request.
    let listener = UnixListener::bind(dir.path().join("silent2.sock")).unwrap();
    let _keep = std::thread::spawn(move || {
        let held = listener.accept();
        std::thread::sleep(Duration::from_secs(10));
        drop(held);
    });
    let started = Instant::now();
    let out = Command::new(mmkit())
        .args(["zram", "ctl", "--timeout", "0.5"])
        .arg(dir.path().join("silent2.sock"))
        .arg("mm_stat")
        .output()
        .expect("ctl runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(started.elapsed() < Duration::from_secs(3), "--timeout 0.5 took {:?}", started.elapsed());
    drop(holder);
}
