#!/bin/bash
# Performance comparison on the real kernel, in one command: the floor responder, the C
# iwpmd and ours (and no daemon), interleaved round by round, a fresh boot for each run.
#
# Usage: tests/rig/compare.sh [--daemon PATH] [--rounds N] [--storm N] [--quick]
#                             [--no-2vm] [--no-profile] [--check]
#   --daemon PATH  our iwpmd (default: cargo build --release -p iwpmd, target/release/iwpmd)
#   --ours-args A  more arguments for ours, comma-separated (e.g. --no-state-file)
#   --rounds N     interleaved rounds per boot [3] (at least 2: the table takes the lower
#                  of the rounds for listen/destroy and the median for cmtime)
#   --storm N      listeners in the listen storm [10000]; the table reports the batch that
#                  ends at 1000 live and the one that ends at N live
#   --quick        --storm 1000 --rounds 2 --no-profile (a smoke run, not figures)
#   --no-2vm       skip the two-VM cmtime boot
#   --no-profile   skip the strace -c pass of each daemon (one-VM boot)
#   --check        exit 1 unless the targets of issue 10 hold (listen at N live and destroy
#                  <= 1.10 x floor, daemon share of a connect <= 0.8 x C's, two-VM <= C)
#   --portmap      port-mapped mode (the rig's patched kernel, siw.port_map=1 in every
#                  guest): real reservations; the floor still maps every address to
#                  itself but binds and closes a socket on each port it hands out, the
#                  least any mapper must do. Results go to compare-pm.{txt,json}
# One VM (guest/suite-compare.sh): per daemon a listen storm (tools/rigcm.c `storm`) and
# cmtime -c 50; two VMs (guest/suite-compare2.sh): cmtime -c 50 across, same daemon on
# both sides. floor = tools/rigtool.c `floor-responder` (answers ADD and QUERY at once,
# mapped = real, keeps nothing). The host's load (uptime) is recorded before and after
# each boot: TCG timings move with it, so final figures come from an idle machine.
# Results: target/rig/compare.txt (table), target/rig/compare.json, target/rig/compare-profile.txt
# (strace -c per daemon), target/rig/compare-share/out/{compare,compare2-A,compare2-B}/
# (raw storm/cmtime outputs). Exit status: 0, or 1 if a run failed (or --check missed).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OURS=""; OURS_ARGS=""; ROUNDS=3; STORM=10000; TWO=1; PROFILE=1; CHECK=0; PM=0
while [ $# -gt 0 ]; do
  case "$1" in
    --daemon) OURS="$2"; shift 2 ;;
    --ours-args) OURS_ARGS="$2"; shift 2 ;;
    --ours-args=*) OURS_ARGS="${1#--ours-args=}"; shift ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --storm) STORM="$2"; shift 2 ;;
    --quick) STORM=1000; ROUNDS=2; PROFILE=0; shift ;;
    --no-2vm) TWO=0; shift ;;
    --no-profile) PROFILE=0; shift ;;
    --check) CHECK=1; shift ;;
    --portmap) PM=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
RES="${CARGO_TARGET_DIR:-$REPO/target}/rig"
SFX=""; [ $PM = 1 ] && SFX="-pm"
SHARE="$RES/compare-share$SFX"
PMK=(); [ $PM = 1 ] && PMK=(-e portmap=1)
mkdir -p "$RES"
# never beside a run-all.sh of the same checkout: both would measure each other's load
exec 9> "$RES/.lock"
flock -n 9 || { echo "[compare] waiting for another rig run on $RES" >&2; flock -w 1800 9 || exit 1; }
T0=$(date +%s)
rm -rf "$SHARE/out"; mkdir -p "$SHARE/bin" "$SHARE/out"

KERNEL=$("$RIG_DIR/build-kernel.sh" | tail -1) || { echo "[compare] no kernel" >&2; exit 1; }
export RIG_KERNEL="$KERNEL"
"$RIG_DIR/mkinitramfs.sh" >&2 || { echo "[compare] initramfs failed" >&2; exit 1; }
if [ -z "$OURS" ]; then
  (cd "$REPO" && CARGO_ENCODED_RUSTFLAGS=$(scripts/release-rustflags) cargo build --release -p iwpmd >&2) || exit 1
  OURS="${CARGO_TARGET_DIR:-$REPO/target}/release/iwpmd"
fi
cp "$OURS" "$SHARE/bin/iwpmd-rs" || exit 1
META="$SHARE/out/meta.txt"
{ echo "ours $OURS $(sha256sum "$OURS" | cut -c1-12) $(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null)"
  echo "kernel $KERNEL"; echo "rounds $ROUNDS"; echo "storm $STORM"; echo "host $(nproc) cpus"
  [ $PM = 1 ] && echo "mode port-mapped (siw.port_map=1)"
  [ -n "$OURS_ARGS" ] && echo "ours-args $OURS_ARGS"; } > "$META"
load() { echo "load $1 $(cut -d' ' -f1-3 /proc/loadavg)" >> "$META"; }
RC=0
# One-VM runs: a fresh boot for every (round, daemon). The kernel slows down with every
# storm it has served in one boot, whichever daemon answered (system time of the floor
# responder: 2.2 s, 4.5 s, 7.0 s over three storms in one boot), so sharing a boot would
# favour the daemon that runs first. Boots are still interleaved round by round, so host
# load drift hits all alike. ~15-25 s per boot at 10k listeners on an idle host.
load before-1vm
t=$(date +%s)
ONE="$SHARE/out/compare"; mkdir -p "$ONE"; : > "$ONE/compare-results.txt"; : > "$ONE/checks.txt"
# one_boot NAME KNOB...: one VM of suite-compare.sh; its results and checks join $ONE
one_boot() {
  local n=$1; shift
  local knobs=(); for k in "$@"; do knobs+=(-e "$k"); done
  "$RIG_DIR/run-vm.sh" -n "$n" -s "$SHARE" -T $((300 + STORM / 15)) -m 2048 -l "$RES/console-$n.log" \
    -e storm="$STORM" -e ours_args="$OURS_ARGS" "${PMK[@]}" "${knobs[@]}" "$RIG_DIR/guest/suite-compare.sh" > /dev/null 2>&1 || RC=1
  cat "$SHARE/out/$n/compare-results.txt" >> "$ONE/compare-results.txt" 2>/dev/null
  sed "s/^/[$n] /" "$SHARE/out/$n/checks.txt" >> "$ONE/checks.txt" 2>/dev/null
  cp "$SHARE/out/$n"/storm-*.txt "$SHARE/out/$n"/cmtime-*.txt "$SHARE/out/$n"/strace-c-*.txt "$ONE/" 2>/dev/null
}
for r in $(seq 1 "$ROUNDS"); do
  for d in floor c ours none; do one_boot "compare-r$r-$d" round="$r" rounds=1 daemons="$d" profile=0; done
done
[ "$PROFILE" = 1 ] && one_boot compare-profile rounds=0 profile=1
echo "secs 1vm $(( $(date +%s) - t ))" >> "$META"
load after-1vm
if [ $TWO = 1 ]; then
  t=$(date +%s)
  "$RIG_DIR/run-2vm.sh" -p 47600 -s "$SHARE" -T $((300 + ROUNDS * 120)) -n compare2-A,compare2-B -e rounds="$ROUNDS" -e ours_args="$OURS_ARGS" "${PMK[@]}" \
    "$RIG_DIR/guest/suite-compare2.sh" > "$RES/console-compare2.log" 2>&1 || RC=1
  echo "secs 2vm $(( $(date +%s) - t ))" >> "$META"
  load after-2vm
fi
grep -h 'FAIL' "$ONE/checks.txt" >&2
for r in compare2-A compare2-B; do
  f="$SHARE/out/$r/checks.txt"; [ -f "$f" ] || continue
  grep '^FAIL' "$f" | sed "s/^/[$r] /" >&2
done
# syscall profile: a summary line per daemon (calls per kernel-side operation: the storm's
# 1000 ADD + 1000 REMOVE and cmtime's 50 QUERY + 50 REMOVE), then strace's tables
PROF="$RES/compare-profile$SFX.txt"; : > "$PROF"
if ls "$SHARE"/out/compare/strace-c-*.txt > /dev/null 2>&1; then
  echo "strace -f -c of each daemon over a 1000-listener storm + cmtime -c 50 (one VM, 2100 kernel requests)" >> "$PROF"
  for f in "$SHARE"/out/compare/strace-c-*.txt; do
    l=$(basename "$f" .txt); l=${l#strace-c-}
    awk -v l="$l" '$NF=="total" {t=$4} $NF ~ /^(recvfrom|recvmsg|sendto|sendmsg|epoll_wait|pselect6|select|poll|ppoll|getpid|futex)$/ {n[$NF]=$4}
      END { s=""; for (k in n) s=s sprintf(" %s=%d", k, n[k])
            printf "  %-6s %6d syscalls, %.2f per kernel request;%s\n", l, t, t/2100, s }' "$f" >> "$PROF"
  done
  echo >> "$PROF"
  for f in "$SHARE"/out/compare/strace-c-*.txt; do
    l=$(basename "$f" .txt); l=${l#strace-c-}
    { echo "== $l"; cat "$f"; echo; } >> "$PROF"
  done
fi
args=(--meta "$META" --one "$SHARE/out/compare" --text "$RES/compare$SFX.txt" --json "$RES/compare$SFX.json")
[ $TWO = 1 ] && args+=(--two "$SHARE/out/compare2-B")
[ $CHECK = 1 ] && args+=(--check)
python3 "$RIG_DIR/compare-table.py" "${args[@]}" || RC=1
echo "[compare] wall $(( $(date +%s) - T0 ))s; $RES/compare$SFX.txt, compare$SFX.json, compare-profile$SFX.txt" >&2
exit $RC
