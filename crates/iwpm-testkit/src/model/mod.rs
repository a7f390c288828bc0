//! State-machine fuzzing of [`Core`], shared by the cargo-fuzz target
//! `fuzz/fuzz_targets/core_sequence.rs` and the stable test
//! `crates/iwpm-core/tests/it/core_sequence.rs` (corpus replay + proptest sequences).
//!
//! [`core_sequence`] decodes arbitrary bytes into a [`Setup`] and a list of [`Op`]s (see
//! [`decode`]; [`encode`] is its inverse, used to build seeds; `ops.rs`) and plays them
//! against one core through its public API only, in the [`iwpm_core::Host`] the daemon
//! runs it in (the host lends it the model shell's port reservations, [`FakePorts`], and
//! keeps the daemon's state-file policy), with a model of the kernel (requests sent,
//! answers received, references it was told it holds). After every step [`Driver`]
//! checks, and panics with `core_sequence: …` on a violation:
//!
//! * [`Core::check_invariants`]; the gauges (`mappings` ≤ `max_mappings`, `exchanges_active`
//!   ≤ `max_exchanges`, `mappings` = the number of listed mappings); at most one mapping per
//!   exact local endpoint;
//! * reservations (made through the model shell's [`iwpm_core::PortReservations`], within
//!   the call that creates or frees the mapping): binds on the wildcard address, every
//!   release names a reservation the shell granted and still holds, and the reservations
//!   the shell holds are exactly those of the live mappings (a grant that makes no mapping
//!   is released within the same call); refusals, port 0 and unasked ports are injected
//!   ([`Op::Answer`]);
//! * the kernel's view: everything sent to the kernel decodes (by the kernel's rules), no
//!   `HANDLE_ERR` code 0, every `nlmsg_pid` is ours; each REG_PID/ADD/QUERY the kernel sent
//!   once is answered at most once, with the matching reply type, before `reply_deadline`;
//!   no answer for a request never sent; an ADD or QUERY answered with success leaves the
//!   mapping of that local address with at least as many references as the kernel was told
//!   it holds (successes minus its REMOVEs), with the mapped address it was told; a REMOVE
//!   from the owner takes exactly one reference;
//! * across a daemon restart ([`Op::Restore`], `driver/restart.rs`): the new core, restored
//!   from the old one's state file and settled by the kernel's replay within its own
//!   `handle_*` calls, keeps every reference the kernel was told of (but those taken while
//!   it recovers: a known defect, see `restart.rs`), and all of the above;
//! * the peer side: every datagram sent decodes, leaves on a socket of its family; a
//!   timer-driven REQUEST/ACCEPT is a retransmission of one first sent less than
//!   `exchange_lifetime` ago, at most `max_retransmits` times, and no REQUEST is resent
//!   after its ACCEPT was acknowledged; after the host's `handle_timeout(t)`, no timer (the
//!   core's or the state file's) is due at `t`;
//! * `Ready` at most once per daemon;
//! * the core's one output queue says everything: a kernel datagram's receipt names what
//!   it opened with and counts the messages sent in answer; a table that moved (as the
//!   state file would save it) was announced by one `TableChanged` in that call, with a new
//!   generation and the table's size; `RecoveryEnded` comes once, as soon as the core no
//!   longer recovers; no probe result without a probe;
//! * the state file: every `SaveState` names the generation announced last (the file is
//!   written from the table as it is then), and is answered at once;
//! * at the end ([`Driver::finish`]): time run forward, every mapping REMOVEd by its owner:
//!   the table is empty, no exchange is left, every granted port was released exactly once
//!   and the counters agree.
//!
//! Memory stays bounded by the checked gauges and by the driver's own bounded lists; the
//! fuzzer's RSS limit catches the rest.

mod driver;
mod ops;
mod pools;

use iwpm_core::state_file::StateFile;
#[cfg(doc)]
use iwpm_core::Core;

pub use driver::Driver;
pub use iwpm_core::FakePorts;
pub use ops::{decode, encode, Op, Setup, MAX_OPS, NUM_TAGS, RESTORE_TAG};

/// Our netlink port id in the driven core.
pub const PID: u32 = 0x4657;

/// Runs one fuzz input: decode, play every op with checks, then [`Driver::finish`].
pub fn core_sequence(data: &[u8]) {
    let (setup, ops) = decode(data);
    let mut d = Driver::new(setup);
    for op in &ops {
        d.step(op);
    }
    d.finish();
}

/// Oracle of the state-file parser (`fuzz/fuzz_targets/state_file.rs`, and the corpus
/// replay in `crates/iwpm-core/tests/it/restore.rs`): [`StateFile::decode`] never panics,
/// and whatever it accepts encodes to bytes that decode to the same file.
pub fn state_file(data: &[u8]) {
    if let Ok(file) = StateFile::decode(data) {
        let again = StateFile::decode(&file.encode());
        assert_eq!(
            again.as_ref(),
            Ok(&file),
            "state_file: round trip changed the file"
        );
    }
}

/// The wall clock of the model's daemon at its first start (a fixed date: runs repeat).
pub const MODEL_WALL: std::time::Duration = std::time::Duration::from_secs(1_765_000_000);

/// The fleet key of a keyed model run ([`Setup`] mode bit 4): id 1, 32 fixed bytes.
pub fn fleet_key() -> iwpm_proto::fleet_key::FleetKey {
    iwpm_proto::fleet_key::FleetKey::new(1, b"iwpm model fleet key, 32 bytes!!".to_vec(), false)
        .expect("a valid key")
}
