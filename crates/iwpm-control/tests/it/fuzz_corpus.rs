//! Replays the committed `control_frame` fuzz corpus through the oracle the cargo-fuzz
//! target runs, on the stable toolchain.

use std::fs;
use std::path::PathBuf;

#[test]
fn control_frame_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/control_frame");
    let mut count = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| iwpm_control::fuzzing::control_frame(&data));
        assert!(outcome.is_ok(), "oracle failed on {}", path.display());
        count += 1;
    }
    assert!(count >= 10, "only {count} seeds in {}", dir.display());
}
