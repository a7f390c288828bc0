#!/bin/sh
# Suite "compare2" (run by ../compare.sh through ../run-2vm.sh): two VMs, the same daemon
# on both sides, every daemon in ONE boot of the pair, interleaved round by round (C,
# ours, floor, none, C, ours, ...). Per daemon and round both sides start it (untraced),
# the server runs `cmtime -b`, the client `cmtime -s SERVER -c CM` across the link; the
# client records the connect total and worst single connect, each side its daemon's CPU
# time over the run. "floor" (`rigtool floor-responder`) answers QUERY_MAPPING at once
# with mapped = real and skips the peer exchange: a physical limit, not a valid port
# mapper across hosts; "none" = no daemon (unmapped connects).
# Results (client): $OUT/compare-results.txt, one "ROUND LABEL KEY VALUE" line per figure.
# Checks: every cmtime connected all CM with no stall, every daemon started.
# Knobs: role/hostid/peer/sync (set by run-2vm.sh)  daemons=c,ours,floor,none  rounds=R [3]
#        cmtime=N [50]  ours=PATH [/mnt/rig/bin/iwpmd-rs]  c=PATH [/usr/sbin/iwpmd]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
ROLE=${RIG_ROLE:?rig.role=server|client}; PEER=${RIG_PEER:?rig.peer=ADDR}
ROUNDS=${RIG_ROUNDS:-3}; CM=${RIG_CMTIME:-50}
DAEMONS=$(echo "${RIG_DAEMONS:-c,ours,floor,none}" | tr ',' ' ')
OURS=${RIG_OURS:-/mnt/rig/bin/iwpmd-rs}; CD=${RIG_C:-/usr/sbin/iwpmd}
RES="$OUT/compare-results.txt"; : > "$RES"

setup_net
note "kernel $(uname -r); role $ROLE; siw0 on $DEV ($IP); peer $PEER; cmtime -c $CM, $ROUNDS rounds over: $DAEMONS"
start_syslog
flag "$ROLE.up"; wait_flag "$([ "$ROLE" = server ] && echo client || echo server).up" 120
check ping "ICMP ping $PEER" sh -c "ping -c 2 -W 5 $PEER > $OUT/ping.txt 2>&1"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  for l in $DAEMONS; do
    tag="$l-$r"; IWPMD_PID=""
    if [ "$l" != none ]; then
      use_daemon "$l"; start_iwpmd "" || bad "start-$tag" "$IWPMD did not start"
    fi
    c0=$(cpu_ms "$IWPMD_PID")
    if [ "$ROLE" = server ]; then
      flag "$tag.s.up"; wait_flag "$tag.c.up" 120
      cmtime -b "$IP" -c "$CM" > "$OUT/cmtime-$tag-server.log" 2>&1 & sp=$!
      sleep 1; flag "$tag.listening"; wait_flag "$tag.done" 300
      sleep 0.5; kill $sp 2>/dev/null; wait $sp 2>/dev/null
      c1=$(cpu_ms "$IWPMD_PID")
      echo "$c0 $c1" | awk -v r="$r" -v l="$l" '{printf "%s %s cpu_server_ms %d\n", r, l, $3+$4-$1-$2}' > "$SYNC/$tag.server-cpu"
      [ "$l" != none ] && stop_iwpmd
      flag "$tag.s.stopped"
    else
      flag "$tag.c.up"; wait_flag "$tag.listening" 120
      check_cmtime "cmtime-$tag" "$PEER" "$CM" "$tag"
      flag "$tag.done"
      c1=$(cpu_ms "$IWPMD_PID")
      put "$r" "$l" cm_total "$(cm_col "$OUT/cmtime-$tag.txt" connect 1)"
      put "$r" "$l" cm_max "$(cm_col "$OUT/cmtime-$tag.txt" connect 2)"
      echo "$c0 $c1" | awk -v r="$r" -v l="$l" '{printf "%s %s cpu_client_ms %d\n", r, l, $3+$4-$1-$2}' >> "$RES"
      [ "$l" != none ] && stop_iwpmd
      wait_flag "$tag.s.stopped" 60
      cat "$SYNC/$tag.server-cpu" >> "$RES" 2>/dev/null
      log "$tag: $(grep "^$r $l " "$RES" | cut -d' ' -f3- | tr '\n' ' ')"
    fi
  done
  r=$((r+1))
done
[ "$ROLE" = client ] && cat "$RES" >> "$SUM"
cat "$SUM"
finish
