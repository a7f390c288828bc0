#!/bin/bash
# Boot the rig kernel + initramfs under QEMU (TCG), run one guest test script
# non-interactively, print the guest console, exit with the guest test's status.
#
# Usage: tests/rig/run-vm.sh [options] GUEST_TEST.sh
#   -n NAME     VM name: guest hostname and results subdir [vm0]
#   -s DIR      host folder shared at /mnt/rig in the guest (9p) [$RIG_CACHE/share]
#               put extra binaries in DIR/bin (first in the guest's PATH);
#               results land in DIR/out/NAME/
#   -T SECS     hard timeout for the whole VM run [300]
#   -m MB       guest memory [1024]     -c N   guest CPUs [1] (kernel has no ACPI: MP-table shows 1)
#   -N SPEC     add virtio NIC eth0 on a loopback socket netdev:
#               listen:PORT | connect:PORT | udp:LOCALPORT:PEERPORT  (all 127.0.0.1)
#   -M MAC      MAC for eth0 [52:54:00:12:34:56]
#   -e KEY=VAL  kernel cmdline rig.KEY=VAL -> guest env RIG_KEY=VAL (repeatable)
#   -K ARG      append ARG to the kernel cmdline as is, e.g. ipv6.disable=1 (repeatable)
#   -k FILE     kernel [see build-kernel.sh]   -i FILE   initramfs [$RIG_CACHE/initramfs.cpio]
#   -l FILE     also save the console log to FILE
# Exit: guest status; 124 = timeout; 125 = no status line (guest crashed).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
HERE="$RIG_DIR"
NAME=vm0; SHARE="$CACHE/share"; TMO=300; MEM=1024; CPUS=1; NET=""; MAC=52:54:00:12:34:56
KERNEL="$(rig_kernel || true)"; INITRD="$INITRD_DEFAULT"; LOG=""; EXTRA_CMD=""
while getopts "n:s:T:m:c:N:M:e:K:k:i:l:h" o; do
  case $o in
    n) NAME=$OPTARG ;; s) SHARE=$OPTARG ;; T) TMO=$OPTARG ;; m) MEM=$OPTARG ;; c) CPUS=$OPTARG ;;
    N) NET=$OPTARG ;; M) MAC=$OPTARG ;; e) EXTRA_CMD+=" rig.$OPTARG" ;; K) EXTRA_CMD+=" $OPTARG" ;; k) KERNEL=$OPTARG ;;
    i) INITRD=$OPTARG ;; l) LOG=$OPTARG ;; *) sed -n '2,21p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND-1))
[ $# -eq 1 ] || { sed -n '2,21p' "$0"; exit 2; }
TEST="$1"
[ -n "$KERNEL" ] && [ -f "$KERNEL" ] || { echo "no kernel: run tests/rig/build-kernel.sh" >&2; exit 2; }
[ -f "$INITRD" ] || "$HERE/mkinitramfs.sh" -o "$INITRD" >&2
command -v qemu-system-x86_64 >/dev/null || { echo "apt-get install qemu-system-x86" >&2; exit 2; }

# The test and its helpers travel through the share, so editing them needs no new initramfs.
mkdir -p "$SHARE/tests" "$SHARE/bin" "$SHARE/out"
# Each file is written beside its final name and renamed into place: the other VM of a
# two-VM run copies the same files into the same share while its guest may already be
# reading them (a guest once sourced a half-written lib.sh: "setup_net: not found").
put() { cp "$1" "$SHARE/tests/.$2.$$" && mv -f "$SHARE/tests/.$2.$$" "$SHARE/tests/$2"; }
for f in "$HERE"/guest/*.sh "$HERE"/guest/*.awk; do put "$f" "$(basename "$f")"; done
put "$TEST" "$NAME.sh"
rm -rf "${SHARE:?}/out/$NAME"

netargs=()
case "$NET" in
  "") ;;
  listen:*)  netargs=(-netdev "socket,id=n0,listen=127.0.0.1:${NET#listen:}") ;;
  connect:*) netargs=(-netdev "socket,id=n0,connect=127.0.0.1:${NET#connect:}") ;;
  udp:*)     p=${NET#udp:}; netargs=(-netdev "socket,id=n0,udp=127.0.0.1:${p#*:},localaddr=127.0.0.1:${p%%:*}") ;;
  *) echo "bad -N $NET" >&2; exit 2 ;;
esac
[ -n "$NET" ] && netargs+=(-device "virtio-net-pci,netdev=n0,mac=$MAC")
# RIG_NET_DUMP=1: QEMU keeps the head of every frame of eth0, both ways, in
# SHARE/out/NAME/eth0.pcap (filter-dump: no third process on the link, so no delay added)
[ -n "$NET" ] && [ -n "${RIG_NET_DUMP:-}" ] && mkdir -p "$SHARE/out/$NAME" &&
  netargs+=(-object "filter-dump,id=d0,netdev=n0,file=$SHARE/out/$NAME/eth0.pcap,maxlen=192")

# Under TCG the guest's TSC is the host's, but the tiny kernel has no HPET/ACPI PM timer
# to calibrate it against and often falls back to 4 ms jiffies; hand it the host's TSC
# rate so timings (cmtime, rping) have microsecond resolution. RIG_TSC=0 disables.
if [ "${RIG_TSC:-1}" = 1 ]; then
  khz=$(awk -F: '/^cpu MHz/{printf "%d", $2*1000; exit}' /proc/cpuinfo)
  [ -n "$khz" ] && [ "$khz" -gt 0 ] && EXTRA_CMD+=" tsc_early_khz=$khz tsc=reliable"
fi
# At boot the kernel checks that the timer interrupt arrives through the IO-APIC within a
# few ticks; on a host busy with other QEMU rigs (load 15 on 2 cores) a TCG guest misses it
# and panics ("IO-APIC + timer doesn't work!"), seen on 2 of 8 two-VM boots in a row.
# no_timer_check skips that calibration test, as virtualised guests commonly do.
EXTRA_CMD+=" no_timer_check"
LOGF="${LOG:-$(mktemp /tmp/rig-console.XXXXXX)}"
set +e
timeout -k 5 "$TMO" qemu-system-x86_64 -accel tcg -machine pc -nodefaults -no-user-config \
  -m "$MEM" -smp "$CPUS" -display none -monitor none -serial stdio -no-reboot \
  -kernel "$KERNEL" -initrd "$INITRD" \
  -append "console=ttyS0 panic=-1 loglevel=4 rig.name=$NAME rig.test=tests/$NAME.sh$EXTRA_CMD" \
  -virtfs "local,path=$SHARE,mount_tag=rig,security_model=none,id=rig" \
  "${netargs[@]}" </dev/null 2>&1 | sed -u 's/\r$//' | tee "$LOGF"
qrc=${PIPESTATUS[0]}
set -e
# What the VM cost the host: its QEMU's user and system CPU time (the shell's children),
# beside its results. The rig's budget is the host's CPU (TCG), and run-all.sh sums these.
# (`times` itself, not in a pipeline: a pipeline's subshell has no children of its own)
mkdir -p "$SHARE/out/$NAME" && times > "$SHARE/out/$NAME/vm-cpu.txt" &&
  sed -i '1d' "$SHARE/out/$NAME/vm-cpu.txt"
st=$(grep -a "^RIG-EXIT-STATUS=" "$LOGF" | tail -1 | cut -d= -f2 || true)
[ -z "$LOG" ] && rm -f "$LOGF"
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then echo "[run-vm] $NAME: TIMEOUT after ${TMO}s" >&2; exit 124; fi
[ -n "$st" ] || { echo "[run-vm] $NAME: no exit status from guest (qemu rc=$qrc)" >&2; exit 125; }
echo "[run-vm] $NAME: guest test exit status $st; results in $SHARE/out/$NAME" >&2
exit "$st"
