#!/usr/bin/env python3
"""The wire between the rig's two VMs, and the third host on it: an on-path attacker.

run-2vm.sh -w puts this between VM A (the server, QEMU listening on 127.0.0.1:A_PORT)
and VM B (the client, whose QEMU connects to the port this prints). Each side speaks
QEMU's socket netdev stream: a 4-byte big-endian length, then one Ethernet frame.
Every frame is forwarded as it came, except as asked below.

The attacker holds no fleet key. It sees the wire, so it keeps, per address family, the
last sealed (124-byte) REQUEST and ACK that B's daemon sent to A's over UDP port 3935,
and it can inject any frame, with any source: what it injects carries B's own MAC, IP
address and port, i.e. it speaks as the victim. The guest suite drives it with files in
the two VMs' sync folder (CTL, the host side of the share):

  wire.STEP.go    ->  wire.STEP.sent  (what was injected, a line per datagram)
    replay   each kept datagram again, byte for byte
    strip    each kept datagram cut to its first 64 bytes (what rdma-core reads)
    flip     each kept datagram with byte 34 of the message (in the ap address) xor 1
  wire.instrip.go ->  wire.instrip.armed, then wire.instrip.sent when done
    instrip  the next sealed REQUEST from B to A of each family named in the go file
             ("v4", "v6", or both) is cut to 64 bytes in flight: the original never
             arrives
  wire.stop       ->  the wire keeps forwarding and stops watching CTL

Injected and cut datagrams get correct IP and UDP lengths and checksums: the receiving
kernel must hand them to the daemon, which alone is under test. A log of the run is
CTL/wire.log. The wire exits when either side closes.

With --pcap FILE every frame forwarded (as it left the wire) is also written to FILE, cut
to its first SNAPLEN bytes: enough for the IP, TCP and MPA/DDP headers and the start of
an RDMA message, to tell where the first data of a new connection went.
"""
import argparse
import os
import socket
import struct
import sys
import threading
import time

PEER_PORT = 3935
SEALED_LEN = 124
SEAL_MAGIC = b"IWRS"  # the v2 block's magic, at byte 64 of a sealed datagram
TYPES = ("REQUEST", "ACCEPT", "ACK", "REJECT")
SNAPLEN = 192


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


class Udp:
    """A UDP datagram in an Ethernet frame (IPv4 or IPv6 without extension headers)."""

    def __init__(self, frame):
        self.frame = frame
        et = struct.unpack("!H", frame[12:14])[0]
        self.family = None
        if et == 0x0800 and len(frame) >= 14 + 20 + 8:
            ihl = (frame[14] & 0x0F) * 4
            if frame[14 + 9] != 17 or (struct.unpack("!H", frame[20:22])[0] & 0x3FFF):
                return  # not UDP, or a fragment
            total = struct.unpack("!H", frame[16:18])[0]
            self.family, self.l3, self.l4 = "v4", 14, 14 + ihl
            self.src = socket.inet_ntop(socket.AF_INET, frame[26:30])
            self.dst = socket.inet_ntop(socket.AF_INET, frame[30:34])
            self.end = 14 + total
        elif et == 0x86DD and len(frame) >= 14 + 40 + 8:
            if frame[14 + 6] != 17:
                return
            plen = struct.unpack("!H", frame[18:20])[0]
            self.family, self.l3, self.l4 = "v6", 14, 14 + 40
            self.src = socket.inet_ntop(socket.AF_INET6, frame[22:38])
            self.dst = socket.inet_ntop(socket.AF_INET6, frame[38:54])
            self.end = 14 + 40 + plen
        else:
            return
        self.sport, self.dport = struct.unpack("!HH", frame[self.l4:self.l4 + 4])
        self.payload = frame[self.l4 + 8:self.end]

    def is_peer_exchange(self):
        return self.family is not None and PEER_PORT in (self.sport, self.dport)

    def kind(self):
        return TYPES[(self.payload[0] >> 4) % 4] if self.payload else "?"

    def sealed(self):
        return len(self.payload) == SEALED_LEN and self.payload[64:68] == SEAL_MAGIC

    def describe(self, payload=None):
        p = self.payload if payload is None else payload
        return "%s %s %s:%d -> %s:%d len=%d" % (
            self.family, TYPES[(p[0] >> 4) % 4], self.src, self.sport, self.dst, self.dport, len(p))

    def with_payload(self, payload):
        """The same frame carrying PAYLOAD, its lengths and checksums made right."""
        f = bytearray(self.frame[:self.l4 + 8]) + payload
        ulen = 8 + len(payload)
        struct.pack_into("!H", f, self.l4 + 4, ulen)
        struct.pack_into("!H", f, self.l4 + 6, 0)
        if self.family == "v4":
            struct.pack_into("!H", f, self.l3 + 2, self.l4 - self.l3 + ulen)
            struct.pack_into("!H", f, self.l3 + 10, 0)
            struct.pack_into("!H", f, self.l3 + 10, checksum(bytes(f[self.l3:self.l4])))
            pseudo = bytes(f[26:34]) + struct.pack("!BBH", 0, 17, ulen)
        else:
            struct.pack_into("!H", f, self.l3 + 4, ulen)
            pseudo = bytes(f[22:54]) + struct.pack("!IxxxB", ulen, 17)
        c = checksum(pseudo + bytes(f[self.l4:])) or 0xFFFF
        struct.pack_into("!H", f, self.l4 + 6, c)
        return bytes(f)


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class Wire:
    def __init__(self, a, b, ctl, log):
        self.socks = {"A": a, "B": b}
        self.locks = {"A": threading.Lock(), "B": threading.Lock()}
        self.ctl, self.logf = ctl, log
        self.kept = {}  # (family, kind) -> Udp: the last sealed REQUEST / ACK from B to A
        self.instrip = set()  # families whose next sealed REQUEST from B is cut in flight
        self.instripped = []
        self.state = threading.Lock()
        self.frames = {"A": 0, "B": 0}
        self.done = threading.Event()
        self.pcap = None

    def capture(self, path):
        """Write every forwarded frame to PATH (pcap, Ethernet, SNAPLEN bytes of each)."""
        self.pcap = open(path, "wb")
        self.pcap.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, 1))

    def record(self, frame):
        if self.pcap is None:
            return
        t = time.time()
        cut = frame[:SNAPLEN]
        with self.state:
            self.pcap.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(cut), len(frame)) + cut)

    def log(self, line):
        with self.state:
            self.logf.write("%.3f %s\n" % (time.monotonic(), line))
            self.logf.flush()

    def send(self, to, frame):
        with self.locks[to]:
            self.socks[to].sendall(struct.pack("!I", len(frame)) + frame)

    def forward(self, frm, to):
        try:
            while True:
                head = read_exact(self.socks[frm], 4)
                if head is None:
                    break
                frame = read_exact(self.socks[frm], struct.unpack("!I", head)[0])
                if frame is None:
                    break
                self.frames[frm] += 1
                if frm == "B":
                    frame = self.watch(frame)
                self.record(frame)
                self.send(to, frame)
        except OSError as e:
            self.log("side %s: %s" % (frm, e))
        self.log("side %s closed after %d frames" % (frm, self.frames[frm]))
        self.done.set()

    def watch(self, frame):
        """Keep B's sealed REQUESTs and ACKs to A; cut one in flight when armed."""
        u = Udp(frame)
        if not (u.is_peer_exchange() and u.sealed()):
            return frame
        kind = u.kind()
        if kind not in ("REQUEST", "ACK"):
            return frame
        with self.state:
            self.kept[(u.family, kind)] = u
            cut = kind == "REQUEST" and u.family in self.instrip
            if cut:
                self.instrip.discard(u.family)
        if not cut:
            return frame
        line = "cut in flight: " + u.describe(u.payload[:64])
        self.log(line)
        with self.state:
            self.instripped.append(line)
            finished = not self.instrip
        if finished:
            self.flag("wire.instrip.sent", self.instripped)
        return u.with_payload(u.payload[:64])

    def flag(self, name, lines):
        tmp = os.path.join(self.ctl, "." + name + ".part")
        with open(tmp, "w") as f:
            f.write("".join(l + "\n" for l in lines))
        os.rename(tmp, os.path.join(self.ctl, name))

    def inject(self, step):
        with self.state:
            kept = sorted(self.kept.items(), key=lambda kv: (kv[0][0], kv[0][1] != "REQUEST"))
        lines = []
        for (family, kind), u in kept:
            p = u.payload
            if step == "strip":
                p = p[:64]
            elif step == "flip":
                p = p[:34] + bytes([p[34] ^ 1]) + p[35:]
            self.send("A", u.with_payload(p))
            lines.append("injected (%s): %s" % (step, u.describe(p)))
            self.log(lines[-1])
        if not lines:
            lines.append("nothing kept: no sealed REQUEST or ACK from B seen")
            self.log(lines[-1])
        self.flag("wire.%s.sent" % step, lines)

    def control(self):
        handled = set()
        while not self.done.is_set():
            try:
                names = os.listdir(self.ctl)
            except OSError:
                names = []
            if "wire.stop" in names:
                self.log("stop")
                return
            for name in sorted(names):
                if not (name.startswith("wire.") and name.endswith(".go")) or name in handled:
                    continue
                handled.add(name)
                step = name[len("wire."):-len(".go")]
                self.log("asked: " + step)
                if step in ("replay", "strip", "flip"):
                    self.inject(step)
                elif step == "instrip":
                    with open(os.path.join(self.ctl, name)) as f:
                        fams = {w for w in f.read().split() if w in ("v4", "v6")}
                    with self.state:
                        self.instrip = fams or {"v4"}
                        self.instripped = []
                    self.flag("wire.instrip.armed", sorted(self.instrip))
                else:
                    self.flag("wire.%s.sent" % step, ["unknown step " + step])
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a-port", type=int, required=True, help="VM A's QEMU listens here")
    ap.add_argument("--port-file", required=True, help="where to write the port B connects to")
    ap.add_argument("--ctl", required=True, help="the VMs' sync folder (host side)")
    ap.add_argument("--pcap", help="also write every forwarded frame to this pcap file")
    args = ap.parse_args()
    os.makedirs(args.ctl, exist_ok=True)
    log = open(os.path.join(args.ctl, "wire.log"), "a")
    a = None
    for _ in range(300):
        try:
            a = socket.create_connection(("127.0.0.1", args.a_port))
            break
        except OSError:
            time.sleep(0.1)
    if a is None:
        print("wire: VM A's port %d never answered" % args.a_port, file=sys.stderr)
        return 1
    lsn = socket.socket()
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(1)
    tmp = args.port_file + ".part"
    with open(tmp, "w") as f:
        f.write("%d\n" % lsn.getsockname()[1])
    os.rename(tmp, args.port_file)
    lsn.settimeout(120)
    try:
        b, _ = lsn.accept()
    except OSError:
        print("wire: VM B never connected", file=sys.stderr)
        return 1
    lsn.close()
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    w = Wire(a, b, args.ctl, log)
    if args.pcap:
        w.capture(args.pcap)
    w.log("wire up: A on :%d, B connected" % args.a_port)
    for frm, to in (("A", "B"), ("B", "A")):
        threading.Thread(target=w.forward, args=(frm, to), daemon=True).start()
    threading.Thread(target=w.control, daemon=True).start()
    w.done.wait()
    w.log("wire down: frames from A %d, from B %d" % (w.frames["A"], w.frames["B"]))
    if w.pcap is not None:
        with w.state:
            w.pcap.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
