//! Fuzz target: the restart state-file parser, oracle `iwpm_testkit::model::state_file` (no
//! panic; accepted files round-trip). The committed seeds in `fuzz/corpus/state_file/` are
//! replayed on stable by `crates/iwpm-core/tests/it/restore.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwpm_testkit::model::state_file(data);
});
