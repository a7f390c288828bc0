#!/bin/sh
# Suite "abi": the kernel and the daemon agree on iwpm ABI 4.
#   rig.abi_order=before (default): the daemon starts on a fresh kernel, before any
#       RDMA connection (boot-time start, as with the systemd unit).
#   rig.abi_order=after: first a connection with no daemon at all (the kernel marks
#       the port mapper unavailable), then the daemon starts and must revive it.
# Evidence: the daemon's HELLO(4) and the kernel's HELLO reply with ABI_VERSION=4 in the
# trace, MAPINFO and REG_PID replies with ULIB_VER=4, the kernel's ADD/QUERY requests
# carrying the ABI-4-only FLAGS attribute, and the connection going through the daemon.
# Knobs: iwpmd=PATH iwpmd_args=A,B  abi_order=before|after  rping_count=N [10]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
N=${RIG_RPING_COUNT:-10}; ORDER=${RIG_ABI_ORDER:-before}

setup_net
note "kernel $(uname -r); siw0 on $DEV ($IP); daemon $IWPMD $IWPMD_ARGS; daemon started $ORDER the first connection"
start_syslog
if [ "$ORDER" = after ]; then
  dmesg_mark
  check_rping rping-nodaemon "$IP" "$N" nodaemon 7500
  k=$(dmesg_iwpm_since)
  note "kernel with no daemon: $(echo "$k" | tr '\n' '|')"
  check kernel-no-daemon "kernel found no port mapper on the first connection" \
    sh -c "echo '$k' | grep -q 'iwpm_register_pid: Unable to send a nlmsg'"
fi
dmesg_mark
ST="$OUT/iwpmd.strace"
check start "daemon up" start_iwpmd "$ST"
live_pair "$IP" 7501 live; r=$?; sp=$LIVE_SP; cp=$LIVE_CP
check live "a persistent listener :7501 and a client exchanging data" test $r = 0
iwpmd_dump "$OUT/dump-live.txt"
check dump "SIGUSR1: $DUMP_N mappings with a live listener :7501 and client" \
  sh -c "[ $DUMP_N -ge 2 ] && grep -q '$IP:7501(' $OUT/dump-live.txt"
kill $cp $sp 2>/dev/null; wait $cp $sp 2>/dev/null
check_rping rping "$IP" "$N" daemon 7502
check_dmesg dmesg
check stop "daemon exits on SIGTERM" stop_iwpmd

T="$OUT/iwpm-traffic.txt"; decode "$ST" "$T"
note "trace: $(tail -1 "$T")"
grep -v '^#' "$T" | head -12 | sed 's/^/    /' >> "$SUM"
first=$(grep ' nl ' "$T" | head -1)
check hello-first "the daemon's first netlink message is HELLO(ABI_VERSION=4) to the kernel" \
  sh -c "echo '$first' | grep -q ' nl send dst=0 IWCM HELLO hseq=[0-9]* hpid=$IWPMD_PORTID .*ABI_VERSION=4$'"
detail "$first"
check hello-reply "the kernel answered HELLO with ABI_VERSION=4" grep -q ' nl recv src=[0?] IWCM HELLO .*ABI_VERSION=4$' "$T"
detail "$(grep ' IWCM HELLO ' "$T")"
check mapinfo "MAPINFO request after the HELLO reply: ULIB_NAME=iWarpPortMapperUser ULIB_VER=4" \
  sh -c "awk '/ nl recv src=[0?] IWCM HELLO /{h=1} h && / nl send dst=0 IWCM MAPINFO .*ULIB_NAME=iWarpPortMapperUser ULIB_VER=4/{f=1} END{exit !f}' $T"
check regpid "REG_PID answered with ULIB_VER=4 PID_ERR=0 and the device name echoed" \
  sh -c "grep -q ' nl recv src=[0?] IWCM REG_PID .*IBDEV_NAME=siw0 ' $T && grep -q ' nl send dst=0 IWCM REG_PID .*IBDEV_NAME=siw0 ULIB_NAME=iWarpPortMapperUser ULIB_VER=4 PID_ERR=0' $T"
nflags=$(grep -c -E ' nl recv src=[0?] IWCM (ADD|QUERY)_MAPPING .* FLAGS=1' "$T"); nreq=$(cnt "$T" ' nl recv src=[0?] IWCM (ADD|QUERY)_MAPPING ')
check flags "kernel sent $nreq ADD/QUERY requests, all with the ABI-4 FLAGS attribute (NO_PORT_MAP)" \
  sh -c "[ $nreq -ge 4 ] && [ $nflags = $nreq ]"
peer_check "$T" both 4; r=$?
check trace-peer "$PEER_HANDLES associations through the daemon, each with REQUEST/ACCEPT/ACK" test $r = 0
detail "$PEER_BAD"
u=$(unanswered "$T"); check trace-answered "every kernel request answered with SEQ = request seq" test -z "$u"; detail "$u"
e=$(reply_errors "$T"); check trace-noerr "no error replies / HANDLE_ERR" test -z "$e"; detail "$e"
w=$(hpid_wrong "$T" "$IWPMD_PORTID"); check trace-hpid "every daemon message has nlmsg_pid = its port id $IWPMD_PORTID" test -z "$w"; detail "$w"
cat "$SUM"
finish
