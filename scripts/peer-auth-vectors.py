#!/usr/bin/env python3
"""Writes the sealed-datagram golden vectors (crates/iwpm-proto/tests/vectors/peer/auth-*.hex)
from the layout in docs/protocol.md section 6.14, with Python's own hmac and hashlib: an
oracle independent of the Rust codec, which the test `peer_auth_vectors` compares byte for
byte. Run it from the repository root; it rewrites the files."""
import hashlib
import hmac
import ipaddress
import struct
from pathlib import Path

OUT = Path("crates/iwpm-proto/tests/vectors/peer")
LABEL = b"iwpmd-rs peer datagram v2\0"
KEY1 = bytes(range(0x10, 0x30))  # 32 bytes, id 1
KEY7 = b"fleet-key-seven!"  # 16 bytes (the shortest allowed), id 7


def addr(ip):
    a = ipaddress.ip_address(ip)
    return a.packed + bytes(16 - len(a.packed))


def message(mtype, ipv, handle, cp, ap, mapped_cp=None, reserved=0, pmtime=0, version=0):
    (cp_ip, cp_port), (ap_ip, ap_port) = cp, ap
    b = bytes([(version << 6) | (mtype << 4) | ipv, pmtime])
    b += struct.pack(">HHHQ", reserved, ap_port, cp_port, handle)
    b += addr(cp_ip) + addr(ap_ip)
    if mapped_cp is not None:
        b += addr(mapped_cp)
    return b


def v1_block(flags, cookie):
    return b"IWRS" + bytes([1, flags, 0, 0]) + cookie


def seal(inner, key_id, key, stamp):
    form = {48: 0, 64: 1, 96: 2}[len(inner)]
    flags, cookie = (inner[69], inner[72:96]) if form == 2 else (0, bytes(24))
    head = inner[:64].ljust(64, b"\0")
    b = head + b"IWRS" + bytes([2, flags, form, 0]) + cookie
    b += struct.pack(">IQ", key_id, stamp)
    mac = hmac.new(key, LABEL + b, hashlib.sha256).digest()[:16]
    return b + mac


def write(name, comment, data):
    lines = [f"# {c}" for c in comment]
    lines += [" ".join(f"{x:02x}" for x in data[i:i + 16]) for i in range(0, len(data), 16)]
    (OUT / name).write_text("\n".join(lines) + "\n")


REQ, ACC, ACK = 0, 1, 2
req4 = message(REQ, 4, 7, ("10.0.0.1", 5000), ("10.0.0.2", 4000), "10.0.0.1", reserved=41234)
write("auth-request-v4.hex",
      ["sealed IPv4 REQUEST (64-byte inner form), key id 1 (bytes 0x10..0x2f),",
       "stamp 1765000000000000 us; written by scripts/peer-auth-vectors.py (Python hmac)"],
      seal(req4, 1, KEY1, 1765000000000000))
acc6 = message(ACC, 6, 0x0123456789ABCDEF, ("fd00::1", 5000), ("fd00::2", 40123), "fd00::1")
acc6 += v1_block(1, bytes(range(0xA0, 0xB8)))
write("auth-accept-v6.hex",
      ["sealed IPv6 ACCEPT (96-byte inner form: a version-1 block, CAN_ECHO, cookie a0..b7),",
       "key id 7 ('fleet-key-seven!'), stamp 1765000000123456 us;",
       "written by scripts/peer-auth-vectors.py (Python hmac)"],
      seal(acc6, 7, KEY7, 1765000000123456))
ack4 = message(ACK, 4, 7, ("10.0.0.1", 5000), ("10.0.0.2", 40123))
write("auth-ack-v4-short.hex",
      ["sealed IPv4 ACK (48-byte inner form), key id 1, stamp 1765000000000001 us;",
       "written by scripts/peer-auth-vectors.py (Python hmac)"],
      seal(ack4, 1, KEY1, 1765000000000001))
