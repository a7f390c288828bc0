//! Fuzz target: the control socket's request decoder, through the oracle
//! `iwpm_control::fuzzing::control_frame` (no panic, bounded buffering, round trip of every
//! accepted request). The committed seeds in `fuzz/corpus/control_frame/` are replayed on
//! stable by `crates/iwpm-control/tests/it/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwpm_control::fuzzing::control_frame(data);
});
