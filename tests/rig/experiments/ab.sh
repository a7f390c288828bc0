#!/bin/bash
# A/B comparison of daemon builds on the listen storm: fresh boots of the floor responder
# and of each given iwpmd, interleaved round by round (as compare.sh does for floor, C and
# ours), so that two builds can be compared within one run.
#
# Usage: tests/rig/experiments/ab.sh ROUNDS IWPMD... [-- KNOB=VAL...]
#   ROUNDS   interleaved rounds (3 is what the figures in the READMEs used)
#   IWPMD    daemon binaries (or executable wrappers that exec one from /mnt/rig/bin with
#            more arguments); each is copied to the share as bin/ab-N
#   KNOB     more knobs of guest/suite-compare.sh (storm=10000 and cmtime=50 by default)
# Prints one line per boot: the suite's figures (listen_top, destroy_med, listen_us_per_op,
# CPU...), label floor or ab-N. Raw outputs: target/rig/ab-share/out/.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/../common.sh"
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
ROUNDS=$1; shift
BINS=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do BINS+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
KNOBS=(-e storm=10000 -e cmtime=50); for k in "$@"; do KNOBS+=(-e "$k"); done
RES="${CARGO_TARGET_DIR:-$REPO/target}/rig"; SHARE="$RES/ab-share"
rm -rf "$SHARE/out"; mkdir -p "$SHARE/bin" "$SHARE/out"
labels=(floor)
for i in "${!BINS[@]}"; do cp "${BINS[$i]}" "$SHARE/bin/ab-$i"; labels+=("ab-$i"); done
export RIG_KERNEL; RIG_KERNEL=$("$RIG_DIR/build-kernel.sh" | tail -1)
"$RIG_DIR/mkinitramfs.sh" >&2
for r in $(seq 1 "$ROUNDS"); do
  for l in "${labels[@]}"; do
    if [ "$l" = floor ]; then k=(-e daemons=floor); else k=(-e daemons=ours -e ours=/mnt/rig/bin/$l); fi
    n="ab-r$r-$l"
    "$RIG_DIR/run-vm.sh" -n "$n" -s "$SHARE" -T 900 -m 2048 -l "$RES/console-$n.log" \
      -e round="$r" -e rounds=1 -e profile=0 "${KNOBS[@]}" "${k[@]}" \
      "$RIG_DIR/guest/suite-compare.sh" > /dev/null 2>&1 || echo "$n: run failed" >&2
    echo "$n $(awk '{printf "%s=%s ", $3, $4}' "$SHARE/out/$n/compare-results.txt" 2>/dev/null)"
  done
done
