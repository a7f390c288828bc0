#!/bin/bash
# Two QEMU guests joined by a QEMU socket netdev on host loopback (127.0.0.1:PORT):
# A (server, 10.77.0.1, listens) and B (client, 10.77.0.2, connects); each runs the
# guest test with its own port mapper daemon. Output lines are prefixed [NAME].
#
# Usage: tests/rig/run-2vm.sh [-p PORT] [-T SECS] [-s SHARE] [-n NAME_A,NAME_B] [-c CPUS] [-w]
#                             [-e KEY=VAL]... [-A KEY=VAL]... [-B KEY=VAL]... [GUEST_TEST]
#   GUEST_TEST defaults to guest/suite-twovm.sh; -e goes to both VMs, -A only to the
#   server, -B only to the client (e.g. -A iwpmd=/mnt/rig/bin/iwpmd-rs: ours serves,
#   the C daemon connects). -n names the VMs (results in SHARE/out/NAME) [vmA,vmB].
#   -T is the hard timeout of each VM [300]; -c the CPUs of each VM [1] (more than one
#   needs a kernel with ACPI, such as the storage kernel). -w puts the wire between them
#   (tools/wire.py: a third host on the link, an on-path attacker the guests drive through
#   the share; its log is SHARE/out/sync-NAME_A-NAME_B/wire.log; with RIG_WIRE_PCAP=1 it
#   also writes every frame's head to wire.pcap there). Exit 0 only if both
#   guests pass.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
HERE="$RIG_DIR"
PORT=47123; TMO=300; CPUS=1; WIRE=0; SHARE="$CACHE/share"; NAMES=vmA,vmB; EXTRA=(); EXTRA_A=(); EXTRA_B=()
while getopts "p:T:s:n:c:e:A:B:wh" o; do
  case $o in p) PORT=$OPTARG ;; T) TMO=$OPTARG ;; c) CPUS=$OPTARG ;; w) WIRE=1 ;; s) SHARE=$OPTARG ;; n) NAMES=$OPTARG ;;
             e) EXTRA+=(-e "$OPTARG") ;; A) EXTRA_A+=(-e "$OPTARG") ;; B) EXTRA_B+=(-e "$OPTARG") ;;
             *) sed -n '2,15p' "$0"; exit 2 ;; esac
done
shift $((OPTIND-1))
TEST="${1:-$HERE/guest/suite-twovm.sh}"
NA=${NAMES%,*}; NB=${NAMES#*,}
# first free loopback port at or above PORT, held with a lock file so two pairs started
# at once never share a link
while :; do
  exec 8> "/tmp/iwpm-rig-2vm-port-$PORT.lock"
  if flock -n 8 && ! ss -ltn 2>/dev/null | grep -q "127.0.0.1:$PORT "; then break; fi
  exec 8>&-; PORT=$((PORT+1))
done
SYNCNAME="sync-$NA-$NB"
mkdir -p "$SHARE/out"; rm -rf "${SHARE:?}/out/$SYNCNAME"
[ -f "$INITRD_DEFAULT" ] || "$HERE/mkinitramfs.sh" || exit 1
RC=$(mktemp -d /tmp/rig-2vm.XXXXXX)

vm() {  # vm NAME NETSPEC MAC ROLE HOSTID PEER
  local own=()
  if [ "$4" = server ]; then own=("${EXTRA_A[@]}"); else own=("${EXTRA_B[@]}"); fi
  "$HERE/run-vm.sh" -n "$1" -s "$SHARE" -T "$TMO" -m 1024 -c "$CPUS" -N "$2" -M "$3" \
     -e role="$4" -e hostid="$5" -e peer="$6" -e sync="$SYNCNAME" "${EXTRA[@]}" "${own[@]}" "$TEST" 2>&1
  echo $? > "$RC/$1"
}
t0=$(date +%s.%N)
vm "$NA" "listen:$PORT" 52:54:00:12:34:0a server 1 10.77.0.2 | sed -u "s/^/[$NA] /" &
for _ in $(seq 100); do ss -ltn | grep -q "127.0.0.1:$PORT " && break; sleep 0.1; done
BPORT=$PORT; WPID=""
if [ $WIRE = 1 ]; then  # B connects to the wire, the wire to A
  mkdir -p "$SHARE/out/$SYNCNAME"
  python3 "$HERE/tools/wire.py" --a-port "$PORT" --port-file "$RC/wire-port" --ctl "$SHARE/out/$SYNCNAME" \
    ${RIG_WIRE_PCAP:+--pcap "$SHARE/out/$SYNCNAME/wire.pcap"} > "$RC/wire.err" 2>&1 & WPID=$!
  for _ in $(seq 100); do [ -s "$RC/wire-port" ] && break; sleep 0.1; done
  BPORT=$(cat "$RC/wire-port" 2>/dev/null || echo "$PORT")
  [ -s "$RC/wire-port" ] || echo "[run-2vm] the wire did not start: $(cat "$RC/wire.err")"
fi
vm "$NB" "connect:$BPORT" 52:54:00:12:34:0b client 2 10.77.0.1 | sed -u "s/^/[$NB] /" &
wait  # (the wire ends when a VM closes its side)
[ -z "$WPID" ] || { kill "$WPID" 2>/dev/null; wait "$WPID" 2>/dev/null; sed "s/^/[wire] /" "$RC/wire.err"; }
ra=$(cat "$RC/$NA" 2>/dev/null || echo 125); rb=$(cat "$RC/$NB" 2>/dev/null || echo 125); rm -rf "$RC"
echo "[run-2vm] $NA status $ra, $NB status $rb, wall $(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1-$2}')s; results in $SHARE/out/$NA $SHARE/out/$NB"
[ "$ra" = 0 ] && [ "$rb" = 0 ]
