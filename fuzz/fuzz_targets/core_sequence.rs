//! Fuzz target: the state-machine driver `iwpm_testkit::model::core_sequence` (arbitrary
//! sequences of kernel messages, peer datagrams, timer runs and reservation answers against
//! one `Core`, with its invariants checked after every step). The committed corpus in
//! `fuzz/corpus/core_sequence/` is replayed on stable by
//! `crates/iwpm-core/tests/it/core_sequence.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwpm_testkit::model::core_sequence(data);
});
