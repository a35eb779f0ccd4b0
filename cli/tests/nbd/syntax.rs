//! The kernel's attribute syntax through `ctl` and `serve`, beside mmkit's
//! own: `recomp_algorithm "algo=zstd priority=1"`, `algorithm_params`
//! by `algo=` or `priority=`, `recompress "type=… threshold=… algo=…
//! priority=…"`, `writeback type=MODE` and several page indexes. A
//! malformed value is refused with the attribute's name and changes
//! nothing. A reset device is a 0-byte export to its clients.

use crate::common::{check, random_bytes, require, Server};
use std::process::Command;

/// Stores that must be refused, each leaving `show` as it was.
fn refused(server: &Server, name: &str, values: &[&str], show: &[&str]) {
    let before: Vec<String> = show.iter().map(|s| server.ctl(&[s]).unwrap()).collect();
    for value in values {
        let err = server.ctl(&[name, value]).unwrap_err();
        assert!(err.contains(name) || err.contains("invalid"), "{name} {value:?}: {err}");
        let after: Vec<String> = show.iter().map(|s| server.ctl(&[s]).unwrap()).collect();
        assert_eq!(after, before, "{name} {value:?} changed something");
    }
}

#[test]
fn the_kernels_forms_are_taken_and_malformed_ones_change_nothing() {
    if !require(&["nbdkit", "qemu-io", "nbdinfo"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("wb.img");
    std::fs::File::create(&backing).unwrap().set_len(4 << 20).unwrap();
    let backing = backing.display().to_string();
    let server = Server::start("8M", &["--recomp", "algo=zstd priority=1", "--backing-dev", &backing]);
    assert_eq!(server.ctl(&["recomp_algorithm"]).unwrap(), "#1: lz4 lz4_flex lz4hc [zstd]\n");
    let random = dir.path().join("random.bin");
    std::fs::write(&random, random_bytes(3, 256 << 10)).unwrap();
    check(Command::new("qemu-io").args([
        "-f",
        "raw",
        server.uri(),
        "-c",
        &format!("write -s {} 0 256k", random.display()),
        "-c",
        "write -P 0x5a 1M 512k",
    ]));
    for text in ["1234567890abcdef", "mmkit zram "] {
        let page: Vec<u8> = text.bytes().cycle().take(4096).collect();
        let file = dir.path().join("page.bin");
        std::fs::write(&file, &page).unwrap();
        check(Command::new("qemu-io").args([
            "-f",
            "raw",
            server.uri(),
            "-c",
            &format!("write -s {} 2M 4k", file.display()),
        ]));
    }
    server.ctl(&["idle", "all"]).unwrap();

    // recompress, the kernel's whole form; then malformed ones.
    refused(
        &server,
        "recompress",
        &["type=idle threshold=99999", "type=sometimes", "algo=zstd", "type=idle algo=lzma", "type=idle priority=2"],
        &["mm_stat", "block_state"],
    );
    let n: u64 =
        server.ctl(&["recompress", "type=idle threshold=3000 algo=zstd priority=1"]).unwrap().trim().parse().unwrap();
    assert!(n <= 1, "random pages do not shrink, the one text page may: {n}");

    // writeback: type=MODE, and several page indexes at once.
    refused(
        &server,
        "writeback",
        &[
            "type=huge page_index=3",
            "type=idle type=huge",
            "page_indexes=5-2",
            "page_index=99999",
            "type=",
            "sometimes",
        ],
        &["bd_stat", "mm_stat"],
    );
    let huge: u64 = server.ctl(&["writeback", "type=huge"]).unwrap().trim().parse().unwrap();
    assert_eq!(huge, 64, "the random 256 KiB are stored raw");
    let pages: u64 = server
        .ctl(&["writeback", "page_indexes=256-259 page_index=260 page_index=512"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let bd: Vec<u64> = server.ctl(&["bd_stat"]).unwrap().split_whitespace().map(|c| c.parse().unwrap()).collect();
    assert_eq!(bd[0], huge + pages, "bd_count: {bd:?}");
    assert!(pages <= 6, "{pages}");
    check(Command::new("qemu-io").args([
        "-f",
        "raw",
        server.uri(),
        "-c",
        "read -v 0 16",
        "-c",
        "read -P 0x5a 1M 512k",
    ]));

    // Reset: a 0-byte export until disksize; the configuration in the
    // kernel's forms.
    server.ctl(&["reset"]).unwrap();
    let size = check(Command::new("nbdinfo").args(["--size", server.uri()]));
    assert_eq!(size.trim(), "0", "clients of an uninitialised device see an empty export");
    server.ctl(&["recomp_algorithm", "algo=zstd priority=1"]).unwrap();
    server.ctl(&["recomp_algorithm", "algo=lz4hc priority=2"]).unwrap();
    server.ctl(&["algorithm_params", "algo=zstd level=8"]).unwrap();
    server.ctl(&["algorithm_params", "priority=2 level=5"]).unwrap();
    refused(
        &server,
        "recomp_algorithm",
        &["algo=lzma priority=1", "priority=1", "algo=zstd priority=9", "algo=zstd priority=1 colour=red"],
        &["recomp_algorithm"],
    );
    refused(
        &server,
        "algorithm_params",
        &["algo=zstd level=99", "algo=deflate level=1", "priority=3 level=1", "algo=zstd dict=no/such/dict", "level"],
        &["recomp_algorithm", "comp_algorithm"],
    );
    server.ctl(&["disksize", "4M"]).unwrap();
    assert_eq!(
        server.ctl(&["recomp_algorithm"]).unwrap(),
        "#1: lz4 lz4_flex lz4hc [zstd:8]\n#2: lz4 lz4_flex [lz4hc:5] zstd\n"
    );
    let size = check(Command::new("nbdinfo").args(["--size", server.uri()]));
    assert_eq!(size.trim(), "4194304");
}
