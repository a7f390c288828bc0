#!/usr/bin/env bash
# Rebuilds the committed seed corpora from the golden vectors (hex files with '#' comments)
# and the shipped/packaged config examples, and the core_sequence seeds from the scenarios in
# crates/iwpm-core/tests/it/core_sequence.rs. Run from anywhere; output is deterministic.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vec="$here/../crates/iwpm-proto/tests/vectors"
hex2bin() { sed 's/#.*//' "$1" | tr -d ' \n\t' | xxd -r -p; }
for kind in netlink:netlink_datagram peer:peer_datagram; do
    src=${kind%%:*}; dst="$here/corpus/${kind##*:}"
    mkdir -p "$dst"; rm -f "$dst"/seed-*
    for f in "$vec/$src"/*.hex; do hex2bin "$f" > "$dst/seed-$(basename "$f" .hex)"; done
done
dst="$here/corpus/config_file"; mkdir -p "$dst"; rm -f "$dst"/seed-*
printf 'nl_sock_rbuf_size=419430400\n' > "$dst/seed-shipped"
printf '# comment\n\nnl_sock_rbuf_size = 4096\nunknown_key=1\n  indented=2\nnl_sock_rbuf_size=-1\n' > "$dst/seed-mixed"
printf 'peer_port=3935\npeer_bind_v4=127.0.0.1\npeer_bind_v6=::1\n' > "$dst/seed-extensions"
printf 'nl_sock_rbuf_size==12abc\nfoo=bar\n%0200d=1\n' 0 > "$dst/seed-edge"
# key_file: fleet key files, good (a rotation step, CRLF, tabs, comments) and refused.
dst="$here/corpus/key_file"; mkdir -p "$dst"; rm -f "$dst"/seed-*
k16=000102030405060708090a0b0c0d0e0f
k32=101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f
printf '# fleet keys\n1 %s\n2 %s accept-only\n' $k16 $k32 > "$dst/seed-rotation-step1"
printf '1 000102030405060708090A0B0C0D0E0F\r\n\t2\t101112131415161718191a1b1c1d1e1f # current\n' > "$dst/seed-crlf-tabs-comment"
printf '1 0001020304\n' > "$dst/seed-too-short"
printf '1 00010203040506070809Ga0b0c0d0e0f\n' > "$dst/seed-bad-hex"
printf '1 %s accept-only\n' $k16 > "$dst/seed-no-signing-key"
printf '4294967295 %s\n4294967296 %s\n' $k16 $k16 > "$dst/seed-id-bounds"
printf '7 %s\n7 %s accept_only\n' $k16 $k16 > "$dst/seed-duplicate"
# core_sequence: hand-written scenarios, encoded by the driver's own encoder.
cargo test -q --manifest-path "$here/../Cargo.toml" -p iwpm-core --test it \
    -- --ignored --exact core_sequence::write_seeds >/dev/null
# control_frame: one length-prefixed JSON frame per seed (requests, a response, edge cases).
dst="$here/corpus/control_frame"; mkdir -p "$dst"; rm -f "$dst"/seed-*
frame() { local n=${#2}; { printf "\\x$(printf %02x $((n >> 24 & 255)))\\x$(printf %02x $((n >> 16 & 255)))\\x$(printf %02x $((n >> 8 & 255)))\\x$(printf %02x $((n & 255)))"; printf '%s' "$2"; } > "$dst/seed-$1"; }
frame status '{"version":1,"command":{"cmd":"status"}}'
frame list '{"version":1,"command":{"cmd":"list"}}'
frame peers '{"version":1,"command":{"cmd":"peers"}}'
frame keys '{"version":1,"command":{"cmd":"keys"}}'
frame metrics '{"version":1,"command":{"cmd":"metrics"}}'
frame dump '{"version":1,"command":{"cmd":"dump"}}'
frame log-level '{"version":1,"command":{"cmd":"log-level","set":"info,iwpm_core=debug"}}'
frame probe '{"version":1,"command":{"cmd":"probe","host":"fe80::1","timeout_ms":1500}}'
frame version-2 '{"version":2,"command":{"cmd":"teleport"}}'
frame response '{"version":1,"result":{"error":{"kind":"busy","message":"16 control clients"}}}'
frame probe-reply '{"version":1,"result":{"ok":{"kind":"probe","target":"192.0.2.1:3935","local":"192.0.2.2","reachable":true,"answer":"rejected","elapsed_us":312,"requests":1}}}'
printf '\xff\xff\xff\xff{' > "$dst/seed-oversized"
printf '\x00\x00\x00\x00' > "$dst/seed-empty"

# state_file: valid files (v4 and v6, NO_PORT_MAP, refcounts), an empty table, a foreign
# version and a torn one.
dst="$here/corpus/state_file"; mkdir -p "$dst"; rm -f "$dst"/seed-*
state_seed() { # name, body lines (without the end line)
    local body; body=$(printf '%s\n' "${@:2}")
    local sum; sum=$(printf '%s\n' "$body" | python3 -c 'import sys
h=0xcbf29ce484222325
for b in sys.stdin.buffer.read(): h=((h^b)*0x100000001b3)&0xffffffffffffffff
print("%016x"%h)')
    local n; n=$(printf '%s\n' "$body" | grep -c '^m ' || true)
    printf '%s\nend %s %s\n' "$body" "$n" "$sum" > "$dst/seed-$1"
}
state_seed v4v6 'iwpmd-state 1' 'host node1' 'boot 0f1e2d3c-aaaa-bbbb-cccc-000000000001' \
    'm 2 3 p 0.0.0.0:18515 0.0.0.0:40001' 'm 2 1 p 10.0.0.1:4000 10.0.0.1:40002' \
    'm 2 1 n 10.0.0.1:6000 10.0.0.1:6000' 'm 2 2 p [2001:db8::1]:7000 [2001:db8::1]:40003'
state_seed empty 'iwpmd-state 1' 'host node1' 'boot -'
printf 'iwpmd-state 9\nhost x\nboot y\nend 0 0000000000000000\n' > "$dst/seed-version"
head -c 60 "$dst/seed-v4v6" > "$dst/seed-torn"
