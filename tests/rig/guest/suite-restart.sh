#!/bin/sh
# Suite "restart": SIGKILL the daemon while a listener and a connection are live,
# start it again, and check that it relearns the kernel's mappings (HELLO, MAPINFO
# request, MAPINFO records + MAPINFO_NUM answered), that its SIGUSR1 dump matches the
# one before the kill, and that new connections (to the old listener and to a new one)
# go through it with no stall.
# Knobs: iwpmd=PATH iwpmd_args=A,B  rping_count=N [10]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
N=${RIG_RPING_COUNT:-10}

setup_net
note "kernel $(uname -r); siw0 on $DEV ($IP); daemon $IWPMD $IWPMD_ARGS"
start_syslog
dmesg_mark
check start "first daemon up" start_iwpmd "$OUT/iwpmd-1.strace"
# a persistent listener (:7300) and a client connected to it (keeps pinging)
live_pair "$IP" 7300 live; r=$?; sp=$LIVE_SP; cp=$LIVE_CP
check live "a persistent listener :7300 and a client exchanging data" test $r = 0
iwpmd_dump "$OUT/dump-before.txt"; nb=$DUMP_N
dump_pairs "$OUT/dump-before.txt" > "$OUT/pairs-before.txt"
check dump-before "$nb mappings before the kill (listener :7300 + connected client)" \
  sh -c "[ $nb -ge 2 ] && grep -q '$IP:7300(' $OUT/pairs-before.txt"
check_dmesg dmesg-first

kill9_iwpmd
sleep 1
kill -0 $cp 2>/dev/null && r=0 || r=1
check live-survives "the connected rping client is still running after the SIGKILL" test $r = 0

dmesg_mark
ST="$OUT/iwpmd-2.strace"
check restart "second daemon up" start_iwpmd "$ST"
sleep 1
iwpmd_dump "$OUT/dump-after.txt"; na=$DUMP_N
dump_pairs "$OUT/dump-after.txt" > "$OUT/pairs-after.txt"
if cmp -s "$OUT/pairs-before.txt" "$OUT/pairs-after.txt"; then
  ok dump-same "SIGUSR1 after restart lists the same $na mappings as before the kill"
else
  bad dump-same "mappings before ($nb) and after ($na) the restart differ"
  detail "$(diff "$OUT/pairs-before.txt" "$OUT/pairs-after.txt")" 10
fi
sed 's/^/    /' "$OUT/pairs-before.txt" >> "$SUM"

# new connections: to the listener that survived the restart, then a fresh pair
t0=$(uptime_s)
timeout 60 rping -c -a "$IP" -p 7300 -C "$N" -v > "$OUT/rping-old-listener.log" 2>&1; rc=$?
t=$(elapsed "$t0"); l=$(grep -c 'ping data' "$OUT/rping-old-listener.log")
if [ $rc = 0 ] && [ "$l" = "$N" ] && lt "$t" "$STALL_S"; then ok rping-old "new connection to the pre-restart listener: $l ping lines in ${t}s"
else bad rping-old "new connection to the pre-restart listener: rc=$rc, $l ping lines, ${t}s"; fi
check_rping rping-new "$IP" "$N" new 7301
kill $cp $sp 2>/dev/null; wait $cp $sp 2>/dev/null
sleep 1
check_dmesg dmesg-second
iwpmd_dump "$OUT/dump-end.txt"
check dump-end "no mappings left once every listener and connection is gone ($DUMP_N)" test "$DUMP_N" = 0
check stop "daemon exits on SIGTERM" stop_iwpmd

T="$OUT/iwpm-traffic.txt"; decode "$ST" "$T"
note "second daemon's trace: $(tail -1 "$T")"
grep -v '^#' "$T" | head -30 | sed 's/^/    /' >> "$SUM"
nrec=$(cnt "$T" ' nl recv src=[0?] IWCM MAPINFO ')
check trace-hello "restarted daemon: HELLO(4) sent and answered, MAPINFO request sent" \
  sh -c "grep -q ' nl send dst=0 IWCM HELLO .*ABI_VERSION=4' $T && grep -q ' nl recv src=[0?] IWCM HELLO .*ABI_VERSION=4' $T &&
         grep -q ' nl send dst=0 IWCM MAPINFO .*ULIB_NAME=iWarpPortMapperUser ULIB_VER=4' $T"
check trace-mapinfo "kernel replayed $nrec MAPINFO records (one per mapping before the kill: $nb), incl. $IP:7300" \
  sh -c "[ $nrec = $nb ] && grep -q ' nl recv src=[0?] IWCM MAPINFO .*LOCAL_ADDR=$IP:7300 MAPPED_ADDR=$IP:7300' $T"
num=$(grep ' nl recv src=[0?] IWCM MAPINFO_NUM ' "$T" | head -1 | sed 's/.*SEND_NUM=\([0-9]*\).*/\1/')
check trace-mapinfo-num "MAPINFO_NUM(SEND_NUM=${num:-none}) answered with ACK_NUM = SEND_NUM" \
  sh -c "[ -n '$num' ] && grep -q ' nl send dst=0 IWCM MAPINFO_NUM .*SEND_NUM=$num ACK_NUM=$num' $T"
remote_info_ok "$T" "$IP:7300"; ri=$?
check trace-old-listener "REQUEST for the pre-restart listener :7300 got ACCEPT + REMOTE_INFO as owed ($RI_SENT sent, $RI_OWED port-mapped; mapping relearned)" \
  sh -c "grep -q ' udp send .* ACCEPT v4 .*ap=$IP:7300 ' $T && [ $ri = 0 ] &&
         ! grep -q ' udp send .* REJECT ' $T"
peer_check "$T" both 4; r=$?
check trace-peer "after restart: $PEER_HANDLES associations, each with REQUEST/ACCEPT/ACK both ways" test $r = 0
detail "$PEER_BAD"
u=$(unanswered "$T"); check trace-answered "every kernel request answered with SEQ = request seq" test -z "$u"; detail "$u"
e=$(reply_errors "$T"); check trace-noerr "no error replies / HANDLE_ERR" test -z "$e"; detail "$e"
cat "$SUM"
finish
