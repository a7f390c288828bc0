//! The codecs' and the configuration parser's integration tests, one test binary: a
//! module per subject. The vectors stay in `tests/vectors/`.

mod config_differential;
mod config_props;
mod config_rules;
mod fuzz_corpus;
mod keyfile_props;
mod netlink_bad_input;
// (the vectors are little-endian, as the ABI's host-order integers on x86-64)
#[cfg(target_endian = "little")]
mod netlink_golden;
mod netlink_props;
mod peer_auth_vectors;
mod peer_bad_input;
mod peer_props;
mod peer_vectors;
