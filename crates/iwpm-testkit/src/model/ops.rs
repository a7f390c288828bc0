//! The fuzz input grammar: a [`Setup`] and a list of [`Op`]s, and the byte format
//! ([`decode`], [`encode`] its inverse, used to build seeds). Each op is declared once, in
//! [`ops!`], with its tag byte and fields; the enum, the decoder and the encoder come from
//! that one list, so they cannot disagree.
//!
//! The format is the committed corpus's (`fuzz/corpus/core_sequence/`): a tag byte picks
//! the op modulo [`NUM_TAGS`], so a new op cannot take a new residue without changing how
//! every tag byte above it decodes. [`Op::Restore`] therefore has a byte of its own,
//! [`RESTORE_TAG`], that no tag of the corpus used when it was added.

use std::time::Duration;

use iwpm_core::{CoreConfig, PeerAllow};
use iwpm_proto::cidr::Cidr;

use super::pools::peer_ip;
use super::PID;

/// Most ops decoded from one input (longer inputs are cut).
pub const MAX_OPS: usize = 512;

/// Configuration of one run, from the first three input bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Setup {
    /// Bits 0-2: `max_mappings - 1`; bits 3-5: `max_exchanges - 1`; bits 6-7: retransmit
    /// count (0, 1, 3, 9).
    pub caps: u8,
    /// Bit 0: unused (reservations are answered within the call; recorded inputs set it to
    /// delay them); bit 1: skip the
    /// boot (HELLO 4 + REG_PID client 2); bit 2: 3 s exchange lifetime (shorter than the
    /// reply deadline) instead of 10 s; bit 3: `peer_allow` only `10.0.0.9/32` and
    /// `2001:db8::9/128` (one peer of each family; the other sources are dropped); bit 4:
    /// the core holds the model's fleet key ([`super::fleet_key`]), and REQUESTs with
    /// `shape & 8` come sealed under it.
    pub mode: u8,
    /// Bits 0-2: `max_peer_exchanges - 1`; bits 3-4: unused (were a per-source quota);
    /// bits 5-6: `remote_info_budget` (0, 1, 2, 128); bit 7: `max_rejects_per_sec` 2
    /// instead of 100.
    pub limits: u8,
}

impl Setup {
    pub(super) fn config(&self) -> CoreConfig {
        CoreConfig {
            netlink_pid: PID,
            max_mappings: usize::from(self.caps & 7) + 1,
            max_exchanges: usize::from((self.caps >> 3) & 7) + 1,
            max_retransmits: [0, 1, 3, 9][usize::from(self.caps >> 6)],
            exchange_lifetime: if self.mode & 4 != 0 {
                Duration::from_secs(3)
            } else {
                Duration::from_secs(10)
            },
            max_peer_exchanges: usize::from(self.limits & 7) + 1,
            remote_info_budget: [0, 1, 2, 128][usize::from((self.limits >> 5) & 3)],
            max_rejects_per_sec: if self.limits & 0x80 != 0 { 2 } else { 100 },
            handle_key: *b"iwpm-core fuzzing driver key 007",
            peer_allow: if self.mode & 8 != 0 {
                PeerAllow::only(
                    [peer_ip(0, false), peer_ip(0, true)]
                        .into_iter()
                        .filter_map(|ip| Cidr::new(ip, if ip.is_ipv4() { 32 } else { 128 }))
                        .collect(),
                )
            } else {
                PeerAllow::default()
            },
            ..CoreConfig::default()
        }
    }

    pub(super) fn boot(&self) -> bool {
        self.mode & 2 == 0
    }

    /// The core holds the fleet key.
    pub(super) fn keyed(&self) -> bool {
        self.mode & 16 != 0
    }
}

/// Longest raw kernel datagram of [`Op::KernelRaw`].
const MAX_RAW_KERNEL: usize = 160;
/// Longest raw peer datagram of [`Op::PeerRaw`].
const MAX_RAW_PEER: usize = 72;
/// Most records of one [`Op::MapInfo`].
const MAX_RECORDS: usize = 4;

/// Op kinds picked by a tag byte's residue (tag byte modulo this).
pub const NUM_TAGS: u8 = 25;
/// The tag byte of [`Op::Restore`] (its residue stays RegPid's for every other use).
pub const RESTORE_TAG: u8 = 225;

// ----- byte format -----

/// Reads the fuzz bytes; past the end every byte reads as 0.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
}

/// One field's byte format; `Spec` bounds a list's length.
trait Field: Sized {
    type Spec: Copy;
    fn read(r: &mut Reader<'_>, spec: Self::Spec) -> Self;
    fn write(&self, w: &mut Vec<u8>, spec: Self::Spec);
}

impl Field for u8 {
    type Spec = ();
    fn read(r: &mut Reader<'_>, (): ()) -> Self {
        r.u8()
    }
    fn write(&self, w: &mut Vec<u8>, (): ()) {
        w.push(*self);
    }
}

/// Little-endian integers.
macro_rules! le_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            type Spec = ();
            fn read(r: &mut Reader<'_>, (): ()) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                for x in &mut b {
                    *x = r.u8();
                }
                <$t>::from_le_bytes(b)
            }
            fn write(&self, w: &mut Vec<u8>, (): ()) {
                w.extend(self.to_le_bytes());
            }
        }
    )*};
}
le_field!(u16, u64);

/// Raw bytes: a length byte (modulo `max + 1`), then the bytes (cut at the input's end).
impl Field for Vec<u8> {
    type Spec = usize;
    fn read(r: &mut Reader<'_>, max: usize) -> Self {
        let n = usize::from(r.u8()) % (max + 1);
        let start = r.pos.min(r.data.len());
        let end = (start + n).min(r.data.len());
        r.pos += n;
        r.data[start..end].to_vec()
    }
    fn write(&self, w: &mut Vec<u8>, max: usize) {
        let n = self.len().min(max);
        w.push(n as u8);
        w.extend_from_slice(&self[..n]);
    }
}

/// MAPINFO records: a count byte (modulo `max + 1`), then three bytes each.
impl Field for Vec<[u8; 3]> {
    type Spec = usize;
    fn read(r: &mut Reader<'_>, max: usize) -> Self {
        let n = usize::from(r.u8()) % (max + 1);
        (0..n).map(|_| [r.u8(), r.u8(), r.u8()]).collect()
    }
    fn write(&self, w: &mut Vec<u8>, max: usize) {
        let n = self.len().min(max);
        w.push(n as u8);
        for rec in &self[..n] {
            w.extend(rec);
        }
    }
}

/// A field's `Spec`: the given bound, or `()` for a plain integer.
macro_rules! spec {
    () => {
        ()
    };
    ($e:expr) => {
        $e
    };
}

/// Declares [`Op`] with each variant's tag byte and fields in wire order, and derives
/// [`decode_op`] and [`encode_op`] from the same list.
macro_rules! ops {
    ($(
        $(#[$doc:meta])*
        $tag:literal => $name:ident $({ $($field:ident: $ty:ty $(= $spec:expr)?),* $(,)? })?
    ),* $(,)?) => {
        /// One step. Fields are raw fuzz bytes, interpreted when played (indices are taken
        /// modulo the size of small address pools so that operations collide often).
        // (Each field is a raw fuzz byte that its variant's doc describes.)
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Op {
            $( $(#[$doc])* $name $({ $($field: $ty),* })? ),*
        }

        /// The op of canonical tag `tag` (see [`decode_op`]), its fields read from `r`.
        fn decode_tagged(tag: u8, r: &mut Reader<'_>) -> Option<Op> {
            match tag {
                $( $tag => Some(Op::$name $({ $($field: Field::read(r, spec!($($spec)?))),* })?), )*
                _ => None,
            }
        }

        /// Appends `op` in the format [`decode_op`] reads.
        fn encode_op(op: &Op, w: &mut Vec<u8>) {
            match op {
                $( Op::$name $({ $($field),* })? => {
                    w.push($tag);
                    $( $( Field::write($field, w, spec!($($spec)?)); )* )?
                } )*
            }
        }
    };
}

ops! {
    /// REG_PID; `lib % 4 == 3` sends another library name.
    0 => RegPid { client: u8, lib: u8, seq: u8 },
    /// ADD_MAPPING of local address `local` (pool), flags by `flags`.
    1 => Add { client: u8, local: u8, flags: u8, seq: u8 },
    /// QUERY_MAPPING of `local` towards `remote` (pools).
    2 => Query { client: u8, local: u8, remote: u8, flags: u8, seq: u8 },
    /// REMOVE_MAPPING of `local`.
    3 => Remove { client: u8, local: u8 },
    /// MAPINFO records (local, mapped, flags) in one datagram; `done & 1` appends DONE.
    4 => MapInfo { client: u8, done: u8, records: Vec<[u8; 3]> = MAX_RECORDS },
    /// MAPINFO_NUM.
    5 => MapInfoNum { client: u8, send_num: u8 },
    /// The kernel's HELLO with ABI `abi % 7`.
    6 => Hello { abi: u8 },
    /// `NLMSG_DONE` for a seq picked by `seq`, result picked by `result`.
    7 => Done { seq: u8, result: u8 },
    /// `NLMSG_ERROR`, with or without an echoed request header.
    8 => NlError { seq: u8, error: u8, request: u8 },
    /// Raw bytes on the kernel link.
    9 => KernelRaw { data: Vec<u8> = MAX_RAW_KERNEL },
    /// A well-formed kernel message with one byte xor-ed.
    10 => KernelMutate { base: u8, local: u8, at: u8, xor: u8 },
    /// A peer REQUEST for `ap` (local pool) from source `src` (peer pool).
    11 => Request { ap: u8, src: u8, handle: u8, shape: u8 },
    /// ACCEPT of one of the REQUESTs the core sent.
    12 => Accept { pick: u8, port: u8, from: u8 },
    /// REJECT of one of the REQUESTs the core sent.
    13 => Reject { pick: u8, from: u8 },
    /// ACK of one of the ACCEPTs the core sent. `from >> 6`: 0-1 the ACCEPT's bytes echoed
    /// (what a real peer sends: its echo cookie verifies when it comes from the address the
    /// ACCEPT went to), 2 blind (written from the decoded ACCEPT: unused bytes zero, as an
    /// attacker who never saw it), 3 echoed with one echo byte flipped (`from >> 2 & 15`
    /// picks it; tampering).
    14 => Ack { pick: u8, from: u8 },
    /// One of the datagrams the core sent, delivered back (optionally with a byte xor-ed);
    /// in a keyed run, `at >= 128` with `xor == 0` instead replays one of the sealed
    /// datagrams the model sent, from its source.
    15 => Echo { pick: u8, at: u8, xor: u8 },
    /// Raw bytes on a peer socket.
    16 => PeerRaw { src: u8, data: Vec<u8> = MAX_RAW_PEER },
    /// A well-formed peer message with fuzz-chosen fields.
    17 => PeerForged { ty: u8, ips: u8, handle: u64, ap_port: u16, cp_port: u16, extra: u8 },
    /// Runs the clock forward `ms` milliseconds, timer by timer.
    18 => Advance { ms: u16 },
    /// Runs the clock forward `secs` seconds, timer by timer.
    19 => AdvanceLong { secs: u16 },
    /// A late shell: one `handle_timeout` `ms × 16` ms ahead.
    20 => Jump { ms: u16 },
    /// `handle_timeout(now)`.
    21 => Tick,
    /// How the shell answers the next reservation: `kind % 6` 0-2 grant (the asked port,
    /// or a free one for port 0), 3 fail, 4 `Ok(0)`, 5 `Ok(port)`.
    22 => Answer { kind: u8, port: u16 },
    /// Does nothing: it answered a reservation that was not pending, which the synchronous
    /// reservation API cannot express (kept so recorded inputs decode the same).
    23 => AnswerUnknown { pick: u8, ok: u8, port: u16 },
    /// The kernel link lost input (`handle_kernel_overrun`).
    24 => Overrun,
    /// A daemon restart: a new core is restored from the old one's state file and the
    /// kernel replays what it holds; `how % 3` 0 replays every record and MAPINFO_NUM, 1
    /// every record without MAPINFO_NUM (the window closes on its timer), 2 nothing (the
    /// next ops play the kernel, which then counts no reference; see `restart.rs`).
    225 => Restore { how: u8 },
}

/// Decodes an input: three [`Setup`] bytes, then ops (a tag byte, then the op's fields;
/// missing bytes read as 0). At most [`MAX_OPS`] ops.
pub fn decode(data: &[u8]) -> (Setup, Vec<Op>) {
    let mut r = Reader { data, pos: 0 };
    let setup = Setup {
        caps: r.u8(),
        mode: r.u8(),
        limits: r.u8(),
    };
    let mut ops = Vec::new();
    while !r.done() && ops.len() < MAX_OPS {
        ops.push(decode_op(&mut r));
    }
    (setup, ops)
}

/// Decodes one op: a tag byte, then its fields.
fn decode_op(r: &mut Reader<'_>) -> Op {
    let tag = match r.u8() {
        RESTORE_TAG => RESTORE_TAG,
        t => t % NUM_TAGS,
    };
    // Every residue is declared in `ops!`.
    decode_tagged(tag, r).unwrap_or(Op::Overrun)
}

/// The bytes [`decode`] turns into `setup` and `ops` (raw lists longer than the format
/// allows are cut).
pub fn encode(setup: Setup, ops: &[Op]) -> Vec<u8> {
    let mut w = vec![setup.caps, setup.mode, setup.limits];
    for op in ops {
        encode_op(op, &mut w);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tag byte decodes to an op that encodes back to its canonical tag.
    #[test]
    fn every_tag_byte_decodes_and_re_encodes() {
        for t in 0..=u8::MAX {
            let (_, ops) = decode(&[0, 0, 0, t]);
            let canonical = if t == RESTORE_TAG { t } else { t % NUM_TAGS };
            assert_eq!(encode(Setup::default(), &ops)[3], canonical, "tag {t}");
        }
    }

    #[test]
    fn the_restore_tag_alone_decodes_to_restore() {
        let (_, ops) = decode(&[0, 0, 0, RESTORE_TAG, 7, RESTORE_TAG - NUM_TAGS, 1, 2, 3]);
        assert_eq!(
            ops,
            [
                Op::Restore { how: 7 },
                Op::RegPid {
                    client: 1,
                    lib: 2,
                    seq: 3
                }
            ]
        );
    }
}
