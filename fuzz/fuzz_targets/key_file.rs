//! Fuzz target: the oracle `iwpm_proto::fuzzing::key_file` (no panic, no key material in an
//! error, the signing-key rule, the round trip of an accepted file). The committed seeds in
//! `fuzz/corpus/key_file/` are replayed on stable by
//! `crates/iwpm-proto/tests/it/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwpm_proto::fuzzing::key_file(data);
});
