#!/usr/bin/env bash
# Rebuilds the committed seed corpora from the golden vectors (hex files with '#' comments)
# and the shipped/packaged config examples, and the core_sequence seeds from the scenarios in
# crates/iwpm-core/tests/core_sequence.rs. Run from anywhere; output is deterministic.
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
# core_sequence: hand-written scenarios, encoded by the driver's own encoder.
cargo test -q --manifest-path "$here/../Cargo.toml" -p iwpm-core --test core_sequence \
    -- --ignored --exact write_seeds >/dev/null
# control_frame: one length-prefixed JSON frame per seed (requests, a response, edge cases).
dst="$here/corpus/control_frame"; mkdir -p "$dst"; rm -f "$dst"/seed-*
frame() { local n=${#2}; { printf "\\x$(printf %02x $((n >> 24 & 255)))\\x$(printf %02x $((n >> 16 & 255)))\\x$(printf %02x $((n >> 8 & 255)))\\x$(printf %02x $((n & 255)))"; printf '%s' "$2"; } > "$dst/seed-$1"; }
frame status '{"version":1,"command":{"cmd":"status"}}'
frame list '{"version":1,"command":{"cmd":"list"}}'
frame peers '{"version":1,"command":{"cmd":"peers"}}'
frame metrics '{"version":1,"command":{"cmd":"metrics"}}'
frame dump '{"version":1,"command":{"cmd":"dump"}}'
frame log-level '{"version":1,"command":{"cmd":"log-level","set":"info,iwpm_core=debug"}}'
frame probe '{"version":1,"command":{"cmd":"probe","host":"fe80::1","timeout_ms":1500}}'
frame version-2 '{"version":2,"command":{"cmd":"teleport"}}'
frame response '{"version":1,"result":{"error":{"kind":"busy","message":"16 control clients"}}}'
frame probe-reply '{"version":1,"result":{"ok":{"kind":"probe","target":"192.0.2.1:3935","local":"192.0.2.2","reachable":true,"answer":"rejected","elapsed_us":312,"requests":1}}}'
printf '\xff\xff\xff\xff{' > "$dst/seed-oversized"
printf '\x00\x00\x00\x00' > "$dst/seed-empty"
