#!/bin/sh
# Suite "pmops" (run by ../run-2vm.sh, like pm): what an operator of port-mapped hardware
# meets besides plain connects, on the real kernel with siw.port_map=1 (the rig's patched
# kernel; see suite-pm.sh). Server (10.77.0.1) and client (10.77.0.2), any daemon on each.
# Phases (both sides in step through flags in the share):
#   restart  a persistent rping connection (server :7702; lib.sh's live_client, up to four
#            clients when siw lost a client's first message); then each side in turn (server
#            first) SIGKILLs its daemon and starts a new one while a probe binds every
#            mapped port of that side over and over (0.0.0.0, no SO_REUSEADDR; with the
#            rig's net patch siw's own sockets hold no port, so only the daemon's
#            reservation keeps the host off it). store=1: the daemon runs behind the rig's
#            FD store stand-in (tools/rigfdstore.c), which starts the new one with the
#            stored sockets, and the probe must never get a port (zero gap); without the
#            store the gap is reported. Checks: the dump after = the dump before (local ->
#            mapped), the live connection still exchanges data, a new connection to a
#            restored listener (rigcm on :7703) connects (< connect_max_ms), at the end every mapping
#            goes with its REMOVE and its port is free again.
#   exhaust  the server restarts its daemon under a tiny ip_local_port_range (4 ports) and
#            opens 6 listeners: 4 get mapped ports, the daemon logs the exhaustion (ours: a
#            clear "out of ports" line) and keeps serving; what the kernel does with the
#            listens it could not map (it falls back to the unmapped address) is recorded;
#            the client connects to all 6; once closed the 4 ports are free again
#   mixed    the client re-adds siw0 with port_map=0 (NO_PORT_MAP, like plain siw next to
#            hardware in one cluster): connects both ways, and each passive kernel reports
#            the peer's real (unmapped) address
# Knobs: role, hostid, peer, sync (run-2vm.sh); iwpmd=PATH, iwpmd_args=A,B; store=0|1 [0]
#        (ours only: behind the FD store stand-in, zero gap judged); connect_max_ms [1000]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
ROLE=${RIG_ROLE:?rig.role=server|client}; PEER=${RIG_PEER:?rig.peer=ADDR}
CMAX=${RIG_CONNECT_MAX_MS:-1000}; STORE=${RIG_STORE:-0}
if [ "$ROLE" = server ]; then OTHER=client; else OTHER=server; fi
OURS=0; [ "$(basename "$IWPMD")" = iwpmd-rs ] && OURS=1
[ $OURS = 1 ] || STORE=0
RIG_PORTMAP=${RIG_PORTMAP:-1}
FIGS="$OUT/pmops-figures.txt"; : > "$FIGS"
STATE=/tmp/iwpmd-state; mkdir -p $CTL

setup_net
note "kernel $(uname -r); role $ROLE; siw0 on $DEV ($IP, port_map $RIG_PORTMAP); peer $PEER; daemon $IWPMD $IWPMD_ARGS; FD store $STORE"
start_syslog
dmesg_mark

# daemon_up: the first daemon (behind the FD store stand-in with store=1)
daemon_up() {
  if [ $STORE = 1 ]; then fdstore_start $IWPMD --systemd --fd-store --state-file $STATE
  else start_iwpmd; fi
}
# daemon_again HOW: a new daemon after the old one is gone (HOW: kill9 or term); with the
# store, the stand-in starts it with the stored sockets (as systemd's Restart= does)
daemon_again() {
  if [ $STORE = 1 ]; then fdstore_again "$1"
  else
    if [ "$1" = kill9 ]; then kill9_iwpmd; else stop_iwpmd; fi
    start_iwpmd
  fi
}
check start "daemon up" daemon_up
mkdir -p "$SYNC"; echo "$IWPMD $IWPMD_ARGS store=$STORE" > "$SYNC/$ROLE.daemon"
flag "$ROLE.up"; wait_flag "$OTHER.up" 120
check ping "ICMP ping $PEER" sh -c "ping -c 2 -W 5 $PEER > $OUT/ping.txt 2>&1"
siw_add_plain() { RIG_PORTMAP=0 siw_add "$DEV" siw0 && [ "$(cat /sys/module/siw/parameters/port_map)" = N ]; }
local_mapped() { dump_pairs "$1" | sed 's/([^)]*)//g; s/IPV[46] //g' | awk '{print $1, $3}' | sort; }

# ---- restart: each side's daemon SIGKILLed with a live port-mapped connection ----
T_PH=$(uptime_s)
if [ "$ROLE" = server ]; then
  listen_snap /tmp/ls0
  rping -s -P -a "$IP" -p 7702 > "$OUT/rping-live-server.log" 2>&1 & LSP=$!
  la=$(new_listen /tmp/ls0); SMP=$(port_of "$la"); echo "$SMP" > "$SYNC/smp"
  check listen-mapped "listener $IP:7702 on the mapped $la" sh -c "[ -n '$SMP' ] && [ '$SMP' != 7702 ]"
  # a second listener for the new connections after each restart (rping's persistent
  # server does not always take a second client on a loaded TCG host)
  rigcm listen "$IP" 7703 1 600 > "$OUT/listen-7703.log" 2>&1 & RLP=$!
  waitfor 20 grep -q '^listening' "$OUT/listen-7703.log"
  flag r.listening
else
  wait_flag r.listening 60; SMP=$(cat "$SYNC/smp")
  # (lib.sh's live_client: another client when siw lost the first one's first message)
  live_client 7702; LCP=$cp; fig live_tries "$try"
  check live "live rping client to $PEER:7702 (mapped :$SMP) exchanging data (try $try)" grep -q 'ping data' "$live_log"
fi
flag "r.$ROLE.live"; wait_flag "r.$OTHER.live" 60
for side in server client; do
  if [ "$ROLE" = "$side" ]; then
    iwpmd_dump "$OUT/dump-before-$side.txt"; local_mapped "$OUT/dump-before-$side.txt" > /tmp/lm-before
    mapped_ports "$OUT/dump-before-$side.txt" > /tmp/ports.txt
    check "mapped-$side" "$DUMP_N mappings before the SIGKILL, every one mapped != local: $(mapped_differs "$OUT/dump-before-$side.txt")" \
      sh -c "[ $DUMP_N -ge 1 ] && [ $(mapped_differs "$OUT/dump-before-$side.txt") = yes ]"
    # (without a store the reservation dies with the daemon: the gap is real, and shown)
    restart_kill9 /tmp/ports.txt "-$side"; [ $STORE = 1 ] || sleep 2
    gap_check "no-gap-$side"
    check "restart-$side" "SIGKILL + new daemon up in ${RESTART_S}s (pid $IWPMD_PID)" test $RESTART_RC = 0
    fig "restart_${side}_s" "$RESTART_S"; fig "probe_${side}_free_binds" "$GAP_FREE"; fig "probe_${side}_rounds" "$GAP_ROUNDS"
    iwpmd_dump "$OUT/dump-after-$side.txt"; local_mapped "$OUT/dump-after-$side.txt" > /tmp/lm-after
    d=$(diff /tmp/lm-before /tmp/lm-after)
    check "kept-$side" "the restarted daemon's dump lists the same $(wc -l < /tmp/lm-before) local -> mapped pairs" test -z "$d"
    detail "$d"
    flag "r.$side.restarted"
  else
    wait_flag "r.$side.restarted" 90
  fi
  # the live connection still runs, and a new one reaches the restored listener
  if [ "$ROLE" = client ]; then
    # (rping's output to a file is block-buffered: a new block every few seconds)
    n0=$(grep -c 'ping data' "$live_log")
    waitfor 12 sh -c "[ \$(grep -c 'ping data' $live_log) -gt $n0 ]"
    n1=$(grep -c 'ping data' "$live_log")
    check "live-after-$side" "live connection after the $side's restart: $n0 -> $n1 ping lines" \
      sh -c "kill -0 $LCP 2>/dev/null && [ $n1 -gt $n0 ]"
    timeout 30 rigcm connect "$IP:0" "$PEER:7703" 20 > "$OUT/connect-new-$side.log" 2>&1; rc=$?
    ms=$(sed -n 's/^connected .* ms=\([0-9.]*\).*/\1/p' "$OUT/connect-new-$side.log" | head -1); fig "new_after_${side}_ms" "${ms:-none}"
    r=1; [ $rc = 0 ] && [ -n "$ms" ] && lt "$ms" "$CMAX" && r=0
    check "new-after-$side" "new connection to the restored listener $PEER:7703 after the $side's restart: $(head -1 "$OUT/connect-new-$side.log") (limit $CMAX ms)" test $r = 0
    flag "r.$side.checked"
  else
    wait_flag "r.$side.checked" 90
  fi
done
# both closed: every mapping goes (REMOVE for restored mappings too), its port with it
if [ "$ROLE" = client ]; then kill $LCP; wait $LCP 2>/dev/null; flag r.client.closed
else wait_flag r.client.closed 60; kill $LSP $RLP; wait $LSP $RLP 2>/dev/null; fi
sleep 1; waitfor 5 sh -c '! ss -tanH | grep -q ":7702 "'
iwpmd_dump "$OUT/dump-closed.txt"; nfree=0; nport=0
for p in $(cat /tmp/ports.txt); do nport=$((nport+1)); host_bind_freed "$p" && nfree=$((nfree+1)); done
check closed "after both restarts and the close: dump lists $DUMP_N mappings; $nfree of $nport mapped ports bindable again" \
  sh -c "[ $DUMP_N = 0 ] && [ $nfree = $nport ]"
flag "r.$ROLE.done"; wait_flag "r.$OTHER.done" 60
note "phase restart: $(elapsed "$T_PH") s"

check_dmesg dmesg-restart

# ---- exhaust: 6 listeners, 4 ports ----
# (the kernel logs each refused mapping: iwpm_mapping_error_cb err code 11 on the server,
# a Reject for the QUERYs of the unmapped listeners on the client; kept, not judged)
T_PH=$(uptime_s); dmesg_mark
RANGE0=$(cat /proc/sys/net/ipv4/ip_local_port_range)
if [ "$ROLE" = server ]; then
  echo "40000 40003" > /proc/sys/net/ipv4/ip_local_port_range
  check exhaust-restart "daemon restarted under ip_local_port_range 40000-40003 (was $RANGE0)" daemon_again term
  n0=$(wc -l < "$SYSLOG")
  listen_snap /tmp/ls0
  rigcm listen "$IP" 7730 6 120 > "$OUT/listen-exhaust.log" 2>&1 & XLP=$!
  waitfor 40 grep -q '^listening' "$OUT/listen-exhaust.log"; sleep 1
  ss -ltnH | awk '{print $4}' > /tmp/ls-now; only_in /tmp/ls-now /tmp/ls0 > "$OUT/exhaust-listeners.txt"
  nin=$(awk '{p=$1; sub(/.*:/, "", p); if (p >= 40000 && p <= 40003) n++} END {print n+0}' "$OUT/exhaust-listeners.txt")
  nun=$(awk '{p=$1; sub(/.*:/, "", p); if (p >= 7730 && p <= 7735) n++} END {print n+0}' "$OUT/exhaust-listeners.txt")
  iwpmd_dump "$OUT/dump-exhaust.txt"; nmap=$DUMP_N
  tail -n +$((n0+1)) "$SYSLOG" | grep -v 'print_iwpm\|Mapping #\|address' > "$OUT/syslog-exhaust.txt"
  fig exhaust_listen "$(head -1 "$OUT/listen-exhaust.log")"; fig exhaust_mapped_listeners "$nin"; fig exhaust_unmapped_listeners "$nun"; fig exhaust_dump "$nmap"
  check exhaust-mapped "6 listens, 4 ports: $nin TCP listeners on the 4 ports of the range, $nun on their unmapped ports (the kernel's fallback), the dump lists $nmap mappings; rigcm: $(head -1 "$OUT/listen-exhaust.log")" \
    sh -c "[ $nin = 4 ] && [ $nmap = 4 ]"
  nlog=$(grep -c -i 'out of ports\|no free port\|Address already in use\|Unable to bind\|error' "$OUT/syslog-exhaust.txt")
  if [ $OURS = 1 ]; then
    check exhaust-log "the daemon says why: $(grep -i -m1 'out of ports' "$OUT/syslog-exhaust.txt" | sed 's/.*iwpmd[^:]*: //' | cut -c1-160)" \
      grep -qi 'out of ports' "$OUT/syslog-exhaust.txt"
  else
    REFERENCE="reference" info_ref exhaust-log "reported" "$nlog lines: $(grep -i -m1 'out of ports\|bind\|error' "$OUT/syslog-exhaust.txt" | sed 's/.*iwpmd[^:]*: //' | cut -c1-160)"
  fi
  check exhaust-alive "the daemon still runs (pid $IWPMD_PID)" kill -0 "$IWPMD_PID"
  flag x.listening; wait_flag x.connected 120
  kill $XLP; wait $XLP 2>/dev/null; sleep 1
  echo "$RANGE0" > /proc/sys/net/ipv4/ip_local_port_range
  iwpmd_dump "$OUT/dump-exhaust-end.txt"; nfree=0
  for p in 40000 40001 40002 40003; do host_bind_freed "$p" && nfree=$((nfree+1)); done
  check exhaust-released "listeners closed: dump lists $DUMP_N mappings, $nfree of the 4 ports bindable again" \
    sh -c "[ $DUMP_N = 0 ] && [ $nfree = 4 ]"
  flag x.done
else
  wait_flag x.listening 120; nok=0; XT=""
  for p in 7730 7731 7732 7733 7734 7735; do
    timeout 30 rigcm connect "$IP:0" "$PEER:$p" 20 > "$OUT/connect-exhaust-$p.log" 2>&1 && nok=$((nok+1))
    XT="$XT $(sed -n 's/^connected .* ms=\([0-9.]*\).*/\1/p' "$OUT/connect-exhaust-$p.log" | head -1)"
  done
  fig exhaust_connect_ms "$XT"
  slow=$(echo "$XT" | awk -v m="$CMAX" '{for (i=1; i<=NF; i++) if ($i+0 >= m) n++} END {print n+0}')
  check exhaust-connect "connects to the 6 listeners (4 mapped, 2 not): $nok connected (ms:$XT), $slow over ${CMAX} ms" \
    sh -c "[ $nok = 6 ] && [ $slow = 0 ]"
  flag x.connected; wait_flag x.done 120
fi
note "phase exhaust: $(elapsed "$T_PH") s"

dmesg | tail -n +$((DMESG_MARK+1)) > "$OUT/dmesg-exhaust.txt"
fig exhaust_dmesg_lines "$(grep -c iwpm "$OUT/dmesg-exhaust.txt")"

# ---- mixed: the client's siw0 in NO_PORT_MAP mode, the server's port mapped ----
T_PH=$(uptime_s); dmesg_mark
if [ "$ROLE" = client ]; then
  rdma link delete siw0; echo 0 > /sys/module/siw/parameters/port_map
  check mixed-plain "siw0 re-added with port_map=$(cat /sys/module/siw/parameters/port_map) (NO_PORT_MAP)" siw_add_plain
  flag m.plain
else
  wait_flag m.plain 60
fi
# mixed_serve CHECK PORT PEER_ADDR MAPPED(yes|no) WHEN LISTENING_FLAG CONNECTED_FLAG: a
# one-shot listener on PORT; the passive kernel must report the client as PEER_ADDR, and
# siw's TCP listener must (yes) or must not (no) sit on another, mapped port
mixed_serve() {
  local s la got
  listen_snap /tmp/ls0
  rigcm serve "$IP" "$2" 1 60 > "$OUT/serve-$1.log" 2>&1 & s=$!
  la=$(new_listen /tmp/ls0); flag "$5"; wait_flag "$6" 60; wait_or_kill $s 10
  got=$(sed -n 's/^conn n=1 peer=\([^ ]*\) .*/\1/p' "$OUT/serve-$1.log")
  if [ "$4" = yes ]; then
    check "$1" "port-mapped listener $IP:$2 (on $la) reports the client as ${got:-nothing} (its real $3)" \
      sh -c "[ '$got' = '$3' ] && [ '$(port_of "$la")' != '$2' ]"
  else
    check "$1" "plain listener $IP:$2 (on $la) reports the client as ${got:-nothing} (its real $3)" \
      sh -c "[ '$got' = '$3' ] && [ '$(port_of "$la")' = '$2' ]"
  fi
}
# mixed_connect CHECK FIGURE SRC DST: one connection, under connect_max_ms
mixed_connect() {
  local rc ms r=1
  rigcm connect "$3" "$4" 30 > "$OUT/connect-$1.log" 2>&1; rc=$?
  ms=$(sed -n 's/^connected .* ms=\([0-9.]*\).*/\1/p' "$OUT/connect-$1.log" | head -1); fig "$2" "${ms:-none}"
  [ $rc = 0 ] && [ -n "$ms" ] && lt "$ms" "$CMAX" && r=0
  check "$1" "$3 -> $4: $(head -1 "$OUT/connect-$1.log")" test $r = 0
}
# A: the server (port mapped) listens, the client (plain) connects; B: the other way round
if [ "$ROLE" = server ]; then
  mixed_serve mixed-passive-pm 7740 "$PEER:7760" yes m.a.listening m.a.connected
  wait_flag m.b.listening 60
  mixed_connect mixed-connect-pm mixed_pm_to_plain_ms "$IP:7761" "$PEER:7741"
  flag m.b.connected
else
  wait_flag m.a.listening 60
  mixed_connect mixed-connect-plain mixed_plain_to_pm_ms "$IP:7760" "$PEER:7740"
  flag m.a.connected
  mixed_serve mixed-passive-plain 7741 "$PEER:7761" no m.b.listening m.b.connected
fi
note "phase mixed: $(elapsed "$T_PH") s"

# ---- end ----
flag "$ROLE.closed"; wait_flag "$OTHER.closed" 60; sleep 1
iwpmd_dump "$OUT/dump-end.txt"
check released "all closed: SIGUSR1 dump lists $DUMP_N mappings" test "$DUMP_N" = 0
check_dmesg dmesg
flag "$ROLE.finished"; wait_flag "$OTHER.finished" 120
if [ $STORE = 1 ]; then fdstore_stop; else check stop "daemon exits on SIGTERM" stop_iwpmd; fi
cat "$F" >> "$SUM"
cat "$SUM"
finish
