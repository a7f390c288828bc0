//! The rig's host-side frame reader, `tests/rig/tools/rdma-conns.py`, on a capture made here:
//! the `frames-lost` check of the storage suite trusts it to flag exactly the iWARP
//! connections whose first Read Request or first Send went unanswered, and no other.

use std::process::Command;

use iwpm_testkit::fs::scratch_dir;
use iwpm_testkit::workspace::workspace_root;

use crate::compat_report::python3;

const CLIENT: [u8; 4] = [10, 77, 0, 2];
const SERVER: [u8; 4] = [10, 77, 0, 1];

/// One Ethernet frame: IPv4, TCP (PSH ACK) from the client's PORT to the server's 4420 or
/// back, carrying PAYLOAD (checksums left zero: the reader does not look at them).
fn frame(port: u16, from_client: bool, payload: &[u8]) -> Vec<u8> {
    let (src, dst, sport, dport) = if from_client {
        (CLIENT, SERVER, port, 4420)
    } else {
        (SERVER, CLIENT, 4420, port)
    };
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 20 + payload.len()) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

/// An untagged FPDU's head: MPA length, DDP control (last), RDMAP opcode, queue, MSN, MO.
fn untagged(ulpdu: u16, opcode: u8, queue: u32) -> Vec<u8> {
    let mut p = ulpdu.to_be_bytes().to_vec();
    p.extend_from_slice(&[0x41, 0x40 | opcode, 0, 0, 0, 0]);
    p.extend_from_slice(&queue.to_be_bytes());
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&0u32.to_be_bytes());
    p.resize(p.len() + 28, 0);
    p
}

/// A Read Response's head: tagged, last, a steering tag and offset.
fn read_response() -> Vec<u8> {
    let mut p = 1038u16.to_be_bytes().to_vec();
    p.extend_from_slice(&[0xC1, 0x42, 0xef, 0x1f, 0xfe, 0x01]);
    p.resize(p.len() + 40, 0x5a);
    p
}

/// An iWARP connection from the client's PORT: the MPA exchange, then MESSAGES in order.
fn connection(port: u16, messages: &[(bool, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut frames = vec![
        frame(port, true, b"MPA ID Req Frame\x81\x00\x00\x00"),
        frame(port, false, b"MPA ID Rep Frame\x81\x00\x00\x00"),
    ];
    frames.extend(messages.iter().map(|(c, p)| frame(port, *c, p)));
    frames
}

/// A pcap file (microseconds, Ethernet, 192 bytes kept) of FRAMES, a millisecond apart.
fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = 0xA1B2_C3D4u32.to_le_bytes().to_vec();
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    for word in [0u32, 0, 192, 1] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        let len = f.len() as u32;
        for word in [1_800_000_000u32, i as u32 * 1000, len, len] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(f);
    }
    out
}

#[test]
fn rdma_conns_flags_an_unanswered_first_read_and_a_silent_first_send_only() {
    let test = "rdma_conns_flags_an_unanswered_first_read_and_a_silent_first_send_only";
    if !python3(test, "tests/rig/tools/rdma-conns.py") {
        return;
    }
    let send = untagged(82, 3, 0);
    let read_request = untagged(46, 1, 1);
    let reply = untagged(34, 4, 0);
    let mut frames = Vec::new();
    // answered: the admin queue's Connect, the target's Read of its data, the response
    frames.extend(connection(
        40001,
        &[
            (true, send.clone()),
            (false, read_request.clone()),
            (true, read_response()),
            (false, reply.clone()),
        ],
    ));
    // the Read Response never comes
    frames.extend(connection(
        40002,
        &[
            (true, send.clone()),
            (false, read_request.clone()),
            (true, send.clone()),
        ],
    ));
    // nothing comes back for the first Send
    frames.extend(connection(40003, &[(true, send.clone())]));
    // not iWARP (no MPA request first): never looked at
    frames.push(frame(40004, true, b"GET / HTTP/1.1\r\n\r\n"));
    let dir = scratch_dir("rdma-conns");
    let capture = dir.join("eth0.pcap");
    std::fs::write(&capture, pcap(&frames)).unwrap();

    let out = Command::new("python3")
        .arg(workspace_root().join("tests/rig/tools/rdma-conns.py"))
        .arg(&capture)
        .output()
        .expect("run rdma-conns.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.ends_with("3 iWARP connections, 2 flagged\n"), "{text}");
    let flagged: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("connection "))
        .collect();
    assert_eq!(flagged.len(), 2, "{text}");
    assert!(
        flagged[0].starts_with("connection 10.77.0.2:40002 -> 10.77.0.1:4420")
            && flagged[0]
                .contains("READ: the server's Read Request (message 2) got no Read Response"),
        "{text}"
    );
    assert!(
        flagged[1].starts_with("connection 10.77.0.2:40003 -> 10.77.0.1:4420")
            && flagged[1].contains("SILENT: nothing came back for the client's first Send"),
        "{text}"
    );
}
