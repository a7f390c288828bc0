#!/bin/sh
# Suite "trickle" (run by ../run-2vm.sh): legitimate connects from a host that also sends a
# slow trickle of never-ACKed REQUESTs, IPv4 and IPv6, for several daemons in turn on A.
#
# A (server, 10.77.0.1 and fd00:77::1, siw0 on eth0) runs each daemon under test in turn
# (untraced; ours, then the C iwpmd), each with two persistent rping servers (rping -s -P,
# one per family). B (client, 10.77.0.2 and fd00:77::2; the C iwpmd) per daemon of A and
# per family:
#   quiet    CONNECTS sequential rping -C 1 to A's server, each timed (the baseline)
#   RATE/s   for each rate (60, then 600): a trickle of REQUESTs to A:3935 from one plain
#            UDP socket (rigflood flood request -B 1: one datagram per send, paced), random
#            source ports in cp (identity: mapped_cp = cp), random handles, ap = A's rping
#            listener; never ACKed. After its WARM s (5 s at 60/s: some 300 un-ACKed
#            exchanges by the first connect, more than a per-source quota of 256 holds, so
#            the low rate is measured at its steady state, not at its start; 1 s at 600/s)
#            the same CONNECTS timed connects; then the trickle stops (it runs through every
#            connect). The low rate goes first so that no gap is needed: what a 60/s trickle
#            leaves (10 s of retransmissions) is little beside what 600/s brings at once,
#            whereas 600/s first would need ~10 s before the 60/s connects (rates=600,60
#            warm=1,6 gap=4 runs that order; GAP s pass between two rates).
#   IPv4: the trickle comes from B's own address 10.77.0.2, the address B connects from.
#   IPv6: from a neighbour address in B's /64 (fd00:77::12, deprecated so that nothing
#   picks it as a source by itself); the connects run from B's main fd00:77::2 (rping -I).
# Checks (on B, every daemon but the reference, which gets INFO lines):
#   quiet-FAM-D         the baseline connects all connect, none >= STALL_S
#   trickle-FAM-RATE-D  every connect during the trickle connects in <= max(2 x the quiet
#                       median of that family, FLOOR s) and < STALL_S (5 s: a connect that
#                       waits for the kernel's 10 s port-mapper timeout shows up there)
# A connect that got its TCP connection quickly (siw's socket, seen by ss) but no ping data
# within a second is the race of the server's siw that leaves the client's first message
# unread (docs/testing.md, "Lost first data"; the rig's output calls it rping's race), not
# a port-mapper stall: it is stopped and retried (up to CONNECTS/2 times) and the retry
# timed (seen in about 1 connect of 20 with either daemon, quiet or not); quiet phases
# allow any number, trickle phases CONNECTS/2 (more would be no race but a pattern). A
# connect that never got a TCP connection fails (after 10 s the kernel connects unmapped,
# so a mere stall still connects, late, and fails the time limit).
# A checks that each daemon under test came up and is alive after its phase; it reports
# its kernel SUnreclaim and the daemon's RSS growth over the phase (in the table).
# Output (B): trickle-table.txt, trickle-results.txt, rping-*.log, trickle-*.txt (rigflood).
# Knobs: role, hostid, peer, sync (run-2vm.sh); daemons=PATH,PATH
#        [/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd]  reference=PATH [/usr/sbin/iwpmd]
#        connects=N [8]  rates=R,R [60,600]  warm=S,S per rate [5,1]  families=v4,v6  gap=S [0]
#        rping_floor=S [1.0]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
ROLE=${RIG_ROLE:?rig.role=server|client}; PEER=${RIG_PEER:?rig.peer=ADDR}
DAEMONS=$(echo "${RIG_DAEMONS:-/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd}" | tr ',' ' ')
REF=${RIG_REFERENCE:-/usr/sbin/iwpmd}
N=${RIG_CONNECTS:-8}; RATES=$(echo "${RIG_RATES:-60,600}" | tr ',' ' ')
FAMS=$(echo "${RIG_FAMILIES:-v4,v6}" | tr ',' ' ')
WARMS=$(echo "${RIG_WARM:-5,1}" | tr ',' ' '); GAP=${RIG_GAP:-0}; FLOOR=${RIG_RPING_FLOOR:-1.0}
A4=10.77.0.1; B4=10.77.0.2; A6=fd00:77::1; B6=fd00:77::2; NB6=fd00:77::12
if [ "$ROLE" = server ]; then OTHER=client; else OTHER=server; fi

setup_net
if [ "$ROLE" = server ]; then IP6=$A6; else IP6=$B6; fi
ip -6 addr add "$IP6/64" dev "$DEV" nodad
# the attacker's neighbour address: deprecated (preferred_lft 0), so neither rping nor the
# C daemon's unbound client socket ever picks it as a source; an explicit bind still works
[ "$ROLE" = client ] && ip -6 addr add "$NB6/64" dev "$DEV" nodad preferred_lft 0
mkdir -p "$SYNC"
start_syslog
if [ "$ROLE" = server ]; then
  note "kernel $(uname -r); victim $IP / $IP6 (siw0 on $DEV); daemons: $DAEMONS (reference $REF); connecting host $PEER runs the C iwpmd"
else
  note "kernel $(uname -r); connecting host $IP / $IP6 (siw0 on $DEV), daemon $IWPMD; IPv6 trickle from $NB6; victim $PEER"
  check start "daemon $IWPMD up" start_iwpmd ""
fi
flag "$ROLE.up"; wait_flag "$OTHER.up" 120
if [ "$ROLE" = server ]; then P6=$B6; else P6=$A6; fi
check ping "ICMP ping $PEER and $P6" sh -c "ping -c 2 -W 5 $PEER > $OUT/ping.txt 2>&1 && { ping -c 2 -W 5 $P6 || ping6 -c 2 -W 5 $P6; } >> $OUT/ping.txt 2>&1"

snapa() {  # snapa PREFIX: A's SUnreclaim (kB) and the daemon's VmRSS (kB)
  eval "$(awk -v p="$1" '/^SUnreclaim:/ {print p "_sunr=" $2}' /proc/meminfo)"
  eval "$1_rss=$(awk '/^VmRSS:/ {print $2}' /proc/$IWPMD_PID/status 2>/dev/null || echo 0)"
}
# conn1 DST SRC PORT LOG: one rping -C 1 from SRC; T1 seconds, R1 0 when the ping data came
# back (rping's teardown race after the ping, exit 255, is not a failed connection; see
# suite-flood); capped at TMO s (15: beyond the kernel's 10 s port-mapper timeout, after which
# the kernel connects unmapped, so a silent daemon still gives ping data, late). A watcher
# looks at the client's (siw) TCP connections to the server's port once a second (ss, any
# state but TIME-WAIT, which earlier connects leave): the same connection there twice in a
# row while rping still waits means connected and yet no ping data, rping's own race (the
# port mapper has answered: the kernel starts the TCP connect only after the QUERY reply or
# its 10 s timeout, and a ping takes milliseconds once connected); the client is then
# stopped and LOST1=1.
TMO=15
conn1() {
  local t0 p w; t0=$(uptime_s); LOST1=0; rm -f "$4.ss"
  timeout $TMO rping -c -a "$1" -I "$2" -p "$3" -C 1 -v > "$4" 2>&1 & p=$!
  ( prev=""; n=0
    while [ $n -lt $TMO ]; do
      sleep 1; n=$((n+1))
      cur=$(ss -tnH state connected exclude time-wait "dport = :$3" 2>/dev/null | awk '{print $4}' | sort | tr '\n' ' ')
      if [ -n "$cur" ] && [ "$cur" = "$prev" ]; then echo "$cur" > "$4.ss"; kill $p 2>/dev/null; exit 0; fi
      prev=$cur
    done ) & w=$!
  wait $p; R1=$?
  T1=$(elapsed "$t0")
  kill $w 2>/dev/null; wait $w 2>/dev/null
  if grep -q '^ping data' "$4"; then R1=0; else
    [ $R1 != 0 ] || R1=99
    [ -s "$4.ss" ] && LOST1=1
  fi
}
# connects TAG DST SRC PORT: N sequential conn1; CT (times, space separated), CFAIL, CMAX, CMED,
# CRACE. A client that has its TCP connection but exchanged no ping data met siw's race
# (the server's siw never read its first message, so the client waits for ever): the port
# mapper's part was done, so that one is retried and the retry is timed (up to CONNECTS/2
# retries, the trickle phase's whole allowance: the race sometimes comes two or three times
# in a row on a loaded host); each lost attempt is counted in CRACE and listed. Only a
# connection that came up quickly counts as the race (stopped before STALL_S + 1 s): one
# that came up after a long wait (the kernel's 10 s timeout, then an unmapped connect that
# is slow to carry the ping) is a stall and keeps its time. A client that never got a TCP
# connection is a failed or stalled connect (its time, >= TMO, stays).
connects() {
  local i=0 k lost cl
  CT=""; CFAIL=0; CMAX=0; CRACE=0; CLOST=""
  while [ $i -lt "$N" ]; do
    cl="$OUT/rping-$1-$i.log"; conn1 "$2" "$3" "$4" "$cl"; k=1
    while [ "$LOST1" = 1 ] && [ $k -le $((N / 2)) ] && lt "$T1" $((STALL_S + 1)); do
      lost=$T1; CRACE=$((CRACE+1)); CLOST="$CLOST $i:$lost"
      log "connect $1 #$i: TCP connected ($(cat "$cl.ss" 2>/dev/null)) but no ping data, stopped after ${lost}s (rping's race): once more"
      cl="$OUT/rping-$1-$i-again$k.log"; conn1 "$2" "$3" "$4" "$cl"; k=$((k+1))
    done
    CT="$CT $T1"; [ "$R1" = 0 ] || CFAIL=$((CFAIL+1))
    lt "$CMAX" "$T1" && CMAX=$T1
    i=$((i+1))
  done
  CMED=$(echo $CT | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {printf "%.2f", (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')
  log "connects[$1]:$CT (median $CMED, max $CMAX, $CFAIL failed, $CRACE lost to rping's race and retried:${CLOST:- none})"
}

R="$OUT/trickle-results.txt"; : > "$R"
i=0
for d in $DAEMONS; do
  tag=$(basename "$d"); port=$((7800 + i*10)); port6=$((port + 1))
  if [ "$ROLE" = server ]; then
    IWPMD=$d
    REFERENCE=""; [ "$d" = "$REF" ] && REFERENCE=reference
    check "start-$tag" "$d up" start_iwpmd ""
    rping -s -P -a "$IP" -p $port > "$OUT/rping-$tag-server4.log" 2>&1 & sp4=$!
    rping -s -P -a "$IP6" -p $port6 > "$OUT/rping-$tag-server6.log" 2>&1 & sp6=$!
    wait_listen $port; wait_listen $port6
    snapa b
    flag "ready-$tag"; wait_flag "done-$tag" 400
    snapa a
    alive=0; kill -0 "$IWPMD_PID" 2>/dev/null && alive=1
    check "alive-$tag" "$d alive after the trickles" test $alive = 1
    echo "sunr_kb $(( a_sunr - b_sunr )) rss_kb $(( a_rss - b_rss )) alive $alive" > "$SYNC/a-$tag"
    flag "a-done-$tag"
    kill $sp4 $sp6 2>/dev/null; wait $sp4 $sp6 2>/dev/null
    stop_iwpmd
    REFERENCE=""
  else
    wait_flag "ready-$tag" 120
    for fam in $FAMS; do
      if [ $fam = v6 ]; then dst=$A6 src=$B6 tsrc=$NB6 ap="[$A6]:$port6" dport=$port6 tdst=$A6
      else dst=$PEER src=$IP tsrc=$IP ap="$PEER:$port" dport=$port tdst=$PEER; fi
      connects "$tag-$fam-quiet" "$dst" "$src" "$dport"
      qmed=$CMED
      echo "$tag $fam quiet $qmed $CMAX $CFAIL $CRACE$CT" >> "$R"
      j=0
      for rate in $RATES; do
        [ $j -gt 0 ] && [ "$GAP" != 0 ] && sleep "$GAP"
        j=$((j+1)); warm=$(echo $WARMS | cut -d' ' -f$j); [ -n "$warm" ] || warm=1
        tf="$OUT/trickle-$tag-$fam-$rate.txt"
        rigflood flood request "$tdst" $((rate * 600)) -b "$tsrc" -c "$tsrc" -a "$ap" -r "$rate" -B 1 > "$tf" 2>&1 & fp=$!
        sleep "$warm"
        connects "$tag-$fam-$rate" "$dst" "$src" "$dport"
        kill $fp 2>/dev/null; wait $fp
        line=$(grep '^sent=' "$tf")
        log "trickle $tag $fam ${rate}/s: $line"
        echo "$tag $fam $rate $CMED $CMAX $CFAIL $CRACE$CT" >> "$R"
        echo "$tag $fam ${rate}_trickle sent=$(kv "$line" sent) back=$(kv "$line" received) accept=$(kv "$line" accept) reject=$(kv "$line" reject) rate=$(kv "$line" rate) warm=${warm}s" >> "$R"
      done
    done
    flag "done-$tag"
  fi
  i=$((i+1))
done

if [ "$ROLE" = client ]; then
  # ---- table: per daemon, family and phase, the median, the worst and every connect --------
  for d in $DAEMONS; do wait_flag "a-done-$(basename "$d")" 60; done
  {
    echo "Connects (rping -C 1, $N in a row, each timed) from $IP / $B6 to $PEER / $A6, quiet and while $IP (IPv4) or"
    echo "$NB6 (IPv6, same /64) trickles never-ACKed REQUESTs to $PEER:3935 (random cp ports and handles, identity"
    echo "shape, ap = the rping listener; rates $RATES /s, one datagram per send, warm-up $WARMS s). Times in s. The connecting host runs the C iwpmd."
    printf '%-10s %-3s %-7s %-7s %-6s %-5s %-5s %s\n' daemon fam phase median worst fails lost "each connect"
    awk '$3 !~ /_trickle$/ { printf "%-10s %-3s %-7s %-7s %-6s %-5s %-5s", $1, $2, $3, $4, $5, $6, $7; for (i=8;i<=NF;i++) printf " %s", $i; print "" }' "$R"
    echo "(lost: connects whose TCP connection stood for a second with no ping data, rping's own race, stopped and retried, at most $((N / 2)) times; the retry is listed)"
    echo "trickles (REQUESTs sent, datagrams back, of which ACCEPT/REJECT, achieved rate, warm-up before the first connect):"
    awk '$3 ~ /_trickle$/ { r=$3; sub(/_trickle$/, "", r); printf "  %-10s %-3s %5s/s  %s %s %s %s %s %s\n", $1, $2, r, $4, $5, $6, $7, $8, $9 }' "$R"
    echo "victim (A) over each daemon's whole phase:"
    for d in $DAEMONS; do t=$(basename "$d"); echo "  $t: kernel SUnreclaim growth $(awk '{print $2}' "$SYNC/a-$t" 2>/dev/null) kB, daemon RSS growth $(awk '{print $4}' "$SYNC/a-$t" 2>/dev/null) kB, alive $(awk '{print $6}' "$SYNC/a-$t" 2>/dev/null)"; done
  } > "$OUT/trickle-table.txt"
  cat "$OUT/trickle-table.txt" >> "$SUM"
  # ---- checks ------------------------------------------------------------------------------
  for d in $DAEMONS; do
    t=$(basename "$d"); REFERENCE=""; [ "$d" = "$REF" ] && REFERENCE=reference
    for fam in $FAMS; do
      q=$(awk -v t="$t" -v f="$fam" '$1==t && $2==f && $3=="quiet"' "$R")
      [ -n "$q" ] || { bad "quiet-$fam-$t" "no baseline connects"; continue; }
      set -- $q; qmed=$4; qmax=$5; qf=$6; qr=$7
      r=1; [ "$qf" = 0 ] && lt "$qmax" "$STALL_S" && r=0
      check "quiet-$fam-$t" "baseline: $N connects, median ${qmed}s, worst ${qmax}s, $qf failed, $qr lost to rping's race and retried (limit ${STALL_S}s)" test $r = 0
      lim=$(echo "$qmed $FLOOR" | awk '{v=2*$1; if (v<$2) v=$2; printf "%.2f", v}')
      for rate in $RATES; do
        l=$(awk -v t="$t" -v f="$fam" -v r="$rate" '$1==t && $2==f && $3==r' "$R")
        [ -n "$l" ] || { bad "trickle-$fam-$rate-$t" "no connects"; continue; }
        set -- $l; med=$4; mx=$5; nf=$6; nr=$7; shift 7; slow=0
        for x in "$@"; do lt "$lim" "$x" && slow=$((slow+1)); done
        r=1; [ "$nf" = 0 ] && [ $slow = 0 ] && [ "$nr" -le $((N / 2)) ] && lt "$mx" "$STALL_S" && r=0
        check "trickle-$fam-$rate-$t" "${rate}/s trickle: connects $(echo "$@" | tr ' ' '/') s; $slow slower than max(2 x quiet median ${qmed}s, ${FLOOR}s) = ${lim}s, worst ${mx}s (limit ${STALL_S}s), $nf failed, $nr lost (connected, no ping data) and retried (at most $((N / 2)))" test $r = 0
      done
    done
  done
  REFERENCE=""
fi
flag "$ROLE.finished"; wait_flag "$OTHER.finished" 400
[ "$ROLE" = client ] && stop_iwpmd
cat "$SUM"
finish
