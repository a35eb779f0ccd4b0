//! Faults: a client killed in the middle of a stream of writes (every
//! acknowledged write must then read back), `mem_limit` reached in the
//! middle of a copy (ENOSPC, earlier writes kept), and the server stopped
//! by SIGTERM or SIGINT (exit 0, no socket file left).

use crate::common::{check, python, random_bytes, require, run, Server};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Writes 16 KiB blocks 0, 1, 2, … with up to 16 in flight, printing each
/// block's index once the server acknowledged it.
const WRITER: &str = r#"
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
blocks = h.get_size() // 16384
def block(i):
    return (i.to_bytes(8, "little") * 2048)
next_block = 0
in_flight = 0
def done(i):
    def cb(err):
        global in_flight
        in_flight -= 1
        if err.value == 0:
            print(i, flush=True)
        return 1
    return cb
while next_block < blocks or in_flight:
    while in_flight < 16 and next_block < blocks:
        h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(block(next_block))), next_block * 16384, completion=done(next_block))
        next_block += 1
        in_flight += 1
    h.poll(-1)
"#;

/// Reads back the blocks listed in argv[2] (comma-separated); prints how
/// many matched.
const VERIFIER: &str = r#"
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
acked = [int(i) for i in sys.argv[2].split(",")]
bad = [i for i in acked if h.pread(16384, i * 16384) != i.to_bytes(8, "little") * 2048]
print(len(acked) - len(bad), "matched;", "bad:", bad[:10])
"#;

#[test]
fn a_client_killed_mid_stream_loses_no_acknowledged_write() {
    if !require(&["nbdkit", "nbdsh"]) {
        return;
    }
    let server = Server::start("256M", &[]);
    let mut writer = python(WRITER, &[server.uri()]).stdout(Stdio::piped()).spawn().expect("writer starts");
    let mut acked = Vec::new();
    let mut lines = BufReader::new(writer.stdout.take().expect("stdout")).lines();
    while acked.len() < 2000 {
        match lines.next() {
            Some(Ok(line)) => acked.push(line.trim().to_owned()),
            _ => break,
        }
    }
    writer.kill().expect("kill the writer");
    let _ = writer.wait();
    // Acknowledgements printed before the kill but not yet read.
    acked.extend(lines.map_while(Result::ok).map(|l| l.trim().to_owned()));
    assert!(acked.len() >= 2000, "the writer stopped early after {} blocks", acked.len());
    assert!(acked.len() < 16384, "the writer was not killed mid-stream");
    let out = check(&mut python(VERIFIER, &[server.uri(), &acked.join(",")]));
    assert_eq!(out.trim(), format!("{} matched; bad: []", acked.len()));
    let mm = server.mm_stat();
    assert!(mm[0] >= acked.len() as u64 * 16384, "{mm:?}");
}

/// Writes 64 KiB random chunks until the device refuses one; checks the
/// refusal is ENOSPC and that every chunk written before reads back.
const FILLER: &str = r#"
import errno, os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
chunks = []
try:
    for i in range(h.get_size() // 65536):
        data = os.urandom(65536)
        h.pwrite(data, i * 65536)
        chunks.append(data)
    print("no error")
except nbd.Error as e:
    assert e.errnum == errno.ENOSPC, e
for i, data in enumerate(chunks):
    assert h.pread(65536, i * 65536) == data, i
print(len(chunks))
"#;

#[test]
fn mem_limit_reached_mid_copy_is_enospc_and_keeps_what_was_written() {
    if !require(&["nbdkit", "nbdsh", "nbdcopy"]) {
        return;
    }
    let server = Server::start("64M", &["--mem-limit", "4M"]);
    let out = check(&mut python(FILLER, &[server.uri()]));
    let chunks: u64 = out.trim().parse().unwrap_or_else(|_| panic!("filler said {out:?}"));
    assert!((16..=64).contains(&chunks), "{chunks} chunks of 64 KiB under a 4 MiB limit");
    let mm = server.mm_stat();
    assert!(mm[2] <= (4 << 20) + 65536, "mem_used_total {} beyond the limit", mm[2]);
    let failed_writes: u64 = server.ctl(&["io_stat"]).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(failed_writes >= 1);
    // nbdcopy of incompressible data into the emptied device fails the same
    // way. A reset forgets the limit and the size, as the kernel's does.
    server.ctl(&["reset"]).expect("reset");
    assert_eq!(server.ctl(&["mem_limit"]).unwrap(), "0\n");
    server.ctl(&["mem_limit", "4M"]).expect("mem_limit while uninitialised");
    server.ctl(&["disksize", "64M"]).expect("initialised again");
    let source = server.dir().join("random.img");
    std::fs::write(&source, random_bytes(3, 16 << 20)).unwrap();
    let copy = run(Command::new("nbdcopy").arg(&source).arg(server.uri()));
    assert!(!copy.status.success(), "the copy went past mem_limit");
    let stderr = String::from_utf8_lossy(&copy.stderr);
    assert!(stderr.contains("No space left on device"), "{stderr}");
}

#[test]
fn sigterm_sigint_and_sighup_stop_the_server_with_exit_0_and_no_socket_files() {
    if !require(&["nbdkit", "nbdinfo"]) {
        return;
    }
    for signal in [rustix::process::Signal::TERM, rustix::process::Signal::INT, rustix::process::Signal::HUP] {
        let mut server = Server::start("16M", &[]);
        check(Command::new("nbdinfo").arg(server.uri()));
        assert!(server.dir().join("nbd.sock").exists() && server.control().exists());
        let status = server.signal(signal);
        assert_eq!(status.code(), Some(0), "{signal:?}: {status}");
        let left: Vec<_> = std::fs::read_dir(server.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{signal:?} left {left:?}");
        let again = run(Command::new("nbdinfo").arg(server.uri()));
        assert!(!again.status.success(), "nothing serves after the stop");
    }
}
