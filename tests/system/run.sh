#!/bin/bash
# The system test: our .deb on a real Debian 12 (systemd 252) and Debian 13 (systemd 257),
# each booted under QEMU (TCG) with systemd as PID 1, udev and rdma-core, on the rig's 6.1
# kernel with the port-map patches and what systemd needs (kernel/systemd-guest.config).
# The guest test (guest/guest-test.sh) runs in two boots per release; see its header for
# the checks.
#
# Usage: tests/system/run.sh [--release bookworm|trixie|all] [--deb FILE] [--unit FILE]
#   --release   which Debian release(s) [all]
#   --deb       the package to test [built by scripts/check-packaging, the project's
#               packaging path, into target/check-packaging/]
#   --unit      put FILE in /etc/systemd/system/iwpmd.service after the install (self-test:
#               an older unit must make the FD-store check fail)
# Env: SYSTEM_CACHE [/var/cache/iwpm-system] (root images, kernel build, runs);
#      SYSTEM_KERNEL (an explicit kernel image); SYSTEM_BOOT_TIMEOUT [480] (seconds per boot).
# Results: target/system/<release>/results.txt (PASS/FAIL lines), phase logs, journals;
# target/system/summary.txt. Exit 0 only if every check passed on every release.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SYSTEM_CACHE:-/var/cache/iwpm-system}"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
RESULTS="$TARGET/system"
RELEASES="bookworm trixie"; DEB=""; UNIT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --release) [ "$2" = all ] || RELEASES="$2"; shift 2 ;;
        --deb) DEB="$2"; shift 2 ;;
        --unit) UNIT="$(realpath "$2")"; shift 2 ;;
        *) sed -n '2,18p' "$0"; exit 2 ;;
    esac
done
t_start=$(date +%s)
log() { echo "[system] $*" >&2; }

# ---- the kernel: explicit, the pinned prebuilt one, or the rig's build + our fragment ----
kernel() {
    if [ -n "${SYSTEM_KERNEL:-}" ]; then echo "$SYSTEM_KERNEL"; return; fi
    local shared="$REPO/../shared/rig/systemd-vm/bzImage-sd" key h
    # shellcheck source=../rig/common.sh
    key=$(RIG_PATCHES=1 RIG_KVER=6.1 bash -c ". '$REPO/tests/rig/common.sh'; rig_patch_key")
    if [ -f "$shared" ]; then
        h=$(sha256sum "$shared" | cut -d' ' -f1)
        if grep -v '^#' "$HERE/kernel/prebuilt.txt" | grep -qx "6.1 $h $key"; then echo "$shared"; return; fi
        log "$shared is not pinned in kernel/prebuilt.txt for patch key $key: building"
    fi
    RIG_CACHE="$CACHE/kernel" RIG_NO_SHARED=1 RIG_PATCHES=1 RIG_KVER=6.1 \
        RIG_EXTRA_CONFIG="$HERE/kernel/systemd-guest.config" "$REPO/tests/rig/build-kernel.sh" | tail -1
}
mkdir -p "$CACHE"
KERNEL="$(kernel)"
[ -f "$KERNEL" ] || { log "no kernel"; exit 2; }
log "kernel $KERNEL"

# ---- the package, built by the project's packaging path ----
if [ -z "$DEB" ]; then
    log "building the package: scripts/check-packaging"
    "$REPO/scripts/check-packaging" > "$CACHE/check-packaging.log" 2>&1 ||
        { tail -20 "$CACHE/check-packaging.log" >&2; log "scripts/check-packaging failed"; exit 1; }
    DEB=$(ls -t "$TARGET"/check-packaging/iwpmd-rs_*.deb | head -1)
fi
log "package $DEB"
command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2
gcc -static -O2 -Wall -o "$CACHE/bindprobe" "$HERE/tools/bindprobe.c"

mkdir -p "$RESULTS"
: > "$RESULTS/summary.txt"
status=0
# Under TCG the tiny kernel finds no timer to calibrate the TSC against and falls back to
# jiffies; hand it the host's TSC rate (as the rig does).
khz=$(awk -F: '/^cpu MHz/ { printf "%d", $2 * 1000; exit }' /proc/cpuinfo)
clock="tsc=reliable no_timer_check"
[ -z "$khz" ] || [ "$khz" -le 0 ] || clock="tsc_early_khz=$khz $clock"

# The root images first, one at a time (mmdebstrap on a fresh machine); then each release
# boots in its own QEMU, side by side: each guest has one vCPU, and on 2 host cores the two
# releases take about as long together as the slower one alone (was 419 s one after the
# other, 181 s and 200 s of boots).
declare -A IMG T_IMG
for rel in $RELEASES; do
    t0=$(date +%s)
    IMG[$rel]=$("$HERE/mkrootfs.sh" "$rel" | tail -1)
    T_IMG[$rel]=$(( $(date +%s) - t0 ))
done

run_release() {
    local rel=$1 t0 img run share out boots boot b0 qrc pass fail
    t0=$(date +%s)
    img=${IMG[$rel]}
    run="$CACHE/run-$rel"; share="$run/share"; out="$RESULTS/$rel"
    rm -rf "$run" "$out"; mkdir -p "$share/out"
    cp "$HERE/guest/guest-test.sh" "$share/"
    cp "$DEB" "$share/iwpmd-rs.deb"
    cp "$CACHE/bindprobe" "$share/"
    [ -z "$UNIT" ] || cp "$UNIT" "$share/unit-override.service"
    qemu-img create -q -f qcow2 -b "$img" -F raw "$run/disk.qcow2"
    boots=""
    for boot in 1 2 3; do
        b0=$(date +%s)
        set +e
        timeout -k 5 "${SYSTEM_BOOT_TIMEOUT:-480}" qemu-system-x86_64 -accel tcg -machine pc \
            -nodefaults -no-user-config -m 1536 -smp 1 -display none -monitor none -serial stdio \
            -no-reboot -kernel "$KERNEL" \
            -append "console=ttyS0 root=/dev/vda rw rootfstype=ext4 panic=-1 loglevel=6 systemd.show_status=0 $clock" \
            -drive "file=$run/disk.qcow2,format=qcow2,if=virtio,cache=unsafe" \
            -device virtio-rng-pci \
            -virtfs "local,path=$share,mount_tag=share,security_model=none,id=share" \
            </dev/null > "$share/out/console-boot$boot.log" 2>&1
        qrc=$?
        set -e
        boots+="boot $boot $(( $(date +%s) - b0 )) s; "
        if [ $qrc = 124 ]; then echo "FAIL boot$boot: no power-off within ${SYSTEM_BOOT_TIMEOUT:-480} s" >> "$share/out/results.txt"; break; fi
        grep -q '^DONE phase 2' "$share/out/results.txt" 2>/dev/null && break
        grep -q "^DONE phase $boot" "$share/out/results.txt" 2>/dev/null ||
            { echo "FAIL boot$boot: the guest test did not finish phase $boot" >> "$share/out/results.txt"; break; }
    done
    cp -r "$share/out" "$out"
    grep -q '^DONE phase 2' "$out/results.txt" || echo "FAIL phases: phase 2 never finished" >> "$out/results.txt"
    pass=$(grep -c '^PASS' "$out/results.txt" || true); fail=$(grep -c '^FAIL' "$out/results.txt" || true)
    {
        echo "== $rel: $pass passed, $fail failed; image ${T_IMG[$rel]} s, $boots total $(( $(date +%s) - t0 )) s"
        grep -E '^(PASS|FAIL|NOTE)' "$out/results.txt"
    } > "$RESULTS/$rel.summary"
    [ "$fail" = 0 ]
}

rm -f "$RESULTS"/*.summary "$RESULTS"/*.log
pids=()
for rel in $RELEASES; do
    run_release "$rel" > "$RESULTS/$rel.log" 2>&1 &
    pids+=("$!")
done
i=0
for rel in $RELEASES; do
    wait "${pids[$i]}" || status=1
    i=$((i + 1))
    cat "$RESULTS/$rel.log" >&2
    if [ -f "$RESULTS/$rel.summary" ]; then
        tee -a "$RESULTS/summary.txt" < "$RESULTS/$rel.summary"
    else
        echo "== $rel: FAIL: the run ended before its summary (see $RESULTS/$rel.log)" | tee -a "$RESULTS/summary.txt"
        status=1
    fi
done
echo "system test: $(grep -c '^PASS' "$RESULTS/summary.txt" || true) passed, $(grep -c '^FAIL' "$RESULTS/summary.txt" || true) failed, wall $(( $(date +%s) - t_start )) s" | tee -a "$RESULTS/summary.txt"
exit $status
