//! Fuzz target: the oracle `iwpm_proto::fuzzing::config_text` (no panic; round trip where the
//! format allows). The committed seeds in `fuzz/corpus/config_file/` are replayed on stable by
//! `crates/iwpm-proto/tests/it/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwpm_proto::fuzzing::config_text(data);
});
