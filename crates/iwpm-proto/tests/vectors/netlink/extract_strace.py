#!/usr/bin/env python3
"""Rebuild netlink messages from the rig's strace captures into annotated .hex vectors.

strace prints each netlink message as its decoded `nlmsghdr` fields followed by the payload
as `\\xNN` escapes (or, for NLMSG_DONE, the decoded int). This script rebuilds the 16-byte
header from the decoded fields (host order, little-endian), appends the payload verbatim,
and writes one annotated vector file per selected line.

Usage: extract_strace.py [CAPTURE_DIR]   (writes into this script's directory)

By default the lines are read from the excerpts shipped in ../captures/ (`<capture>.excerpt`,
each kept line prefixed with `L<n> `, n = its line number in the full capture). A directory
holding the full captures (`c-iwpmd-*.strace`, `.strace.gz`) works too.
"""
import gzip
import os
import re
import struct
import sys

# (capture file, line number, vector name, what it is)
PICKS = [
    ("c-iwpmd-single-vm.strace", 28, "single-vm-L28-hello-d2k", "daemon->kernel HELLO"),
    ("c-iwpmd-single-vm.strace", 29, "single-vm-L29-hello-k2d", "kernel->daemon HELLO reply"),
    ("c-iwpmd-single-vm.strace", 30, "single-vm-L30-mapinfo-d2k", "daemon->kernel MAPINFO request"),
    ("c-iwpmd-single-vm.strace", 31, "single-vm-L31-done-0", "kernel->daemon NLMSG_DONE(0) for the HELLO"),
    ("c-iwpmd-single-vm.strace", 33, "single-vm-L33-reg-pid-k2d", "kernel->daemon REG_PID request (multicast)"),
    ("c-iwpmd-single-vm.strace", 34, "single-vm-L34-reg-pid-d2k", "daemon->kernel REG_PID reply"),
    ("c-iwpmd-single-vm.strace", 36, "single-vm-L36-add-k2d", "kernel->daemon ADD_MAPPING request, ABI 4"),
    ("c-iwpmd-single-vm.strace", 37, "single-vm-L37-add-d2k", "daemon->kernel ADD_MAPPING reply"),
    ("c-iwpmd-single-vm.strace", 39, "single-vm-L39-query-k2d", "kernel->daemon QUERY_MAPPING request, ABI 4"),
    ("c-iwpmd-single-vm.strace", 42, "single-vm-L42-remote-info-d2k", "daemon->kernel REMOTE_INFO"),
    ("c-iwpmd-single-vm.strace", 45, "single-vm-L45-query-d2k", "daemon->kernel QUERY_MAPPING reply"),
    ("c-iwpmd-single-vm.strace", 47, "single-vm-L47-done-einval", "kernel->daemon NLMSG_DONE(-22) after REMOTE_INFO"),
    ("c-iwpmd-single-vm.strace", 77, "single-vm-L77-remove-k2d", "kernel->daemon REMOVE_MAPPING"),
    ("c-iwpmd-2vm-server.strace.gz", 33, "2vm-server-L33-reg-pid-k2d", "kernel->daemon REG_PID request (eth0)"),
    ("c-iwpmd-2vm-server.strace.gz", 36, "2vm-server-L36-add-k2d", "kernel->daemon ADD_MAPPING request, ABI 4"),
    ("c-iwpmd-2vm-server.strace.gz", 37, "2vm-server-L37-add-d2k", "daemon->kernel ADD_MAPPING reply"),
    ("c-iwpmd-2vm-server.strace.gz", 41, "2vm-server-L41-remote-info-d2k", "daemon->kernel REMOTE_INFO (two hosts)"),
    ("c-iwpmd-2vm-server.strace.gz", 42, "2vm-server-L42-done-einval", "kernel->daemon NLMSG_DONE(-22) after REMOTE_INFO"),
    ("c-iwpmd-2vm-client.strace.gz", 34, "2vm-client-L34-reg-pid-d2k", "daemon->kernel REG_PID reply"),
    ("c-iwpmd-2vm-client.strace.gz", 36, "2vm-client-L36-query-k2d", "kernel->daemon QUERY_MAPPING request, ABI 4"),
    ("c-iwpmd-2vm-client.strace.gz", 39, "2vm-client-L39-query-d2k", "daemon->kernel QUERY_MAPPING reply (non-zero sockaddr padding)"),
    ("c-iwpmd-2vm-client.strace.gz", 59, "2vm-client-L59-query-d2k", "daemon->kernel QUERY_MAPPING reply (non-zero sockaddr padding)"),
    ("c-iwpmd-2vm-client.strace.gz", 42, "2vm-client-L42-remove-k2d", "kernel->daemon REMOVE_MAPPING"),
]

TYPES = {"NLMSG_DONE": 3, "NLMSG_ERROR": 2}
FLAGS = {"NLM_F_REQUEST": 1, "NLM_F_MULTI": 2}

MSG = re.compile(
    r"\{nlmsg_len=(\d+), nlmsg_type=(\S+?)(?: /\*[^*]*\*/)?, nlmsg_flags=([^,]+), "
    r"nlmsg_seq=(\d+), nlmsg_pid=(\d+)\}, (\"[^\"]*\"|-?\d+)\]"
)


def read_line(path, lineno):
    if not os.path.exists(path):
        return read_excerpt_line(path, lineno)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for i, line in enumerate(f, 1):
            if i == lineno:
                return line
    raise SystemExit(f"{path}: no line {lineno}")


def read_excerpt_line(path, lineno):
    """Line `lineno` of a full capture, from its excerpt beside it (`X.strace[.gz]` ->
    `X.excerpt`)."""
    stem = re.sub(r"\.strace(\.gz)?$", "", path)
    prefix = f"L{lineno} "
    with open(stem + ".excerpt") as f:
        for line in f:
            if line.startswith(prefix):
                return line[len(prefix):]
    raise SystemExit(f"{stem}.excerpt: capture line {lineno} not kept")


def rebuild(line):
    msgs = MSG.findall(line)
    if len(msgs) != 1:
        raise SystemExit(f"expected exactly one netlink message, found {len(msgs)}: {line[:120]}")
    ln, ty, flags, seq, pid, body = msgs[0]
    ty = TYPES[ty] if ty in TYPES else int(ty, 0)
    fl = 0
    for f in flags.split("|"):
        fl |= FLAGS[f] if f in FLAGS else int(f, 0)
    if body.startswith('"'):
        payload = bytes(int(h, 16) for h in re.findall(r"\\x([0-9a-f]{2})", body))
        if len(re.sub(r"\\x[0-9a-f]{2}", "", body[1:-1])) != 0:
            raise SystemExit("payload is not pure hex escapes")
    else:
        payload = struct.pack("<i", int(body))
    hdr = struct.pack("<IHHII", int(ln), ty, fl, int(seq), int(pid))
    if int(ln) != 16 + len(payload):
        raise SystemExit(f"nlmsg_len {ln} != 16 + {len(payload)}")
    return hdr + payload, (int(ln), ty, fl, int(seq), int(pid))


def hexrow(b):
    return " ".join(f"{x:02x}" for x in b)


def annotate(msg, hdr):
    ln, ty, fl, seq, pid = hdr
    out = [f"{hexrow(msg[:16])}  # nlmsghdr len={ln} type=0x{ty:04x} flags=0x{fl:x} seq={seq} pid={pid}"]
    body = msg[16:]
    if ty == 3:
        out.append(f"{hexrow(body)}  # NLMSG_DONE result {struct.unpack('<i', body)[0]}")
        return out
    off = 0
    while off < len(body):
        nla_len, nla_ty = struct.unpack_from("<HH", body, off)
        padded = (nla_len + 3) & ~3
        chunk = body[off:off + padded]
        pl = chunk[4:nla_len]
        if len(pl) == 128:
            fam = struct.unpack_from("<H", pl)[0]
            port = struct.unpack_from(">H", pl, 2)[0]
            what = f"sockaddr family {fam} port {port} addr {'.'.join(map(str, pl[4:8]))}"
        elif len(pl) == 4 and not any(c >= 0x20 for c in pl[:3] if c):
            what = f"u32 {struct.unpack('<I', pl)[0]}"
        elif len(pl) == 2:
            what = f"u16 {struct.unpack('<H', pl)[0]}"
        else:
            what = f"string {pl.split(bytes(1))[0].decode()!r}, {len(pl)} bytes"
        rows = [chunk[i:i + 16] for i in range(0, len(chunk), 16)]
        out.append(f"{hexrow(rows[0])}  # attr {nla_ty}, nla_len {nla_len}: {what}")
        out.extend(hexrow(r) for r in rows[1:])
        off += padded
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    cap_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "captures")
    for cap, lineno, name, what in PICKS:
        line = read_line(os.path.join(cap_dir, cap), lineno)
        call = "sendto" if re.search(r"\bsendto\(", line) else "recvfrom"
        msg, hdr = rebuild(line)
        text = [
            f"# {cap} line {lineno}: {call}, {what}",
            "# nlmsghdr rebuilt from strace's decoded header fields; payload bytes verbatim",
        ] + annotate(msg, hdr)
        with open(os.path.join(here, name + ".hex"), "w") as f:
            f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
