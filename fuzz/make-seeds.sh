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
