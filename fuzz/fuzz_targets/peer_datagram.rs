//! Fuzz target: the oracle `iwpm_proto::fuzzing::peer_datagram` (no panic; round trip where the
//! format allows, in the plain and the extended 96-byte form; `peer_extension` agrees with
//! `decode` about the extension block; a sealed 124-byte datagram unseals and re-seals). The committed seeds in `fuzz/corpus/peer_datagram/` are replayed on stable by
//! `crates/iwpm-proto/tests/it/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwpm_proto::fuzzing::peer_datagram(data);
});
