//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the same oracles the
//! cargo-fuzz targets run, on the stable toolchain, so CI exercises every target and every
//! past finding on each run.

use std::fs;
use std::path::PathBuf;

fn replay(target: &str, oracle: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| oracle(&data));
        assert!(
            outcome.is_ok(),
            "oracle {target} failed on {}",
            path.display()
        );
        count += 1;
    }
    assert!(
        count > 0,
        "no corpus inputs for {target} in {}",
        dir.display()
    );
}

#[test]
fn netlink_datagram_corpus() {
    replay("netlink_datagram", iwpm_proto::fuzzing::netlink_datagram);
}

#[test]
fn peer_datagram_corpus() {
    replay("peer_datagram", iwpm_proto::fuzzing::peer_datagram);
}

#[test]
fn config_file_corpus() {
    replay("config_file", iwpm_proto::fuzzing::config_text);
}

#[test]
fn key_file_corpus() {
    replay("key_file", iwpm_proto::fuzzing::key_file);
}
