#!/usr/bin/env python3
"""The iWARP connections in a rig VM's frame capture, and which of them lost their first data.

Reads a pcap of Ethernet frames cut to their first bytes (QEMU's filter-dump, run-vm.sh with
RIG_NET_DUMP=1, or tools/wire.py --pcap) and follows every TCP connection that begins with
an MPA request (iWARP's connection setup over TCP). For each it prints the setup and the
first RDMA messages, decoded from the MPA, DDP and RDMAP headers at the start of each TCP
segment: siw starts an FPDU at the start of a segment, so the captured head of a segment
holds the headers of the FPDU it starts.

A connection is flagged when one of its first messages (EARLY: the setup and the first
data, where each segment's head is a header) that must be answered was not:
  READ     an RDMA Read Request with no Read Response after it in the other direction
  SILENT   the first Send after the MPA exchange with nothing at all coming back
Either one is the kernels' (siw and its consumer) own: the port mapper had answered before
the TCP connection began, and nothing of it is on this connection.

Usage: rdma-conns.py PCAP [--all] [--first N]
  prints the flagged connections (all with --all), each with its first N segments [24];
  exit status 0 either way (1 on an unreadable capture)
"""
import argparse
import socket
import struct
import sys

OPS = {0: "WRITE", 1: "READ_REQ", 2: "READ_RESP", 3: "SEND", 4: "SEND_INV", 5: "SEND_SE",
       6: "SEND_SE_INV", 7: "TERMINATE"}
EARLY = 12
MPA_REQ, MPA_REP = b"MPA ID Req Frame", b"MPA ID Rep Frame"


def frames(path):
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24 or struct.unpack("<I", head[:4])[0] != 0xA1B2C3D4:
            raise ValueError("not a little-endian microsecond pcap")
        while True:
            h = f.read(16)
            if len(h) < 16:
                return
            sec, usec, caplen, _ = struct.unpack("<IIII", h)
            yield sec + usec / 1e6, f.read(caplen)


def tcp_segment(frame):
    """(src, sport, dst, dport, flags, payload length, payload head) or None."""
    if len(frame) < 14:
        return None
    et = struct.unpack("!H", frame[12:14])[0]
    if et == 0x0800 and len(frame) >= 34:
        ihl = (frame[14] & 0x0F) * 4
        if frame[23] != 6:
            return None
        plen = struct.unpack("!H", frame[16:18])[0] - ihl
        src, dst = (socket.inet_ntop(socket.AF_INET, frame[a:a + 4]) for a in (26, 30))
        l4 = 14 + ihl
    elif et == 0x86DD and len(frame) >= 54:
        if frame[20] != 6:
            return None
        plen = struct.unpack("!H", frame[18:20])[0]
        src, dst = (socket.inet_ntop(socket.AF_INET6, frame[a:a + 16]) for a in (22, 38))
        l4 = 54
    else:
        return None
    if len(frame) < l4 + 14:
        return None
    sport, dport = struct.unpack("!HH", frame[l4:l4 + 4])
    doff = (frame[l4 + 12] >> 4) * 4
    return src, sport, dst, dport, frame[l4 + 13], plen - doff, frame[l4 + doff:]


def describe(data):
    """What the head of a segment holds: an MPA frame or the headers of an FPDU."""
    if data[:16] in (MPA_REQ, MPA_REP):
        return data[:16].decode(), None
    if len(data) < 4:
        return "data", None
    ulen, ctrl, rdmap = struct.unpack("!HBB", data[:4])
    op = OPS.get(rdmap & 0x0F)
    tagged = ctrl >> 7
    # (WRITE and Read Response are tagged, the rest not: a header that says otherwise is the
    # middle of a message at a segment's head)
    if (op in ("WRITE", "READ_RESP")) != bool(tagged):
        op = None
    text = "%s (%s, ulpdu %d%s)" % (op or "data", "tagged" if tagged else "untagged", ulen,
                                    ", last" if (ctrl >> 6) & 1 else "")
    if not tagged and len(data) >= 20:
        qn, msn, mo = struct.unpack("!III", data[8:20])
        text += " qn %d msn %d mo %d" % (qn, msn, mo)
        # (a Read Request is exactly 46 bytes of ULPDU on queue 1: anything else that looks
        # like one is the middle of a message)
        if op == "READ_REQ" and (ulen != 46 or qn != 1):
            op = None
    return text, op


class Conn:
    def __init__(self, client, server):
        self.client, self.server = client, server
        self.lines, self.ops = [], []

    def add(self, t, frm, flags, length, data):
        fl = "".join(c for c, b in zip("FSRPA", (1, 2, 4, 8, 16)) if flags & b)
        what, op = describe(data) if length > 0 else ("", None)
        side = "client" if frm == self.client else "server"
        if op:
            self.ops.append((side, op))
        self.lines.append("%.6f %-6s %-5s len %-5d %s" % (t, side, fl, length, what))

    def verdict(self):
        """The first data's fate: only the connection's first EARLY messages are judged
        (past them a segment's head is as often the middle of a message as a header)."""
        flags = []
        for i, (side, op) in enumerate(self.ops[:EARLY]):
            if op == "READ_REQ" and not any(s != side and o == "READ_RESP" for s, o in self.ops[i + 1:]):
                flags.append("READ: the %s's Read Request (message %d) got no Read Response" % (side, i + 1))
        sends = [i for i, (_, op) in enumerate(self.ops) if op.startswith("SEND")]
        if sends:
            first_side = self.ops[sends[0]][0]
            if not any(s != first_side for s, _ in self.ops[sends[0] + 1:]):
                flags.append("SILENT: nothing came back for the %s's first Send" % first_side)
        return flags


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pcap")
    ap.add_argument("--all", action="store_true", help="print every connection, not only the flagged")
    ap.add_argument("--first", type=int, default=24, help="segments printed per connection")
    args = ap.parse_args()
    conns, order = {}, []
    try:
        for t, frame in frames(args.pcap):
            seg = tcp_segment(frame)
            if seg is None:
                continue
            src, sport, dst, dport, flags, length, data = seg
            key = frozenset(((src, sport), (dst, dport)))
            c = conns.get(key)
            if c is None:
                if length <= 0 or data[:16] != MPA_REQ:
                    continue  # (not an iWARP connection, or its start is not in the capture)
                c = conns[key] = Conn((src, sport), (dst, dport))
                order.append(c)
            c.add(t, (src, sport), flags, length, data)
    except (OSError, ValueError) as e:
        print("rdma-conns: %s: %s" % (args.pcap, e), file=sys.stderr)
        return 1
    flagged = 0
    for c in order:
        v = c.verdict()
        flagged += bool(v)
        if not v and not args.all:
            continue
        print("connection %s:%d -> %s:%d, %d segments%s" % (c.client + c.server + (len(c.lines),)
                                                          + (": " + "; ".join(v) if v else ": answered",)))
        for line in c.lines[:args.first]:
            print("  " + line)
    print("%d iWARP connections, %d flagged" % (len(order), flagged))
    return 0


if __name__ == "__main__":
    sys.exit(main())
