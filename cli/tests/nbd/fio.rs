//! fio's nbd engine: 4 KiB random writes at queue depth 16 from four jobs
//! (four NBD connections to the one device), each block checked with
//! crc32c when read back.

use crate::common::{check, require, Server};

#[test]
fn fio_randwrite_qd16_over_four_connections_verifies_with_crc32c() {
    if !require(&["nbdkit", "fio"]) {
        return;
    }
    let server = Server::start("64M", &[]);
    let out = check(&mut server.fio_verify("8m", 1));
    let json: serde_json::Value =
        serde_json::from_str(&out[out.find('{').expect("fio's JSON")..]).expect("fio's JSON parses");
    let jobs = json["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 4);
    for job in jobs {
        assert_eq!(job["error"], 0, "{job}");
        assert_eq!(job["write"]["io_bytes"], 8 << 20, "{job}");
        assert_eq!(job["read"]["io_bytes"], 8 << 20, "every block was read back and verified: {job}");
    }
    let mm = server.mm_stat();
    assert_eq!(mm[0], 32 << 20, "orig_data_size: {mm:?}");
}
