//! A backing file that holds data is refused before anything is written,
//! by `serve --backing-dev` and by `ctl backing_dev`, unless the user says
//! to overwrite it (`--force-backing`, `backing_overwrite 1`); a file that
//! reads as zeroes (`truncate -s`) is taken as before.

use crate::common::{mmkit, require, run, Server};
use std::process::Command;

#[test]
fn a_backing_file_holding_data_is_refused_unless_overwrite_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.img");
    let mut contents = vec![0u8; 1 << 20];
    contents[700_000] = b'!';
    std::fs::write(&data, &contents).unwrap();
    let data_arg = data.display().to_string();
    // serve: refused before nbdkit starts (no nbdkit needed to see it).
    let out = run(Command::new(mmkit())
        .args(["zram", "serve", "--size", "4M", "--backing-dev", &data_arg, "--control"])
        .arg(dir.path().join("c.sock")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds data") && stderr.contains("700000") && stderr.contains("--force-backing"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&data).unwrap(), contents, "the file is untouched");
    assert!(!dir.path().join("c.sock").exists());
    if !require(&["nbdkit"]) {
        return;
    }
    // --force-backing: taken.
    let server = Server::start("4M", &["--backing-dev", &data_arg, "--force-backing"]);
    assert_eq!(server.ctl(&["backing_dev"]).unwrap(), format!("{data_arg}\n"));
    // ctl backing_dev after a reset: the same rule, the same way out.
    server.ctl(&["reset"]).unwrap();
    let err = server.ctl(&["backing_dev", &data_arg]).unwrap_err();
    assert!(err.contains("holds data") && err.contains("backing_overwrite=1"), "{err}");
    assert_eq!(server.ctl(&["backing_dev"]).unwrap(), "none\n", "nothing changed");
    server.ctl(&["backing_overwrite", "1"]).unwrap();
    server.ctl(&["backing_dev", &data_arg]).unwrap();
    server.ctl(&["disksize", "4M"]).unwrap();
    assert_eq!(server.ctl(&["backing_dev"]).unwrap(), format!("{data_arg}\n"));
    drop(server);
    // A file of zeroes, sparse or not, needs no flag.
    let sparse = dir.path().join("sparse.img");
    std::fs::File::create(&sparse).unwrap().set_len(8 << 20).unwrap();
    let _server = Server::start("4M", &["--backing-dev", &sparse.display().to_string()]);
}
