//! `mmkit zram serve` and `mmkit zram ctl` as a user runs them: the control
//! socket's mode and answers in the kernel's formats, recompression and
//! writeback through it, and the commands' errors (bad parameters, a
//! missing plugin or nbdkit).

use crate::common::{check, mmkit, plugin, random_bytes, require, run, Server};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn ctl_answers_like_sysfs_and_drives_recompression_writeback_and_reset() {
    if !require(&["nbdkit", "qemu-io"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("wb.img");
    std::fs::write(&backing, vec![0u8; 4 << 20]).unwrap();
    let backing_arg = backing.display().to_string();
    let server = Server::start("16M", &["--recomp", "zstd:9", "--backing-dev", &backing_arg, "--chain-size", "4"]);
    let mode = std::fs::metadata(server.control()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the control socket is the owner's only");
    let random = dir.path().join("random.bin");
    std::fs::write(&random, random_bytes(11, 1 << 20)).unwrap();
    check(Command::new("qemu-io").args([
        "-f",
        "raw",
        server.uri(),
        "-c",
        "write -P 0x61 0 1M",
        "-c",
        "write -P 0 1M 64k",
        "-c",
        &format!("write -s {} 2M 1M", random.display()),
    ]));
    let mm = server.mm_stat();
    assert_eq!(mm.len(), 9);
    assert_eq!(mm[0], (2 << 20) + 65536, "orig_data_size: {mm:?}");
    assert_eq!(mm[5], 256 + 16, "same_pages: {mm:?}");
    assert_eq!(mm[7], 256, "the random megabyte is stored raw (huge_pages): {mm:?}");
    assert_eq!(server.ctl(&["comp_algorithm"]).unwrap(), "[lz4] lz4_flex lz4hc zstd\n");
    assert_eq!(server.ctl(&["recomp_algorithm"]).unwrap(), "#1: lz4 lz4_flex lz4hc [zstd:9]\n");
    assert!(server.ctl(&["debug_stat"]).unwrap().starts_with("version:"));
    server.ctl(&["idle", "all"]).unwrap();
    let recompressed: u64 = server.ctl(&["recompress", "type=huge"]).unwrap().trim().parse().unwrap();
    assert_eq!(recompressed, 0, "random pages do not shrink");
    let written: u64 = server.ctl(&["writeback", "huge"]).unwrap().trim().parse().unwrap();
    assert_eq!(written, 256);
    let bd: Vec<u64> = server.ctl(&["bd_stat"]).unwrap().split_whitespace().map(|c| c.parse().unwrap()).collect();
    assert_eq!(bd, vec![256, 0, 256]);
    // Written-back pages still read back right, from the file.
    check(Command::new("qemu-io").args([
        "-f",
        "raw",
        server.uri(),
        "-c",
        "read -P 0x61 0 1M",
        "-c",
        "read -P 0 1M 64k",
    ]));
    let back = dir.path().join("back.bin");
    check(Command::new("qemu-img").args(["convert", "-f", "raw", "-O", "raw", server.uri()]).arg(&back));
    let image = std::fs::read(&back).unwrap();
    assert!(image[2 << 20..3 << 20] == random_bytes(11, 1 << 20)[..], "written-back data reads back");
    server.ctl(&["compact"]).unwrap().trim().parse::<u64>().unwrap();
    server.ctl(&["mem_limit", "8M"]).unwrap();
    assert_eq!(server.ctl(&["mem_limit"]).unwrap(), format!("{}\n", 8 << 20));
    server.ctl(&["reset"]).unwrap();
    assert_eq!(server.mm_stat()[0], 0);
    assert_eq!(server.ctl(&["initstate"]).unwrap(), "0\n");
    server.ctl(&["disksize", "16M"]).unwrap();
    check(Command::new("qemu-io").args(["-f", "raw", server.uri(), "-c", "read -P 0 0 4M"]));
    // Refusals: exit 1 with the device's message, nothing changed.
    assert!(server.ctl(&["colour"]).unwrap_err().contains("no attribute"));
    assert!(server.ctl(&["idle", "sometimes"]).unwrap_err().contains("not a number"));
    let out = run(Command::new(mmkit()).args(["zram", "ctl"]).arg(dir.path().join("nobody.sock")).arg("mm_stat"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no control socket there"));
}

#[test]
fn serve_refuses_bad_parameters_and_says_what_to_install_or_build() {
    let serve = |args: &[&str], path: Option<&str>| {
        let mut command = Command::new(mmkit());
        command.args(["zram", "serve"]).args(args);
        if let Some(path) = path {
            command.env("PATH", path);
        }
        run(&mut command)
    };
    for bad in [
        &["--size", "lots"][..],
        &["--comp", "lzma"],
        &["--chain-size", "3"],
        &["--unix", "a", "--listen", "127.0.0.1:1"],
    ] {
        let out = serve(bad, None);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = serve(&["--plugin", "no-such-plugin.so"], None);
    assert_eq!(out.status.code(), Some(2));
    // The plugin is there but nbdkit is not on PATH.
    plugin();
    let empty = tempfile::tempdir().unwrap();
    let out = serve(&["--size", "1M"], Some(&empty.path().display().to_string()));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("apt-get install nbdkit"), "{stderr}");
    assert!(std::fs::read_dir(std::env::temp_dir()).is_ok());
}
