#!/bin/bash
# Does the kernel patch kernel/iwpm-remote-info-bound-$RIG_KVER.patch bound the iwpm
# REMOTE_INFO table? Boots the stock rig kernel and the patched one with
# remote-info-bound-guest.sh (C iwpmd, a listener, a flood of forged REQUESTs) and prints
# the unreclaimable slab figures side by side. See docs/kernel/remote-info-bound.md.
#
# Usage: tests/rig/experiments/remote-info-bound.sh [-n COUNT] [-r RATE] [-w WAIT] [-b]
#                                                  [stock|patched|both]
#   -n COUNT  forged REQUESTs per boot [40000]     -r RATE  per second [1000]
#   -w WAIT   seconds sampled after the flood [30] -b       only build the patched kernel
# The patched kernel: the Debian linux-source-$RIG_KVER tarball extracted to
# $RIG_CACHE/linux-source-$RIG_KVER-iwpmbound, the patch applied (a changed patch is
# reverted and the new one applied, so the rebuild is incremental), built into
# $RIG_CACHE/kbuild[-$RIG_KVER]-iwpmbound with the rig's configuration (tinyconfig +
# kernel/siw-rig.config [+ kernel/siw-rig-$RIG_KVER.config]), image
# $RIG_CACHE/bzImage[-$RIG_KVER]-iwpmbound (reused while source, fragment and patch are
# unchanged). The stock kernel: whatever build-kernel.sh picks (the shared prebuilt one).
# Results: target/rig-experiments/remote-info-bound/$RIG_KVER/<label>/ (console log,
# share/out) and table.txt there.
# Env: RIG_CACHE [/var/cache/iwpm-rig-kernelpatch, not the rig's own cache], RIG_KVER
# [6.1], JOBS [2], RIG_KERNEL_PATCHED (an image to use instead of building one).
set -euo pipefail
export RIG_CACHE="${RIG_CACHE:-/var/cache/iwpm-rig-kernelpatch}"
EXP="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$EXP/../common.sh"
JOBS="${JOBS:-2}"
COUNT=40000; RATE=1000; WAIT=30; BUILD_ONLY=0
while getopts "n:r:w:bh" o; do
  case $o in
    n) COUNT=$OPTARG ;; r) RATE=$OPTARG ;; w) WAIT=$OPTARG ;; b) BUILD_ONLY=1 ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND-1))
WHICH="${1:-both}"
rig_kver_ok || { echo "unknown RIG_KVER=$RIG_KVER" >&2; exit 2; }
PATCH="$RIG_DIR/kernel/iwpm-remote-info-bound-$RIG_KVER.patch"
sfx=""; [ "$RIG_KVER" = 6.1 ] || sfx="-$RIG_KVER"
SRC="$CACHE/linux-source-$RIG_KVER-iwpmbound"
OBJ="$CACHE/kbuild$sfx-iwpmbound"
IMG="$CACHE/bzImage$sfx-iwpmbound"
FRAG="$RIG_DIR/kernel/siw-rig.config"; OVERLAY="$(rig_overlay)"
say() { echo "[remote-info-bound] $*" >&2; }
# the code part of a patch (from its first diff line, without index lines): editing the
# commit message neither rebuilds nor re-applies
patch_code() { sed -n '/^diff --git /,$p' "$1" | grep -v '^index '; }

build_patched() {
  local tarball srcver want t0
  for p in linux-source-$RIG_KVER build-essential flex bison bc libelf-dev libssl-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      { say "installing $p"; DEBIAN_FRONTEND=noninteractive apt-get install -y "$p" >&2; }
  done
  tarball="/usr/src/linux-source-$RIG_KVER.tar.xz"
  srcver="$(dpkg-query -W -f='${Version}' linux-source-$RIG_KVER)"
  want="$srcver $({ rig_frag_key "$FRAG"; [ -z "$OVERLAY" ] || rig_frag_key "$OVERLAY"; } | sha256sum | cut -c1-16) $(patch_code "$PATCH" | sha256sum | cut -c1-16)"
  if [ -f "$IMG" ] && [ "$(cat "$IMG.stamp" 2>/dev/null)" = "$want" ]; then
    say "$IMG up to date"; return 0
  fi
  mkdir -p "$CACHE"
  if [ "$(cat "$SRC/.rig-srcver" 2>/dev/null)" != "$srcver" ]; then
    say "extracting $tarball ($srcver) to $SRC"
    rm -rf "$SRC" "$OBJ" "$CACHE/extract.tmp"; mkdir -p "$CACHE/extract.tmp"
    tar -C "$CACHE/extract.tmp" -xf "$tarball"
    mv "$CACHE/extract.tmp/linux-source-$RIG_KVER" "$SRC"; rmdir "$CACHE/extract.tmp"
    echo "$srcver" > "$SRC/.rig-srcver"
  fi
  cd "$SRC"
  if [ -f .rig-patch ] && [ "$(patch_code .rig-patch)" != "$(patch_code "$PATCH")" ]; then
    say "reverting the previously applied patch"; patch -p1 -R -s < .rig-patch; rm -f .rig-patch
  fi
  if [ ! -f .rig-patch ]; then
    say "applying $(basename "$PATCH")"; patch -p1 -s --no-backup-if-mismatch < "$PATCH"; cp "$PATCH" .rig-patch
  fi
  export ARCH=x86_64
  local fkey; fkey="$({ rig_frag_key "$FRAG"; [ -z "$OVERLAY" ] || rig_frag_key "$OVERLAY"; } | sha256sum)"
  if [ ! -f "$OBJ/.config" ] || [ "$(cat "$OBJ/.rig-frag" 2>/dev/null)" != "$fkey" ]; then
    mkdir -p "$OBJ"
    make O="$OBJ" -s tinyconfig >&2
    scripts/kconfig/merge_config.sh -m -O "$OBJ" "$OBJ/.config" "$FRAG" $OVERLAY >/dev/null
    make O="$OBJ" -s olddefconfig >&2
    while IFS= read -r line; do
      case "$line" in CONFIG_*=y) grep -qx "$line" "$OBJ/.config" || { say "NOT SET: $line"; exit 1; } ;; esac
    done < <(cat "$FRAG" $OVERLAY)
    echo "$fkey" > "$OBJ/.rig-frag"
  fi
  say "building bzImage with -j$JOBS in $OBJ ..."
  t0=$(date +%s)
  nice make O="$OBJ" -j"$JOBS" bzImage >&2
  cp "$OBJ/arch/x86/boot/bzImage" "$IMG"; echo "$want" > "$IMG.stamp"
  say "built in $(( $(date +%s) - t0 )) s: $IMG"
  cd - >/dev/null
}

if [ -n "${RIG_KERNEL_PATCHED:-}" ]; then IMG=$RIG_KERNEL_PATCHED
elif [ "$WHICH" != stock ]; then build_patched; fi
[ $BUILD_ONLY = 1 ] && { echo "$IMG"; exit 0; }
STOCK="$("$RIG_DIR/build-kernel.sh" | tail -1)"

TOP="$REPO/target/rig-experiments/remote-info-bound/$RIG_KVER"
run_one() {  # run_one LABEL KERNEL
  local out="$TOP/$1" rc=0
  rm -rf "$out"; mkdir -p "$out/share/bin"
  say "$1: booting $2"
  "$RIG_DIR/run-vm.sh" -n "rib-$1" -s "$out/share" -T $((WAIT + COUNT / RATE + 400)) -m 1024 \
    -k "$2" -l "$out/console.log" -e count="$COUNT" -e rate="$RATE" -e wait="$WAIT" \
    "$EXP/remote-info-bound-guest.sh" > /dev/null || rc=$?
  cp "$out/share/out/rib-$1/rib-results.txt" "$out/share/out/rib-$1/rib-samples.txt" "$out/" 2>/dev/null || true
  say "$1: guest status $rc; results in $out"
}
labels=""
case "$WHICH" in
  stock) run_one stock "$STOCK"; labels=stock ;;
  patched) run_one patched "$IMG"; labels=patched ;;
  both) run_one stock "$STOCK"; run_one patched "$IMG"; labels="stock patched" ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac

# ---- side by side --------------------------------------------------------------------
val() { awk -v k="$2" '$1==k {sub(/^[^ ]* /, ""); print; exit}' "$TOP/$1/rib-results.txt" 2>/dev/null; }
{
  echo "REMOTE_INFO table: $COUNT forged REQUESTs at ${RATE}/s through the C iwpmd (kernel series $RIG_KVER)"
  printf '%-44s' ""; for l in $labels; do printf ' %22s' "$l"; done; echo
  for k in flood udp_read_by_daemon udp_rcvbuf_drops sunr_before_kb sunr_growth_kb k512_growth sunr_left_kb k512_left \
           dup_requests dup_remote_infos dup_k512_growth dup_sunr_growth_kb conns conn_failed conn_total_s \
           conn_remote_infos conn_k512_growth conn_sunr_growth_kb \
           rping_during kernel_iwpm_lines daemon_alive_after_flood; do
    printf '%-44s' "$k"; for l in $labels; do printf ' %22s' "$(val "$l" "$k")"; done; echo
  done
  for l in $labels; do
    echo "$l: samples (s after the flood, SUnreclaim kB, kmalloc-512 objects): $(tr '\n' ';' < "$TOP/$l/rib-samples.txt" 2>/dev/null)"
    echo "$l checks: $(grep -c '^PASS' "$TOP/$l/share/out/rib-$l/checks.txt" 2>/dev/null || true) PASS, $(grep -c '^FAIL' "$TOP/$l/share/out/rib-$l/checks.txt" 2>/dev/null || true) FAIL"
    { grep -h . "$TOP/$l/share/out/rib-$l/kernel-iwpm.txt" 2>/dev/null || true; } | head -3 | sed "s/^/$l kernel: /"
  done
  # What the patch promises. kmalloc-512 counts move in whole slabs: 16 objects of slack
  # per figure, 64 for the table at its cap of 1024. Without /proc/slabinfo (6.12 rig
  # configuration) the table checks use SUnreclaim: the cap's 512 KiB plus the flood's
  # other allocations (socket buffers, ~256 kB on both kernels), and the small phases
  # are not judged (50 entries are within SUnreclaim's noise).
  if [ -f "$TOP/patched/rib-results.txt" ]; then
    v() { if [ "$2" = 1 ]; then echo "patched: PASS $1"; else echo "patched: FAIL $1"; fi; }
    num() { case "$1" in ''|n/a|*[!0-9-]*) return 1 ;; esac; }
    g=$(val patched k512_growth); left=$(val patched k512_left); dg=$(val patched dup_k512_growth)
    cg=$(val patched conn_k512_growth); cf=$(val patched conn_failed)
    sg=$(val patched sunr_growth_kb); sl=$(val patched sunr_left_kb)
    if num "$g"; then
      v "table bounded: kmalloc-512 +$g <= 1088" "$([ "$g" -le 1088 ] && echo 1)"
      v "entries expired: +$left objects left after ${WAIT}s <= 128" "$([ "$left" -le 128 ] && echo 1)"
      v "duplicates replaced: +$dg objects for 200 same-key REMOTE_INFOs <= 16" "$([ "$dg" -le 16 ] && echo 1)"
      v "entries consumed: +$cg objects after the rpings <= 16, ${cf:-?} failed" "$([ "$cg" -le 16 ] && [ "${cf:-1}" = 0 ] && echo 1)"
    else
      v "table bounded: SUnreclaim +${sg:-?} kB <= 1024 kB" "$([ "${sg:-99999}" -le 1024 ] && echo 1)"
      v "entries expired: SUnreclaim +${sl:-?} kB left after ${WAIT}s <= 256 kB" "$([ "${sl:-99999}" -le 256 ] && echo 1)"
      v "rpings connected: ${cf:-?} of 50 failed (no /proc/slabinfo: duplicates and consumption not measured)" "$([ "${cf:-1}" = 0 ] && echo 1)"
    fi
  fi
} | tee "$TOP/table.txt"
