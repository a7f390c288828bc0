//! Properties of the netlink codec: `decode(encode(x)) == x` for every message variant in
//! ABI 3 and 4, multi-message datagrams through `frames`, and no panic on any input.

use std::fmt;

use iwpm_proto::netlink::*;
use iwpm_testkit::netlink_bytes::single;
use iwpm_testkit::netlink_strategies::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// Clients the daemon accepts from the kernel (current, legacy C4IW).
const KERNEL_CLIENTS: &[u8] = &[2, 3];
/// The only client the kernel dispatches.
const DAEMON_CLIENTS: &[u8] = &[2];

fn encoded_kernel(env: &Envelope, msg: &KernelMsg) -> Vec<u8> {
    let mut out = vec![];
    encode_kernel_msg(env, msg, &mut out);
    out
}

fn encoded_daemon(env: &Envelope, msg: &DaemonMsg) -> Vec<u8> {
    let mut out = vec![];
    encode_daemon_msg(env, msg, &mut out);
    out
}

fn kernel_round_trip(env: Envelope, msg: KernelMsg, abi: u16) -> Result<(), TestCaseError> {
    let bytes = encoded_kernel(&env, &msg);
    prop_assert_eq!(bytes.len() % 4, 0);
    let (h, p) = single(&bytes);
    prop_assert_eq!(h.len as usize, bytes.len());
    prop_assert_eq!(decode_kernel_msg(&h, p, abi), Ok((env, msg)));
    Ok(())
}

/// What one datagram holds: up to 6 messages (of `msg`, sent by one of `clients`) and
/// control frames, in order.
fn datagram_parts<M: Clone + fmt::Debug>(
    clients: &'static [u8],
    msg: BoxedStrategy<M>,
) -> impl Strategy<Value = Vec<Result<(Envelope, M), (NlHeader, ControlBody)>>> {
    vec(
        prop_oneof![
            (envelope(clients), msg).prop_map(|(e, m)| Ok((e, m))),
            control_frame().prop_map(Err),
        ],
        0..6,
    )
}

/// The datagram of `frames`, one after the other, and what decoding it must give back.
fn datagram_of<M: NetlinkMessage>(
    frames: impl IntoIterator<Item = Frame<M>>,
) -> (Vec<u8>, Vec<Result<Frame<M>, NetlinkError>>) {
    let mut datagram = vec![];
    let mut expected = vec![];
    for frame in frames {
        frame.encode(&mut datagram);
        expected.push(Ok(frame));
    }
    (datagram, expected)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn kernel_msgs_round_trip_abi4(env in envelope(KERNEL_CLIENTS), msg in kernel_msg(4)) {
        kernel_round_trip(env, msg, 4)?;
    }

    #[test]
    fn kernel_msgs_round_trip_abi3(env in envelope(KERNEL_CLIENTS), msg in kernel_msg(3)) {
        kernel_round_trip(env, msg, 3)?;
    }

    #[test]
    fn daemon_msgs_round_trip(env in envelope(DAEMON_CLIENTS), msg in daemon_msg()) {
        let bytes = encoded_daemon(&env, &msg);
        prop_assert_eq!(bytes.len() % 4, 0);
        let (h, p) = single(&bytes);
        prop_assert_eq!(decode_daemon_msg(&h, p), Ok((env, msg)));
    }

    /// Several messages and control frames in one datagram come back in order.
    #[test]
    fn kernel_datagrams_round_trip(
        abi in 3u16..=4,
        parts in datagram_parts(KERNEL_CLIENTS, kernel_msg(4)),
    ) {
        let (datagram, expected) = datagram_of(parts.into_iter().map(|part| match part {
            Ok((env, mut msg)) => {
                if abi < 4 {
                    // What the kernel sends under ABI 3: no FLAGS.
                    strip_flags(&mut msg);
                }
                KernelFrame::Msg(env, msg)
            }
            Err((header, body)) => body.kernel_frame(header),
        }));
        prop_assert_eq!(frames(&datagram).count(), expected.len());
        prop_assert!(frames(&datagram).all(|f| f.is_ok()));
        prop_assert_eq!(decode_kernel_datagram(&datagram, abi), expected);
    }

    #[test]
    fn daemon_datagrams_round_trip(parts in datagram_parts(DAEMON_CLIENTS, daemon_msg())) {
        let (datagram, expected) = datagram_of(parts.into_iter().map(|part| match part {
            Ok((env, msg)) => DaemonFrame::Msg(env, msg),
            Err((header, body)) => body.daemon_frame(header),
        }));
        prop_assert_eq!(decode_daemon_datagram(&datagram), expected);
    }

    /// Any byte string: framing and both decoders return, never panic; whatever decodes
    /// re-encodes to bytes that decode to the same value.
    #[test]
    fn arbitrary_datagrams_never_panic(bytes in vec(any::<u8>(), 0..700), abi in any::<u16>()) {
        let n = frames(&bytes).count();
        prop_assert!(frames(&bytes).filter(|f| f.is_err()).count() <= 1);
        let k = decode_kernel_datagram(&bytes, abi);
        let d = decode_daemon_datagram(&bytes);
        prop_assert_eq!(k.len(), n);
        prop_assert_eq!(d.len(), n);
        for frame in k.into_iter().flatten() {
            let mut again = vec![];
            frame.encode(&mut again);
            // DONE/ERROR re-encode in canonical form (extra payload dropped, ERROR capped),
            // so only messages and other control frames must come back identical.
            if matches!(frame, KernelFrame::Msg(..) | KernelFrame::Control { .. }) {
                prop_assert_eq!(decode_kernel_datagram(&again, abi), vec![Ok(frame)]);
            }
        }
        for frame in d.into_iter().flatten() {
            if let DaemonFrame::Msg(..) = frame {
                let mut again = vec![];
                frame.encode(&mut again);
                prop_assert_eq!(decode_daemon_datagram(&again), vec![Ok(frame)]);
            }
        }
    }

    /// Any header and payload straight into the message decoders.
    #[test]
    fn arbitrary_messages_never_panic(
        ty in prop_oneof![0x0800u16..0x0810, 0x0c00u16..0x0c0a, any::<u16>()],
        payload in vec(any::<u8>(), 0..600),
        abi in any::<u16>(),
    ) {
        let h = NlHeader { len: 16 + payload.len() as u32, ty, flags: 1, seq: 0, pid: 0 };
        let _ = decode_kernel_msg(&h, &payload, abi);
        let _ = decode_daemon_msg(&h, &payload);
    }

    /// Valid messages with a few bytes overwritten or the tail cut: still no panic, and an
    /// `Ok` is a value that survives its own round trip.
    #[test]
    fn mutated_messages_never_panic(
        env in envelope(KERNEL_CLIENTS),
        kmsg in kernel_msg(4),
        denv in envelope(DAEMON_CLIENTS),
        dmsg in daemon_msg(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        for mut bytes in [encoded_kernel(&env, &kmsg), encoded_daemon(&denv, &dmsg)] {
            for (at, value) in &edits {
                let i = at.index(bytes.len());
                bytes[i] = *value;
            }
            let truncated = &bytes[..cut.index(bytes.len() + 1)];
            for b in [&bytes[..], truncated] {
                for r in decode_kernel_datagram(b, 4).into_iter().flatten() {
                    if let KernelFrame::Msg(e, m) = r {
                        let again = encoded_kernel(&e, &m);
                        let (h, p) = single(&again);
                        prop_assert_eq!(decode_kernel_msg(&h, p, 4), Ok((e, m)));
                    }
                }
                for r in decode_daemon_datagram(b).into_iter().flatten() {
                    if let DaemonFrame::Msg(e, m) = r {
                        let again = encoded_daemon(&e, &m);
                        let (h, p) = single(&again);
                        prop_assert_eq!(decode_daemon_msg(&h, p), Ok((e, m)));
                    }
                }
            }
        }
    }
}

fn strip_flags(msg: &mut KernelMsg) {
    match msg {
        KernelMsg::AddMapping(m) | KernelMsg::RemoveMapping(m) => m.flags = None,
        KernelMsg::QueryMapping(m) => m.flags = None,
        KernelMsg::MapInfo(m) => m.flags = None,
        _ => {}
    }
}
