#!/bin/sh
# Suite "flood6": spoofed IPv6 REQUESTs in the port-mapped shape, and an IPv6 blind-ACK
# sweep, against the UDP peer port 3935, for several daemons in ONE boot (ours and the C
# iwpmd), with a comparison table. Run by run-all in port-mapped mode (portmap=1).
#
# One VM: siw0 on veth0 (10.88.0.1, fd00:88::1, the victim host, also the legitimate peer:
# rping to its own IPv6 address); the attacker is fd00:88::3 on veth1. Per daemon
# (untraced), two live listeners: rping -s -P on [fd00:88::1]:PORT (IPv6, specific) and on
# 0.0.0.0:PORT+1 (an IPv4 wildcard), then three phases between snapshots:
#   spec  COUNT REQUESTs for [fd00:88::1]:PORT from NETS spoofed /64 sources
#         (fd66:0:0:N::1, PER from each in turn; cp = the source, mapped cp port != cp port,
#         random ports and handles; `rigflood flood request-pm -S`), never ACKed (their
#         answers go to addresses nobody holds), with IPv6 rping -C 1 to the specific
#         listener while it sends (1..3 times)
#   wild  the same for [fd00:88::1]:PORT+1: the IPv4 wildcard listener's port asked over
#         IPv6 (the kernel never connects IPv6 to it, so a REMOTE_INFO for it is never
#         consumed)
#   sweep ROUNDS rounds, from the attacker's own address, of one port-mapped REQUEST for the
#         specific listener followed by its 1024 blind ACKs (every pmtime x version bits:
#         a sweep of a ten-bit cookie; `rigflood flood sweep`)
# Figures per phase: kernel Slab/SUnreclaim growth (every REMOTE_INFO stays in the kernel
# until a connection consumes it), datagrams sent, daemon RSS growth; IPv6 rping times
# quiet and during the spec flood.
# Checks (every daemon but the reference one; the reference is reported only):
#   slab6-spec, slab6-wild, slab6-sweep  SUnreclaim growth <= max(10 % of the reference's,
#         400 kB) in the same boot
#   rss6      daemon VmRSS growth over the three phases <= 4096 kB
#   rping6    median IPv6 rping -C 1 during the spec flood <= max(2 x the quiet median,
#             FLOOR s), none failed, none >= STALL_S
#   alive6    daemon alive afterwards, the IPv6 listener in the SIGUSR1 dump
# Output: flood6-table.txt, flood6-results.txt ("daemon key value"), flood6-DAEMON-PHASE.txt
# (the flooder's output), rping6-DAEMON-*.log.
# Knobs: daemons=PATH,PATH [/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd]  reference=PATH
#        [/usr/sbin/iwpmd]  count=N [16000]  nets=N [50]  per=N [320]  rate=R [2000]
#        rounds=N [100]  sweep_rate=R [20000]  rping_floor=S [1.0]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
DAEMONS=$(echo "${RIG_DAEMONS:-/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd}" | tr ',' ' ')
REF=${RIG_REFERENCE:-/usr/sbin/iwpmd}
COUNT=${RIG_COUNT:-16000}; NETS=${RIG_NETS:-50}; PER=${RIG_PER:-320}; RATE=${RIG_RATE:-2000}
ROUNDS=${RIG_ROUNDS:-100}; SRATE=${RIG_SWEEP_RATE:-20000}; FLOOR=${RIG_RPING_FLOOR:-1.0}
IP6=fd00:88::1; ATK6=fd00:88::3

setup_net
ip -6 addr add "$IP6/64" dev "$DEV" nodad
ip -6 addr add "$ATK6/64" dev veth1 nodad
note "kernel $(uname -r); siw0 on $DEV ($IP, $IP6; port_map $(cat /sys/module/siw/parameters/port_map 2>/dev/null || echo none)); attacker $ATK6 (veth1); daemons: $DAEMONS (reference $REF)"
note "flood6: $COUNT port-mapped IPv6 REQUESTs at ${RATE}/s from $NETS spoofed /64s ($PER each in turn), at a specific IPv6 listener and at an IPv4 wildcard listener's port; sweep: $ROUNDS x (REQUEST + 1024 blind ACKs) at ${SRATE}/s"
start_syslog

. "$RIG_LIB_DIR/attack.sh"
# rping6 PORT LOG: one IPv6 rping -C 1 to the specific listener; sets T1 and R1 as rping1
rping6() {
  local t0; t0=$(uptime_s)
  timeout 30 rping -c -a "$IP6" -p "$1" -C 1 -v > "$2" 2>&1; R1=$?
  T1=$(elapsed "$t0")
  if grep -q '^ping data' "$2"; then R1=0; else [ $R1 != 0 ] || R1=99; fi
}
median() { echo $* | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {printf "%.2f", (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
# phase NAME ARGS...: snapshot, rigflood ARGS, snapshot; the figures as "$tag NAME_key" lines
phase() {
  local name=$1 f="$OUT/flood6-$tag-$1.txt"; shift
  snap b
  rigflood flood "$@" -l 1000 > "$f" 2>&1
  snap a
  burst_figures "${name}_" "$(grep '^sent=' "$f")" >> "$R"
  log "$tag $name: $(grep '^sent=' "$f"); SUnreclaim +$(( a_sunr - b_sunr )) kB, RSS +$(( a_rss - b_rss )) kB"
}

R="$OUT/flood6-results.txt"; : > "$R"
port=7800
for d in $DAEMONS; do
  IWPMD=$d; tag=$(basename "$d")
  start_iwpmd "" || { bad "start-$tag" "$d did not start"; continue; }
  # (port-mapped: each listener appears on its mapped port, so wait for a new LISTEN
  # socket rather than for :port, which never shows)
  listen_snap /tmp/ls6
  rping -s -P -a "$IP6" -p $port > "$OUT/rping6-$tag-server.log" 2>&1 & sp=$!
  new_listen /tmp/ls6 > /dev/null || log "no new listener for [$IP6]:$port after 10s"
  listen_snap /tmp/ls6
  rping -s -P -a 0.0.0.0 -p $((port+1)) > "$OUT/rping6-$tag-wild-server.log" 2>&1 & wp=$!
  new_listen /tmp/ls6 > /dev/null || log "no new listener for 0.0.0.0:$((port+1)) after 10s"
  qt=""; qf=0
  for i in 1 2; do rping6 $port "$OUT/rping6-$tag-quiet-$i.log"; qt="$qt $T1"; [ "$R1" = 0 ] || qf=$((qf+1)); done
  snap s
  # spec: the flood in the background, IPv6 rpings while it sends
  snap b
  f="$OUT/flood6-$tag-spec.txt"
  rigflood flood request-pm "$IP6" "$COUNT" -a "[$IP6]:$port" -c fd66::1 -S "$NETS" -K "$PER" -r "$RATE" -l 1000 > "$f" 2>&1 & fp=$!
  sleep 0.5; ft=""; ff=0; fw=0; i=0
  while [ $i -lt 3 ]; do
    if [ $i -gt 0 ] && grep -q '^send-done' "$f"; then break; fi
    rping6 $port "$OUT/rping6-$tag-flood-$i.log"
    ft="$ft $T1"; [ "$R1" = 0 ] || ff=$((ff+1)); lt "$fw" "$T1" && fw=$T1
    i=$((i+1))
  done
  wait $fp
  snap a
  burst_figures spec_ "$(grep '^sent=' "$f")" >> "$R"
  log "$tag spec: $(grep '^sent=' "$f"); SUnreclaim +$(( a_sunr - b_sunr )) kB, RSS +$(( a_rss - b_rss )) kB; rping6:$ft"
  phase wild request-pm "$IP6" "$COUNT" -a "[$IP6]:$((port+1))" -c fd66::1 -S "$NETS" -K "$PER" -r "$RATE"
  phase sweep sweep "$IP6" "$ROUNDS" -b "$ATK6" -a "[$IP6]:$port" -c "$ATK6" -r "$SRATE"
  alive=0; kill -0 "$IWPMD_PID" 2>/dev/null && alive=1
  iwpmd_dump "$OUT/dump6-$tag.txt"; dump_pairs "$OUT/dump6-$tag.txt" > "$OUT/pairs6-$tag.txt"
  listed=0; grep -F "$IP6" "$OUT/pairs6-$tag.txt" | grep -q ":$port[^0-9]" && listed=1
  {
    echo "$tag rss_kb $(( a_rss - s_rss ))"
    echo "$tag rss_after_kb $a_rss"
    echo "$tag rping_quiet $(echo $qt | tr ' ' '/')"
    echo "$tag rping_quiet_median $(median $qt)"
    echo "$tag rping_flood $(echo $ft | tr ' ' '/')"
    echo "$tag rping_flood_median $(median $ft)"
    echo "$tag rping_flood_worst $fw"
    echo "$tag rping_fails $((qf + ff))"
    echo "$tag alive $alive"
    echo "$tag listed $listed"
  } >> "$R"
  kill $sp $wp 2>/dev/null; wait $sp $wp 2>/dev/null
  stop_iwpmd
  port=$((port+10))
done

# ---- comparison table (daemons in columns, in the order run) ---------------------------
table_tags
{
  echo "IPv6 REQUEST floods in the port-mapped shape: $COUNT REQUESTs at ${RATE}/s from $NETS spoofed /64s ($PER each in turn),"
  echo "never ACKed; spec: at [$IP6]:P (an IPv6 listener); wild: at [$IP6]:P+1 (an IPv4 wildcard listener's port);"
  echo "sweep: $ROUNDS x (REQUEST + 1024 blind ACKs, every pmtime x version) from $ATK6 at ${SRATE}/s. siw port-mapped."
  table_head
  for ph in spec wild sweep; do
    echo "-- $ph"
    burst_rows "${ph}_"
    row "datagrams sent" ${ph}_sent
    row "daemon RSS growth, kB" ${ph}_rss_kb
  done
  echo "-- whole run"
  row "daemon RSS growth over the three phases, kB" rss_kb
  row "daemon RSS after, kB" rss_after_kb
  row "IPv6 rping -C 1, quiet, s" rping_quiet
  row "IPv6 rping -C 1 during the spec flood, s" rping_flood
  row "rping failures" rping_fails
  row "daemon alive after (1 = yes)" alive
  row "IPv6 listener in the SIGUSR1 dump (1 = yes)" listed
} | save_table flood6

# ---- checks: every daemon but the reference ---------------------------------------------
ref_figures spec_sent
for d in $DAEMONS; do
  [ "$d" = "$REF" ] && continue
  t=$(basename "$d")
  [ -n "$(val "$t" spec_sent)" ] || continue
  for ph in spec wild sweep; do
    s=$(val "$t" ${ph}_sunr_kb); rs=$(val "$reft" ${ph}_sunr_kb)
    if [ $have_ref = 1 ]; then
      lim=$(echo "${rs:-0}" | awk '{v=$1/10; if (v<400) v=400; printf "%d", v}')
      check "slab6-$ph-$t" "$ph: kernel SUnreclaim growth ${s} kB <= max(10 % of $reft's ${rs} kB, 400 kB) = ${lim} kB" \
        test "$s" -le "$lim"
    else check "slab6-$ph-$t" "$ph: kernel SUnreclaim growth ${s} kB <= 400 kB (no $reft run to compare with)" test "$s" -le 400; fi
  done
  r=$(val "$t" rss_kb)
  check "rss6-$t" "daemon RSS growth over the three phases ${r} kB <= 4096 kB" test "$r" -le 4096
  qm=$(val "$t" rping_quiet_median); fm=$(val "$t" rping_flood_median); fw=$(val "$t" rping_flood_worst); rf=$(val "$t" rping_fails)
  lim=$(echo "$qm $FLOOR" | awk '{v=2*$1; if (v<$2) v=$2; printf "%.2f", v}')
  r=1; [ "$rf" = 0 ] && ! lt "$lim" "$fm" && lt "$fw" "$STALL_S" && r=0
  check "rping6-$t" "median IPv6 rping -C 1 during the spec flood ${fm}s <= max(2 x quiet median ${qm}s, floor ${FLOOR}s) = ${lim}s; worst ${fw}s < ${STALL_S}s; failures: $rf" test $r = 0
  check "alive6-$t" "daemon alive after the floods ($(val "$t" alive)), IPv6 listener in the SIGUSR1 dump ($(val "$t" listed))" \
    sh -c "[ $(val "$t" alive) = 1 ] && [ $(val "$t" listed) = 1 ]"
done
cat "$SUM"
finish
