//! qemu's clients: `qemu-io` pattern writes and reads at the start, the
//! last 64 KiB and unaligned offsets, `write -z` and `discard`; `qemu-img
//! convert` of a real file into the export and back, and `qemu-img map`.

use crate::common::{check, real_file, require, Server};
use std::process::Command;

const SIZE: u64 = 64 << 20;

fn qemu_io(server: &Server, commands: &[&str]) -> String {
    let mut command = Command::new("qemu-io");
    command.args(["-f", "raw", server.uri()]);
    for c in commands {
        command.args(["-c", c]);
    }
    let out = check(&mut command);
    assert!(!out.contains("Pattern verification failed"), "{commands:?}:\n{out}");
    assert!(!out.contains("failed"), "{commands:?}:\n{out}");
    out
}

#[test]
fn qemu_io_patterns_at_the_start_the_end_and_unaligned_offsets_then_zero_and_discard() {
    if !require(&["nbdkit", "qemu-io"]) {
        return;
    }
    let server = Server::start("64M", &[]);
    let last = (SIZE - 65536).to_string();
    qemu_io(
        &server,
        &[
            "write -P 0x11 0 64k",
            &format!("write -P 0x22 {last} 64k"),
            "write -P 0x33 12345 10000",
            "write -P 0x44 1048573 7",
            "flush",
        ],
    );
    // A new connection sees everything the first one wrote.
    qemu_io(
        &server,
        &[
            "read -P 0x11 0 12345",
            "read -P 0x33 12345 10000",
            "read -P 0x11 22345 43191",
            &format!("read -P 0x22 {last} 64k"),
            "read -P 0x44 1048573 7",
            "read -P 0 1048580 4092",
            "read -P 0 65536 983037",
        ],
    );
    qemu_io(&server, &["write -z 0 64k", &format!("discard {last} 64k"), "write -z 1048572 9"]);
    qemu_io(&server, &["read -P 0 0 64k", &format!("read -P 0 {last} 64k"), "read -P 0 1048572 9"]);
    // `write -z` asks for no holes: the zeroed pages stay, as zero pages.
    let mm = server.mm_stat();
    assert_eq!(mm[1], 0, "no compressed data left: {mm:?}");
    assert_eq!(mm[0], mm[5] * 4096, "every page left is a same-filled one: {mm:?}");
}

#[test]
fn qemu_img_convert_round_trip_is_byte_identical_and_map_shows_the_holes() {
    if !require(&["nbdkit", "qemu-img"]) {
        return;
    }
    let server = Server::start("16M", &[]);
    let source = real_file(server.dir(), 16 << 20);
    check(Command::new("qemu-img").args(["convert", "-n", "-f", "raw", "-O", "raw"]).arg(&source).arg(server.uri()));
    let back = server.dir().join("back.img");
    check(Command::new("qemu-img").args(["convert", "-f", "raw", "-O", "raw", server.uri()]).arg(&back));
    assert!(std::fs::read(&source).unwrap() == std::fs::read(&back).unwrap(), "round trip differs");
    check(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw"]).arg(&source).arg(server.uri()));
    // qemu-img skips zero runs when converting, so the zero eighth of the
    // file was never written: block status must say so.
    let map = check(Command::new("qemu-img").args(["map", "--output=json", "-f", "raw", server.uri()]));
    assert!(map.contains("\"zero\": true"), "{map}");
    assert!(map.contains("\"data\": true"), "{map}");
}
