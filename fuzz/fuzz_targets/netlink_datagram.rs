//! Fuzz target: the oracle `iwpm_proto::fuzzing::netlink_datagram` (no panic; round trip where the
//! format allows). The committed seeds in `fuzz/corpus/netlink_datagram/` are replayed on stable by
//! `crates/iwpm-proto/tests/it/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwpm_proto::fuzzing::netlink_datagram(data);
});
