#!/bin/sh
# Suite "zerogap": restart our daemon under load with more mappings than the kernel can
# replay (~227 per client), through a stand-in for systemd's FD store (tools/rigfdstore.c:
# the busybox guest has no systemd), and prove that no mapped port is ever free and no
# mapping is lost. Ours only (the C iwpmd has neither an FD store nor a state file).
#
#   1. rigfdstore serve: notify socket + FD store, starts the daemon with --systemd and a
#      state file; LISTENERS listeners in one rigcm process (each a mapping and a stored
#      socket); wait until the store holds them all
#   2. SIGUSR1 dump "before": local -> mapped pairs with reference counts
#   3. a probe binds every mapped port over and over (0.0.0.0, no SO_REUSEADDR) while
#      LOOPS connect loops run; SIGUSR2 to rigfdstore: SIGTERM to the daemon, then the
#      next one starts with the stored sockets (LISTEN_FDS); wait for READY=1 and for the
#      daemon's "restored mappings settled" line (end of the kernel's replay window)
#   4. stop probe and loops; SIGUSR1 dump "after" = "before", counts included
#   5. new connections to the last listeners (beyond the kernel's replay limit) connect;
#      everything closed: the dump is empty (each close removed its mapping: true counts)
# Plain Soft-iWARP maps every address to itself (siw sets IW_F_NO_PORT_MAP): the daemon
# reserves no TCP port, the store holds one socket per port-mapped mapping of the dump,
# which is then none, and siw's own kernel sockets keep the listening ports bound anyway;
# that run proves the rest: mappings beyond the replay limit and their counts survive
# (state file), the store protocol runs against a real kernel, and the control run shows
# what is lost without it. With portmap=1 (the rig's patched kernel: siw runs the
# port-mapped path of a hardware RNIC, and its own sockets hold no port against the host,
# kernel/net-force-reuse.patch) every mapping has a real reserved port, so the store holds
# one socket per mapping and only the daemon's reservation keeps the probe off a mapped
# port: the zero-gap claim itself is then proven on the real kernel, and the control run
# shows the ports the host could take while a daemon without the store restarts.
# Checks:
#   store          the store holds one socket per port-mapped mapping before the restart
#   no-gap         the probe never bound a mapped port during the restart (rounds > 0)
#   restart        the second daemon said READY=1, took the stored sockets (log line
#                  inherited_ports=N: one per mapping of the dump, plus, in port-mapped
#                  mode, at most one per connect loop for a connect in flight) and released
#                  none
#   lost           every "local -> mapped refcount" of the before dump is in the after dump
#   replay-limit   the kernel replayed fewer records than there are mappings (the rest
#                  survived through the state file and the store)
#   new-connects   NEW connections to the last listeners connected in < STALL_S each
#   end-empty      after closing everything the dump is empty
# Figures: zerogap-results.txt ("key value").
# Control (reference=1): the same restart without FD store and state file (the daemon in
# --foreground with --no-state-file; only the kernel's replay recovers): the checks that
# differ become INFO lines, showing what the mechanism prevents (ports free during the
# restart, mappings beyond the replay limit lost) — or that the rig cannot show it.
# Knobs: iwpmd=PATH listeners=N [320] first=PORT [7400] loops=N [2] new=N [5]
#        reference=0|1 [0] portmap=0|1 [unset: plain siw]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
NL=${RIG_LISTENERS:-320}; FIRST=${RIG_FIRST:-7400}; NLOOPS=${RIG_LOOPS:-2}; NNEW=${RIG_NEW:-5}
REFM=${RIG_REFERENCE:-0}
FIGS="$OUT/zerogap-results.txt"; : > "$FIGS"
# With RIG_REFERENCE=1 this is the control run (rdma-core's daemon, no FD store): its
# checks are reported, not judged.
ROLE=""; [ "$REFM" = 1 ] && ROLE=control
mkdir -p $CTL
STATE=/tmp/iwpmd-state
# triples FILE: "local mapped refcount" per mapping of a SIGUSR1 dump, sorted
triples() {
  awk '/Local address/{sub(/.*Local address /,""); sub(/\(.*/,""); l=$NF}
       /Mapped address/{sub(/.*Mapped address /,""); sub(/\(.*/,""); m=$NF}
       / refcount /{sub(/.* refcount /,""); print l, m, $1}' "$1" | sort
}
# dump FILE: SIGUSR1 to the current daemon, wait until syslog is still for 1 s (max 20 s)
dump() { IWPMD_PID=$(st pid); settled_dump "$1"; }

setup_net
note "kernel $(uname -r); siw0 on $DEV ($IP); daemon $IWPMD behind rigfdstore; $NL listeners :$FIRST.., $NLOOPS connect loops"
start_syslog
dmesg_mark
rm -f $STATE
if [ "$REFM" = 1 ]; then MODE="--foreground --no-state-file"; else MODE="--systemd --fd-store --state-file $STATE"; fi
fdstore_serve $IWPMD $MODE
if [ "$REFM" = 1 ]; then
  check start "first daemon up (control: no notifications)" waitfor 10 sh -c '[ -n "$(rigtool nl-portid 2>/dev/null)" ]'
  sleep 1
else
  check start "first daemon up, READY=1 to the store" fdstore_ready 1 10
fi
IWPMD_PID=$(st pid)

# ---- 1. listeners ------------------------------------------------------------------------
rigcm listen "$IP" "$FIRST" "$NL" 900 > "$OUT/listen.log" 2>&1 & LP=$!
waitfor 60 grep -q '^listening' "$OUT/listen.log"
check listeners "$NL listeners up: $(head -1 "$OUT/listen.log")" grep -q "^listening $NL " "$OUT/listen.log"

# ---- 2. before ----------------------------------------------------------------------------
dump "$OUT/dump-before.txt"; nb=$DUMP_N
npm=$(grep -c 'no_port_map no' "$OUT/dump-before.txt")
waitfor 20 sh -c "[ \"\$(sed -n 's/^stored //p' $CTL/state)\" -ge $npm ]"
role_check "$ROLE" store "FD store holds $(st stored) sockets for the $npm port-mapped of $nb mappings; status: $(st status)" test "$(st stored)" = "$npm"
triples "$OUT/dump-before.txt" > "$OUT/triples-before.txt"
awk '{split($2, a, ":"); print a[2]}' "$OUT/triples-before.txt" | sort -u > /tmp/ports.txt
check dump-before "$nb mappings before the restart (>= $NL)" test "$nb" -ge "$NL"
if [ "${RIG_PORTMAP:-0}" = 1 ]; then
  nsame=$(awk '{a=$1; b=$2; sub(/.*:/, "", a); sub(/.*:/, "", b); if (a == b) n++} END {print n+0}' "$OUT/triples-before.txt")
  check port-mapped "siw.port_map=1: $npm of $nb mappings port mapped, $nsame with mapped port = local port" \
    sh -c "[ $npm = $nb ] && [ $nsame = 0 ]"
fi

# ---- 3. probe + loops, restart ------------------------------------------------------------------
# (the loops stop with the probe)
STOPF=$PROBE_STOP; probe_start /tmp/ports.txt ""
loop() {
  local k=$1 j=0 p
  : > "$OUT/loop-$k.txt"
  while [ ! -e $STOPF ]; do
    p=$((FIRST + (k*37 + j*11) % NL))
    rigcm connect "$IP:0" "$IP:$p" 25 > /tmp/loop-$k.out 2>&1; echo "$? $p" >> "$OUT/loop-$k.txt"; j=$((j+1))
  done
}
LPIDS=""; k=0
while [ $k -lt $NLOOPS ]; do loop $k & LPIDS="$LPIDS $!"; k=$((k+1)); done
sleep 2
n0=$(wc -l < "$SYSLOG")
T0=$(uptime_s)
kill -USR2 $SP
if [ "$REFM" = 1 ]; then  # no READY=1, no restore: the replay window is 9.5 s at most
  waitfor 30 sh -c "[ \"\$(sed -n 's/^restarts //p' $CTL/state)\" = 1 ]"; ok_ready=$?
  TREADY=$(uptime_s); sleep 10
else
  fdstore_ready 2 30; ok_ready=$?
  TREADY=$(uptime_s)
  waitfor 30 sh -c "tail -n +$((n0+1)) $SYSLOG | grep -q 'restored mappings settled'"
fi
TSET=$(uptime_s)
probe_stop; for p in $LPIDS; do wait_or_kill $p 40; done
tail -n +$((n0+1)) "$SYSLOG" > "$OUT/syslog-restart.txt"
free=$GAP_FREE; rounds=$GAP_ROUNDS
role_check "$ROLE" no-gap "probe: ${rounds:-?} rounds over $(wc -l < /tmp/ports.txt) mapped ports from before the restart to the end of the replay window, ${free:-?} binds succeeded" \
  sh -c "[ '${free:-x}' = 0 ] && [ '${rounds:-0}' -gt 0 ]"
detail "$(head -5 "$OUT/probe-free.txt")"
inh=$(sed -n 's/.*inherited_ports=\([0-9]*\).*/\1/p' "$OUT/syslog-restart.txt" | head -1)
settled=$(grep -m1 'restored mappings settled' "$OUT/syslog-restart.txt" | sed 's/.*settled against the kernel.s replay//')
role_check "$ROLE" restart "second daemon READY=1 (restarts $(st restarts)), took ${inh:-no} stored sockets, released none; settled:$settled" \
  sh -c "[ $ok_ready = 0 ] && [ '${inh:-0}' -ge $npm ] && [ '${inh:-0}' -le $((npm + NLOOPS)) ] && ! grep -q 'were released' $OUT/syslog-restart.txt"

# ---- 4. after ------------------------------------------------------------------------------------
sleep 1
dump "$OUT/dump-after.txt"; na=$DUMP_N
triples "$OUT/dump-after.txt" > "$OUT/triples-after.txt"
only_in "$OUT/triples-before.txt" "$OUT/triples-after.txt" > "$OUT/triples-lost.txt"
lost=$(wc -l < "$OUT/triples-lost.txt")
role_check "$ROLE" lost "mappings lost or with another count: $lost (before $nb, after $na)" test "$lost" = 0
detail "$(cat "$OUT/triples-lost.txt")"
dmesg | tail -n +$((DMESG_MARK+1)) > "$OUT/dmesg-restart.txt"
nrec=$(grep -c -i 'insufficient skbs' "$OUT/dmesg-restart.txt")
check replay-limit "the kernel could not replay all $nb mappings ('Insufficient skbs' lines: $nrec): the rest depends on the state file" test "$nb" -gt 227

# ---- 5. new connections beyond the replay limit, teardown ------------------------------------------
newok=0; i=0; NEWT=""
while [ $i -lt $NNEW ]; do
  p=$((FIRST + NL - 1 - i)); t0=$(uptime_s)
  timeout 30 rigcm connect "$IP:0" "$IP:$p" 25 > "$OUT/new-$p.log" 2>&1; rc=$?; t=$(elapsed "$t0")
  [ $rc = 0 ] && lt "$t" "$STALL_S" && newok=$((newok+1)); NEWT="$NEWT $t"; i=$((i+1))
done
role_check "$ROLE" new-connects "new connections to the last $NNEW listeners: $newok connected in < ${STALL_S}s (s:$NEWT)" test "$newok" = "$NNEW"
kill -TERM $LP; wait $LP 2>/dev/null
sleep 1
dump "$OUT/dump-end.txt"; nend=$DUMP_N
role_check "$ROLE" end-empty "mappings left once every listener is closed: $nend; FD store: $(st stored)" sh -c "[ $nend = 0 ] && [ \"\$(sed -n 's/^stored //p' $CTL/state)\" = 0 ]"
fdstore_stop

fig listeners "$NL"
fig mappings_before "$nb"
fig mappings_after "$na"
fig mappings_lost "$lost"
fig probe_rounds "${rounds:--}"
fig probe_free_binds "${free:--}"
fig port_mapped "$npm"
fig inherited_ports "${inh:--}"
fig restart_to_ready_s "$(echo "$T0 $TREADY" | awk '{printf "%.2f", $2-$1}')"
fig restart_to_settled_s "$(echo "$T0 $TSET" | awk '{printf "%.2f", $2-$1}')"
fig loop_connects "$(cat "$OUT"/loop-*.txt | awk '{n++; if ($1) f++} END {printf "%d/%d", n-f, n}')"
fig new_connects "$newok/$NNEW"
cat "$FIGS" >> "$SUM"
cat "$SUM"
finish
