#!/bin/sh
# Suite "restart-load": SIGKILL the daemon under load and restart it; no mapping may be
# lost. One daemon per boot (run-all runs it for ours and for the C iwpmd).
#
#   1. daemon (untraced) + LISTENERS live listeners in one process (rigcm listen on
#      IP:FIRST..FIRST+LISTENERS-1) + LIVE rping pairs with traffic running (rping -s -P on
#      7300.., a client pinging without end, its log on tmpfs; both at nice 19, or the
#      pingers starve everything else on the one vCPU)
#   2. SIGUSR1 dump "before" (every mapping: listeners, rping servers and clients)
#   3. LOOPS background loops of rigcm connect to the listeners (each connect timed,
#      "start end rc port ms"); after GAP s of them, kill -9 the daemon while connects
#      are in flight; the loops go on; DOWN s later the daemon is started again (traced);
#      the loops stop 1 s after it is up, each after its current connect
#   4. SIGUSR1 dump "after" (once every loop has ended: the kernel replayed its table,
#      the loops' own short-lived mappings are gone again) compared with "before"
#   5. NEW new connections to pre-restart listeners (spread over the range) + one rping
#      to a pre-restart rping server, timed; then everything is torn down (live clients
#      first: a client never dies while its connect waits for the kernel, see README)
# Checks (INFO lines instead, for reference=1: the C iwpmd's figures are reported):
#   lost            every "local -> mapped" pair of the before dump is in the after dump
#   replay          the restarted daemon's trace: HELLO(4), MAPINFO request, one MAPINFO
#                   record per mapping before the kill (each before pair among them),
#                   MAPINFO_NUM answered with ACK_NUM = SEND_NUM
#   new-connects    every new connection connected, none took STALL_S or more
#   trace-new       for each new connection a REQUEST for its listener got ACCEPT and the
#                   kernel got REMOTE_INFO; no REJECT sent at all; every kernel request
#                   answered with its SEQ; no error replies
#   dmesg           no iwpm kernel messages from the restart on (the kill window's own
#                   messages are counted in the table)
#   live-traffic    the rping clients stayed alive and kept pinging across the kill and restart
#   end-empty       once everything is closed the dump is empty (the replayed mappings'
#                   reference counts were right: each close removed its mapping)
# Figures: restart-load-results.txt ("key value"), merged by run-all.sh into
# target/rig/<kernel>/restart-load.txt (ours vs C).
# Knobs: iwpmd=PATH iwpmd_args=A,B listeners=N [100] first=PORT [7400] live=N [3]
#        loops=N [4] gap=S [2] down=S [1] new=N [10] reference=0|1 [0]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
NL=${RIG_LISTENERS:-100}; FIRST=${RIG_FIRST:-7400}; NLIVE=${RIG_LIVE:-3}; NLOOPS=${RIG_LOOPS:-4}
GAP=${RIG_GAP:-2}; DOWN=${RIG_DOWN:-1}; NNEW=${RIG_NEW:-10}; REFM=${RIG_REFERENCE:-0}
FIGS="$OUT/restart-load-results.txt"; : > "$FIGS"   # (fig, lib.sh)
# With RIG_REFERENCE=1 the daemon is rdma-core's: its checks are reported, not judged.
ROLE=""; [ "$REFM" = 1 ] && ROLE=reference
# pairs FILE: "local mapped" per mapping of a SIGUSR1 dump, sorted
pairs() { dump_pairs "$1" | sed 's/([^)]*)//g; s/IPV[46] //g; s/ -> / /' | sort; }
# low CMD... &: run CMD at nice 19 (the guest's busybox has renice, no nice; threads
# inherit it). Background use only: it execs, so $! is CMD's pid
low() { exec sh -c 'renice -n 19 -p $$ > /dev/null; exec "$@"' low "$@"; }
# dump FILE: iwpmd_dump, but waiting until the log has been still for 1 s (max 20 s):
# a dump of 100+ mappings trickles into syslog slowly on a loaded single vCPU
dump() { settled_dump "$1"; }

setup_net
note "kernel $(uname -r); siw0 on $DEV ($IP); daemon $IWPMD $IWPMD_ARGS; $NL listeners :$FIRST.., $NLIVE live rping pairs, $NLOOPS connect loops"
start_syslog
dmesg_mark; DM0=$DMESG_MARK
check start "first daemon up (untraced)" start_iwpmd ""

# ---- 1. listeners and live traffic -----------------------------------------------------
rigcm listen "$IP" "$FIRST" "$NL" 300 > "$OUT/listen.log" 2>&1 & LP=$!
i=0; while ! grep -q '^listening' "$OUT/listen.log" && kill -0 $LP 2>/dev/null && [ $i -lt 150 ]; do sleep 0.2; i=$((i+1)); done
check listeners "$NL listeners up in one rigcm process: $(head -1 "$OUT/listen.log")" grep -q "^listening $NL " "$OUT/listen.log"
SPS=""; CPS=""; k=0
while [ $k -lt $NLIVE ]; do
  low rping -s -P -a "$IP" -p $((7300+k)) > "$OUT/rping-live$k-server.log" 2>&1 & SPS="$SPS $!"; k=$((k+1))
done
sleep 1; k=0
while [ $k -lt $NLIVE ]; do
  low rping -c -v -a "$IP" -p $((7300+k)) > /tmp/live$k.log 2>&1 & CPS="$CPS $!"; k=$((k+1))
done
livelines() { local k=0 s=""; while [ $k -lt $NLIVE ]; do s="$s $(grep -c '^ping data' /tmp/live$k.log)"; k=$((k+1)); done; echo $s; }
i=0; while [ $i -lt 75 ]; do
  l=$(livelines); case " $l " in *" 0 "*) sleep 0.2; i=$((i+1)) ;; *) break ;; esac
done
check live "$NLIVE rping clients exchanging data (ping lines: $l)" sh -c "case ' $l ' in *' 0 '*) exit 1 ;; esac"

# ---- 2. before ------------------------------------------------------------------------------
dump "$OUT/dump-before.txt"; nb=$DUMP_N
pairs "$OUT/dump-before.txt" > "$OUT/pairs-before.txt"
want=$((NL + 2*NLIVE))
check dump-before "$nb mappings before the kill ($NL listeners + $NLIVE rping servers + $NLIVE clients = $want)" \
  test "$(wc -l < "$OUT/pairs-before.txt")" -ge $want

# ---- 3. connect loops, kill -9 under load, restart ----------------------------------------
STOPF=/tmp/stop-loops; rm -f $STOPF
loop() {  # loop K: rigcm connect to listener after listener until $STOPF exists
  local k=$1 j=0 p t0 t1 rc ms
  : > "$OUT/loop-$k.txt"
  while [ ! -e $STOPF ]; do
    p=$((FIRST + (k*29 + j*7) % NL)); t0=$(uptime_s)
    rigcm connect "$IP:0" "$IP:$p" 25 > /tmp/loop-$k.out 2>&1; rc=$?; t1=$(uptime_s)
    ms=$(sed -n 's/^connected .* ms=\([0-9.]*\).*/\1/p' /tmp/loop-$k.out)
    echo "$t0 $t1 $rc $p ${ms:--}" >> "$OUT/loop-$k.txt"; j=$((j+1))
  done
}
LPIDS=""; k=0
while [ $k -lt $NLOOPS ]; do loop $k & LPIDS="$LPIDS $!"; k=$((k+1)); done
sleep "$GAP"
l_kill=$(livelines)
TK=$(uptime_s)
kill9_iwpmd
sleep "$DOWN"
ST="$OUT/iwpmd-2.strace"
check restart "second daemon up (traced)" start_iwpmd "$ST"
TUP=$(uptime_s)
sleep 1
touch $STOPF
for p in $LPIDS; do wait_or_kill $p 40; done
TEND=$(uptime_s)
l_after=$(livelines)
cat "$OUT"/loop-*.txt | sort -n > "$OUT/loops.txt"
dmesg | tail -n +$((DM0+1)) > "$OUT/dmesg-kill-window.txt"; dmesg_mark
kwin=$(grep -c -i -E 'iwpm|iw_cm|port ?map' "$OUT/dmesg-kill-window.txt")

# ---- 4. after ---------------------------------------------------------------------------------
dump "$OUT/dump-after.txt"; na=$DUMP_N
pairs "$OUT/dump-after.txt" > "$OUT/pairs-after.txt"
only_in "$OUT/pairs-before.txt" "$OUT/pairs-after.txt" > "$OUT/pairs-lost.txt"
only_in "$OUT/pairs-after.txt" "$OUT/pairs-before.txt" > "$OUT/pairs-extra.txt"
lost=$(wc -l < "$OUT/pairs-lost.txt"); extra=$(wc -l < "$OUT/pairs-extra.txt")
role_check "$ROLE" lost "mappings lost: $lost (before $nb, after $na, extra after $extra); same local -> mapped pairs" test "$lost" = 0 -a "$nb" -gt 0
detail "$(cat "$OUT/pairs-lost.txt")"

# ---- 5. new connections to pre-restart listeners -----------------------------------------------
NEWT=""; NEWMS=""; NEWP=""; newok=0; i=0
while [ $i -lt $NNEW ]; do
  p=$((FIRST + (i * NL / NNEW) + NL / NNEW / 2)); t0=$(uptime_s)
  timeout 30 rigcm connect "$IP:0" "$IP:$p" 25 > "$OUT/new-$p.log" 2>&1; rc=$?; t=$(elapsed "$t0")
  ms=$(sed -n 's/^connected .* ms=\([0-9.]*\).*/\1/p' "$OUT/new-$p.log")
  [ $rc = 0 ] && lt "$t" "$STALL_S" && newok=$((newok+1))
  NEWT="$NEWT $t"; NEWMS="$NEWMS ${ms:--}"; NEWP="$NEWP $p"; i=$((i+1))
done
t0=$(uptime_s)   # a new client of a pre-restart (persistent) rping server
timeout 30 rping -c -a "$IP" -p 7300 -C 3 -v > "$OUT/rping-old-client.log" 2>&1; rr=$?; RT=$(elapsed "$t0")
[ "$(grep -c '^ping data' "$OUT/rping-old-client.log")" = 3 ] || rr="$rr, $(grep -c '^ping data' "$OUT/rping-old-client.log") of 3 pings"
role_check "$ROLE" new-connects "new connections to pre-restart listeners: $newok of $NNEW connected in < ${STALL_S}s (s:$NEWT); rping -C 3 to the old rping server :7300 rc=$rr in ${RT}s" \
  sh -c "[ $newok = $NNEW ] && [ '$rr' = 0 ] && echo $RT $STALL_S | awk '{exit !(\$1 < \$2)}'"
l_end=$(livelines)
liveok=1; for p in $CPS; do kill -0 $p 2>/dev/null || liveok=0; done
set -- $l_kill; for a in $l_end; do [ "$a" -gt "${1:-0}" ] || liveok=0; shift; done

# ---- teardown -----------------------------------------------------------------------------------
kill $CPS 2>/dev/null; wait $CPS 2>/dev/null
sleep 0.5
kill $SPS 2>/dev/null; kill -TERM $LP 2>/dev/null; wait $SPS $LP 2>/dev/null
accepted=$(sed -n 's/^accepted=//p' "$OUT/listen.log")
# refcounts: every close must remove its mapping. The kernel tears 100 listeners down one
# by one (a REMOVE each); on a loaded TCG host that takes longer than a second, so the dump
# is repeated (at most 8 s) until it is empty.
w=0; while :; do
  sleep 1; w=$((w+1))
  dump "$OUT/dump-end.txt"; nend=$DUMP_N
  [ "$nend" = 0 ] || [ $w -ge 8 ] && break
done
role_check "$ROLE" end-empty "mappings left once every listener and connection is closed: $nend (after ${w} s)" test "$nend" = 0
k=0; while [ $k -lt $NLIVE ]; do tail -3 /tmp/live$k.log > "$OUT/rping-live$k-client-tail.log"; k=$((k+1)); done
sleep 0.5
role_check "$ROLE" dmesg "no iwpm kernel messages from the restart to the end ($(dmesg_iwpm_since | head -2 | tr '\n' '|'))" test -z "$(dmesg_iwpm_since)"
dmesg_iwpm_since | head -5 | sed 's/^/    /' >> "$CHECKS"
check live-traffic "rping clients alive through the kill and restart, their ping lines grew (at the kill: $l_kill; after the restart: $l_after; at the end: $l_end; stdout reaches the log in 4 KB blocks)" \
  test "$liveok" = 1
check stop "daemon exits on SIGTERM" stop_iwpmd

# ---- the restarted daemon's trace ----------------------------------------------------------------
T="$OUT/iwpm-traffic.txt"; decode "$ST" "$T"
tsec() { awk '{split($1, a, ":"); printf "%.6f\n", a[1]*3600 + a[2]*60 + a[3]}'; }
nrec=$(cnt "$T" ' nl recv src=[0?] IWCM MAPINFO ')
num=$(grep ' nl recv src=[0?] IWCM MAPINFO_NUM ' "$T" | head -1 | sed 's/.*SEND_NUM=\([0-9]*\).*/\1/')
ack=$(grep ' nl send dst=0 IWCM MAPINFO_NUM ' "$T" | head -1 | sed -n 's/.*ACK_NUM=\([0-9]*\).*/\1/p')
th=$(grep -m1 ' nl send dst=0 IWCM HELLO ' "$T" | tsec)
ta=$(grep -m1 ' nl send dst=0 IWCM MAPINFO_NUM ' "$T" | tsec)
replay_ms=$(echo "$th $ta" | awk 'NF==2 {printf "%.1f", ($2-$1)*1000} NF<2 {print "-"}')
grep ' nl recv src=[0?] IWCM MAPINFO ' "$T" | sed -n 's/.*LOCAL_ADDR=\([^ ]*\) MAPPED_ADDR=\([^ ]*\).*/\1 \2/p' | sort > "$OUT/pairs-replayed.txt"
notrep=$(only_in "$OUT/pairs-before.txt" "$OUT/pairs-replayed.txt" | wc -l)
role_check "$ROLE" replay "restarted daemon: HELLO(4) + MAPINFO request; kernel replayed $nrec MAPINFO records (before the kill: $nb; before pairs not replayed: $notrep); MAPINFO_NUM SEND_NUM=${num:-none} answered ACK_NUM=${ack:-none} in ${replay_ms} ms after HELLO" \
  sh -c "grep -q ' nl send dst=0 IWCM HELLO .*ABI_VERSION=4' $T && grep -q ' nl send dst=0 IWCM MAPINFO .*ULIB_VER=4' $T &&
         [ $nrec -ge $nb ] && [ $notrep = 0 ] && [ -n '$num' ] && [ '$num' = '$nrec' ] && [ '$ack' = '$num' ]"
miss=""; for p in $NEWP; do
  grep -q " udp recv .* REQUEST v4 .*ap=$IP:$p " "$T" && grep -q " udp send .* ACCEPT v4 .*ap=$IP:$p " "$T" &&
    remote_info_ok "$T" "$IP:$p" || miss="$miss $p"
done
nrej=$(cnt "$T" ' udp (send|recv) .* REJECT ')
u=$(unanswered "$T"); e=$(reply_errors "$T")
role_check "$ROLE" trace-new "each new connection's REQUEST for its pre-restart listener got ACCEPT + REMOTE_INFO as owed (missing:${miss:- none}); REJECTs: $nrej; unanswered kernel requests: $(echo "$u" | grep -c .); error replies: $(echo "$e" | grep -c .)" \
  sh -c "[ -z '$miss' ] && [ $nrej = 0 ] && [ -z \"\$1\" ] && [ -z \"\$2\" ]" _ "$u" "$e"
detail "$u"; detail "$e"

# ---- figures ------------------------------------------------------------------------------------
lf() { awk -v tk="$TK" -v tup="$TUP" -v lim="$STALL_S" "$1" "$OUT/loops.txt"; }
fig listener_count "$NL"
fig live_pairs "$NLIVE"
fig loops "$NLOOPS"
fig mappings_before "$nb"
fig mappings_after "$na"
fig mappings_lost "$lost"
fig mappings_extra "$extra"
fig mapinfo_records "$nrec"
fig mapinfo_num "${num:--}/${ack:--}"
fig replay_ms "$replay_ms"
fig kill_to_up_s "$(echo "$TK $TUP" | awk '{printf "%.2f", $2-$1}')"
fig loop_connects "$(lf '{n++; if ($3) f++} END {printf "%d/%d", n-f, n}')"
fig inflight_at_kill "$(lf '$1<tk && $2>tk {n++} END {print n+0}')"
fig inflight_times_s "$(lf '$1<tk && $2>tk {s=s sprintf("%s%.2f", s==""?"":"/", $2-$1)} END {print (s==""?"-":s)}')"
fig down_connects "$(lf '$1>=tk && $1<tup {n++; if ($3) f++; if ($2-$1>m) m=$2-$1} END {printf "%d (%d failed, max %.2f s)", n, f, m}')"
fig loop_stalls "$(lf '$2-$1>=lim {n++} END {print n+0}')"
fig loop_max_s "$(lf '{if ($2-$1>m) m=$2-$1} END {printf "%.2f", m}')"
fig new_connects "$newok/$NNEW"
fig new_times_s "$(echo $NEWT | tr ' ' '/')"
fig new_max_s "$(echo $NEWT | tr ' ' '\n' | sort -n | tail -1)"
fig new_connect_ms "$(echo $NEWMS | tr ' ' '/')"
fig rping_old_s "$RT (rc $rr)"
fig rejects "$nrej"
fig mappings_end "$nend"
fig dmesg_kill_window "$kwin"
fig dmesg_after "$(dmesg_iwpm_since | grep -c .)"
fig listener_accepts "${accepted:--}"
fig suite_s "$(uptime_s)"
note "kill window: $kwin iwpm kernel lines: $(grep -i -E 'iwpm|iw_cm|port ?map' "$OUT/dmesg-kill-window.txt" | sed 's/^\[[^]]*\] //' | sort | uniq -c | sort -rn | head -3 | tr -s ' ' | tr '\n' '|')"
note "second daemon's trace: $(tail -1 "$T")"
cat "$FIGS" >> "$SUM"
cat "$SUM"
finish
