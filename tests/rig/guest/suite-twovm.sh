#!/bin/sh
# Suite "twovm" (run by ../run-2vm.sh): two VMs, siw on each virtio NIC eth0
# (10.77.0.<hostid>/24, NICs joined by a QEMU socket netdev on host 127.0.0.1), each with
# its own daemon (rig.iwpmd per side), both traced. Server = passive side, client =
# active side. rping, a live connection with SIGUSR1 dumps, and cmtime go across, so the
# daemons run the full UDP exchange: client REQUEST -> server :3935, server ACCEPT +
# REMOTE_INFO to its kernel, client QUERY reply to its kernel + ACK. Each side checks its
# own trace, then the peer's half against its own (same association handles).
# Knobs: role=server|client hostid=1|2 peer=ADDR sync=DIR (set by run-2vm.sh),
#        iwpmd=PATH|none iwpmd_args=A,B  rping_count=N [10]  cmtime=N [50]
#        trace=0|1 [1]: 0 = timing run: daemons not traced, only rping/dump/cmtime checks
#        (trace=1 adds the peer-address phase: the peer the passive kernel reports for
#        connections to a specific, a wildcard and an IPv6 listener)
#        (iwpmd=none: no daemon at all, the kernel connects unmapped)
#        timing=LIST: after the traced checks, cmtime across once per label with the
#        daemons untraced ("none": with no daemon; any other label: this side's daemon)
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
ROLE=${RIG_ROLE:?rig.role=server|client}; PEER=${RIG_PEER:?rig.peer=ADDR}
N=${RIG_RPING_COUNT:-10}; CM=${RIG_CMTIME:-50}
if [ "$ROLE" = server ]; then OTHER=client; else OTHER=server; fi
# IPv6 for the peer-address phase: fd00:77::HOSTID on each side's NIC
IP6="fd00:77::${RIG_HOSTID:-1}/64"; PEER6="fd00:77::$(echo "$PEER" | sed 's/.*\.//')"

setup_net
note "kernel $(uname -r); role $ROLE; siw0 on $DEV ($IP); peer $PEER; daemon $IWPMD $IWPMD_ARGS"
start_syslog
dmesg_mark
TRACE=${RIG_TRACE:-1}; NODAEMON=0; [ "$IWPMD" = none ] && { NODAEMON=1; TRACE=0; }
ST=""; [ "$TRACE" = 1 ] && ST="$OUT/iwpmd.strace"
[ $NODAEMON = 1 ] || check start "daemon up" start_iwpmd "$ST"
[ $NODAEMON = 1 ] || keyed_check
echo "$IWPMD $IWPMD_ARGS" > "$SYNC/$ROLE.daemon" 2>/dev/null || { mkdir -p "$SYNC"; echo "$IWPMD $IWPMD_ARGS" > "$SYNC/$ROLE.daemon"; }
flag "$ROLE.up"; wait_flag "$OTHER.up" 120
check ping "ICMP ping $PEER" sh -c "ping -c 2 -W 5 $PEER > $OUT/ping.txt 2>&1"
note "peer daemon: $(cat "$SYNC/$OTHER.daemon" 2>/dev/null)"

if [ "$ROLE" = server ]; then
  # (rping_servers/rping_client in lib.sh: up to DATA_TRIES, 4, past siw's accept race)
  rping_servers 7600
  check rping-server "rping server -C $N: $rping_lines ping lines (rc $rping_rc)" test "$rping_lines" = "$N"
  rping -s -P -a "$IP" -p 7601 > "$OUT/rping-live-server.log" 2>&1 & sp=$!
  wait_listen 7601; flag live.listening; wait_flag live.connected 120
  iwpmd_dump "$OUT/dump-live.txt"
  [ $NODAEMON = 1 ] || check dump "SIGUSR1 on the passive side: $DUMP_N mappings, incl. listener $IP:7601" \
    sh -c "[ $DUMP_N -ge 1 ] && grep -q '$IP:7601(' $OUT/dump-live.txt"
  flag live.dumped; wait_flag live.done 120; kill $sp; wait $sp 2>/dev/null
  cmtime -b "$IP" -c "$CM" > "$OUT/cmtime-server.log" 2>&1 & sp=$!
  flag cmtime.listening; wait_flag cmtime.done 300; sleep 1; kill $sp 2>/dev/null; wait $sp 2>/dev/null
  if [ "$TRACE" = 1 ]; then
    # The peer the kernel reports for an incoming connection (rdma_get_peer_addr, what
    # `rdma res show cm_id` lists as dst-addr): a specific, a wildcard and an IPv6
    # listener, each connected from a known source port. With siw (NO_PORT_MAP) ours sends
    # no REMOTE_INFO, C sends one each: the reported peer must be the client's own address.
    ip -6 addr add "$IP6" dev "$DEV" nodad
    rigcm serve "$IP" 7610 1 60 > "$OUT/serve-specific.log" 2>&1 & s1=$!
    rigcm serve 0.0.0.0 7611 1 60 > "$OUT/serve-wildcard.log" 2>&1 & s2=$!
    rigcm serve "${IP6%/*}" 7612 1 60 > "$OUT/serve-v6.log" 2>&1 & s3=$!
    wait_listen 7610; wait_listen 7611; wait_listen 7612; sleep 0.3
    flag peers.listening; wait_flag peers.connected 120
    rdma res show cm_id > "$OUT/cm-id.txt" 2>&1
    wait_or_kill $s1 10; wait_or_kill $s2 10; wait_or_kill $s3 10; flag peers.done
    for x in "specific $PEER:7650" "wildcard $PEER:7651" "v6 [$PEER6]:7652"; do
      set -- $x
      got=$(sed -n 's/^conn n=1 peer=\([^ ]*\) .*/\1/p' "$OUT/serve-$1.log")
      check "peer-$1" "$1 listener: the kernel reports the peer ${got:-nothing}, the client's own $2" test "$got" = "$2"
    done
  fi
else
  rping_client 7600
  check rping "rping -C $N -> $PEER (try $rping_try): rc=$rc, $l ping lines in ${t}s" rping_client_ok
  wait_flag live.listening; sleep 1
  live_client 7601
  check live "live rping client to $PEER:7601 exchanging data (try $try)" grep -q 'ping data' "$live_log"
  sleep 0.5
  iwpmd_dump "$OUT/dump-live.txt"
  [ $NODAEMON = 1 ] || check dump "SIGUSR1 on the active side: $DUMP_N mappings, incl. its own $IP:port" \
    sh -c "[ $DUMP_N -ge 1 ] && grep -q 'Local address IPV4 $IP:' $OUT/dump-live.txt"
  flag live.connected; wait_flag live.dumped 60; kill $cp; wait $cp 2>/dev/null; flag live.done
  wait_flag cmtime.listening; sleep 1
  check_cmtime cmtime "$PEER" "$CM" across
  flag cmtime.done
  if [ "$TRACE" = 1 ]; then
    ip -6 addr add "$IP6" dev "$DEV" nodad
    wait_flag peers.listening 120
    for x in "specific $IP:7650 $PEER:7610" "wildcard $IP:7651 $PEER:7611" "v6 [${IP6%/*}]:7652 [$PEER6]:7612"; do
      set -- $x
      rigcm connect "$2" "$3" 30 > "$OUT/connect-$1.log" 2>&1
      check "connect-$1" "$1: connected from $2 to $3 ($(head -1 "$OUT/connect-$1.log"))" grep -q '^connected ' "$OUT/connect-$1.log"
    done
    flag peers.connected; wait_flag peers.done 120
  fi
fi
sed 's/^.*iwpmd[-a-z]*\[[0-9]*\]: /    /' "$OUT/dump-live.txt" | grep -E 'Mapping|address' >> "$SUM"
[ $NODAEMON = 1 ] || check_dmesg dmesg
flag "$ROLE.finished"; wait_flag "$OTHER.finished" 120
[ $NODAEMON = 1 ] || check stop "daemon exits on SIGTERM" stop_iwpmd
if [ "$TRACE" = 0 ]; then cat "$SUM"; finish; fi

T="$OUT/iwpm-traffic.txt"; decode "$ST" "$T"
share_copy "$T" "$ROLE-traffic.txt"
note "trace: $(tail -1 "$T")"
trace_summary "$T"
check trace-hello "HELLO(4) answered with ABI_VERSION=4, MAPINFO sent" \
  sh -c "grep -q ' nl recv src=[0?] IWCM HELLO .*ABI_VERSION=4' $T && grep -q ' nl send dst=0 IWCM MAPINFO .*ULIB_VER=4' $T"
u=$(unanswered "$T"); check trace-answered "every kernel request answered with SEQ = request seq" test -z "$u"; detail "$u"
e=$(reply_errors "$T"); check trace-noerr "no error replies / HANDLE_ERR" test -z "$e"; detail "$e"
if [ "$ROLE" = server ]; then
  peer_check "$T" passive 4; r=$?; nh=$PEER_HANDLES
  check trace-passive "$nh associations: REQUEST from $PEER received, ACCEPT sent back, ACK received" \
    sh -c "[ $r = 0 ] && [ $nh -ge $((CM+2)) ] && grep -q ' udp recv $PEER:[0-9]* REQUEST v4 ' $T"
  detail "$PEER_BAD"
  # (a wildcard listener's REMOTE_INFO names its local address 0.0.0.0)
  nri=$(cnt "$T" " nl send dst=0 IWCM REMOTE_INFO .*LOCAL_ADDR=($IP|0\.0\.0\.0):[0-9]* REMOTE_ADDR=$PEER:[0-9]* .*MAPPING_ERR=0")
  nall=$(cnt "$T" " nl send dst=0 IWCM REMOTE_INFO ")
  if identity_ri; then
    check trace-remote-info "one REMOTE_INFO (local $IP or 0.0.0.0, remote $PEER) per association: $nri for $nh" test "$nri" = "$nh"
  else
    # siw is NO_PORT_MAP: every REQUEST has mapped cp = cp, and ours owes no REMOTE_INFO.
    npm=$(awk '/ udp recv .* REQUEST / { cp = $0; sub(/.* cp=/, "", cp); sub(/ .*/, "", cp); m = $0
                 if (!sub(/.* mcp=/, "", m)) next; sub(/ .*/, "", m); sub(/.*:/, "", cp); sub(/.*:/, "", m)
                 if (m != cp) n++ } END { print n + 0 }' "$T")
    check trace-remote-info "no REMOTE_INFO for a peer that is not port mapped: $nall sent for $nh associations ($npm port-mapped REQUESTs)" \
      sh -c "[ $npm = 0 ] && [ $nall = 0 ]"
  fi
  check trace-add "listeners :7600 and :7601 got ADD_MAPPING replies" \
    sh -c "grep -q ' nl send dst=0 IWCM ADD_MAPPING .*ADDR=$IP:7600 .*MAPPING_ERR=0' $T && grep -q ' nl send dst=0 IWCM ADD_MAPPING .*ADDR=$IP:7601 .*MAPPING_ERR=0' $T"
else
  peer_check "$T" active 4; r=$?; nh=$PEER_HANDLES
  check trace-active "$nh associations: REQUEST sent to $PEER:3935, ACCEPT received, ACK sent" \
    sh -c "[ $r = 0 ] && [ $nh -ge $((CM+2)) ] && grep -q ' udp send $PEER:3935 REQUEST v4 ' $T"
  detail "$PEER_BAD"
  nq=$(cnt "$T" " nl recv src=[0?] IWCM QUERY_MAPPING .*REMOTE_ADDR=$PEER:"); nr=$(cnt "$T" " nl send dst=0 IWCM QUERY_MAPPING .*REMOTE_ADDR=$PEER:.*MAPPING_ERR=0")
  check trace-query "$nq QUERY_MAPPING requests for $PEER, $nr replies with MAPPING_ERR=0" sh -c "[ $nq -ge $((CM+2)) ] && [ $nq = $nr ]"
fi
# the peer's half of each association must match ours
cross_handles "$T" 'v4'
check cross "the $OTHER's trace has the same association handles for REQUEST, ACCEPT and ACK ($nh here)" \
  cross_ok
detail "$CROSS"
echo_checks "$T"

# ---- timing (timing=LIST): cmtime -c N across with the daemons untraced, in this boot ----
# Each label in turn: "none" runs no daemon (the kernel connects unmapped); any other label
# names this side's daemon, started again without strace. Tables cmtime-perf-LABEL.txt
# (run-all.sh's cmtime.txt, "daemons untraced"). Once a boot of its own per daemon
# (twovm-perf-*, three pair boots per kernel); the traced checks above are done by now.
for tl in $(echo "${RIG_TIMING:-}" | tr ',' ' '); do
  r=0; if [ "$tl" != none ] && [ $NODAEMON = 0 ]; then start_iwpmd "" || r=1; fi
  check "timing-$tl-start" "timing, $tl: $([ "$tl" = none ] && echo 'no daemon' || echo "$IWPMD untraced") on this side" test $r = 0
  if [ "$ROLE" = server ]; then
    cmtime -b "$IP" -c "$CM" > "$OUT/cmtime-perf-$tl-server.log" 2>&1 & sp=$!
    flag "timing.$tl.listening"; wait_flag "timing.$tl.done" 300; sleep 1; kill $sp 2>/dev/null; wait $sp 2>/dev/null
  else
    wait_flag "timing.$tl.listening" 120; sleep 1
    check_cmtime "timing-$tl" "$PEER" "$CM" "perf-$tl"
    flag "timing.$tl.done"
  fi
  flag "timing.$tl.$ROLE.end"; wait_flag "timing.$tl.$OTHER.end" 120
  if [ "$tl" != none ] && [ $NODAEMON = 0 ]; then check "timing-$tl-stop" "timing, $tl: daemon exits on SIGTERM" stop_iwpmd; fi
done
cat "$SUM"
finish
