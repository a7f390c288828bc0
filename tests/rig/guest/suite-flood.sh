#!/bin/sh
# Suite "flood": a spoofed-REQUEST flood against the UDP peer port 3935, for several
# daemons in ONE boot (ours and the C iwpmd), with a comparison table.
#
# One VM: siw0 on veth0 (10.88.0.1, the victim host, also the legitimate peer: rping to
# its own address); the attacker is a second address on veth1 (10.88.0.3), so the flood
# never comes from the legitimate peer's address. Per daemon (run untraced):
#   1. daemon + a live listener (rping -s -P on 10.88.0.1:PORT); one rping -C 1 (no flood)
#   2. garbage flood: COUNT random 64-byte datagrams with an invalid IP-version nibble,
#      rping -C 1 (1..3 times) while it runs: the baseline
#   3. snapshot: /proc/meminfo Slab + SUnreclaim, /proc/net/snmp Udp counters, daemon VmRSS
#      and open fds
#   4. REQUEST flood: COUNT well-formed REQUESTs for the listener (ap), each with a random
#      association handle, cp = mapped_cp = the attacker's IP with random ports, from one
#      socket; rping -C 1 (1..3 times) while it runs; the flooder drains and counts every
#      answer for LINGER ms after its last send (the C daemon retransmits ACCEPTs ~10 s)
#   5. snapshot again; SIGUSR1 dump; daemon stopped
# Figures: kernel slab growth (every REMOTE_INFO the daemon pushes stays in the kernel until
# a matching connection consumes it, i.e. forever for spoofed ones), datagrams sent back
# to the flooder, daemon RSS/fd growth, legitimate connect times during each flood.
# Checks (every daemon but the reference one; the reference's figures are only reported):
#   slab        kernel SUnreclaim growth <= 10 % of the reference's (same boot)
#   sent-back   datagrams back to the flooder <= REQUESTs the daemon read: at most one
#               48-byte answer per 64-byte REQUEST, no amplification. (Ours answers every
#               REQUEST it reads, statelessly, as SYN cookies do: a per-source cap on
#               answers would let a flood from, or spoofed as, a host deny that host's real
#               connects. The reference reads few but sends ten ACCEPTs per REQUEST.)
#   rss         daemon VmRSS growth <= 1024 kB
#   rping       median rping -C 1 during the REQUEST flood <= max(2 x median during the
#               garbage flood, FLOOR s); the absolute floor (rping_floor, 1.0 s) keeps
#               TCG jitter (say 0.2 s vs 0.5 s) from failing the check; the median (of up
#               to 3) keeps one retransmitted peer message (+1-2 s when a flooded socket
#               dropped it) from deciding alone; and no rping failed or took >= STALL_S (5 s,
#               the rig's stall limit: a 10 s port-mapper timeout shows up there)
#   alive       daemon alive afterwards, fd count unchanged, SIGUSR1 dump lists the listener
# Output: flood-table.txt (the comparison), flood-results.txt (one "daemon key value" per
# line), flood-snap-DAEMON.txt (raw Slab/SUnreclaim kB, Udp InDatagrams/OutDatagrams/
# RcvbufErrors, VmRSS kB, fds: before / after), flood-DAEMON-MODE.txt (the flooder's
# output), rping-DAEMON-*.log.
# Knobs: daemons=PATH,PATH [/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd]  reference=PATH
#        [/usr/sbin/iwpmd]  count=N [100000]  rate=R datagrams/s [20000, 0 = unpaced]
#        linger=MS [12000]  rping_floor=S [1.0]  flood_cp=IP [attacker address]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
DAEMONS=$(echo "${RIG_DAEMONS:-/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd}" | tr ',' ' ')
REF=${RIG_REFERENCE:-/usr/sbin/iwpmd}
COUNT=${RIG_COUNT:-100000}; RATE=${RIG_RATE:-20000}; LINGER=${RIG_LINGER:-12000}
FLOOR=${RIG_RPING_FLOOR:-1.0}
ATK=10.88.0.3; FLOOD_CP=${RIG_FLOOD_CP:-$ATK}

setup_net
ip addr add "$ATK/24" dev veth1
note "kernel $(uname -r); siw0 on $DEV ($IP); attacker $ATK (veth1); daemons: $DAEMONS (reference $REF)"
note "flood: $COUNT x 64 bytes to $IP:3935 at ${RATE}/s (0 = unpaced), answers drained ${LINGER} ms after the last send; REQUEST cp = mapped_cp = $FLOOD_CP, random ports and handles"
start_syslog

. "$RIG_LIB_DIR/attack.sh"
# flood_phase MODE TAG PORT: flood in the background, rping -C 1 while it is still sending
# (at least once, at most 3 times); sets FT (rping times), FWORST, FMED (median), FFAILS, FDURING (rpings
# that ended before the flood's last send), FLINE (the flooder's result line)
flood_phase() {
  local mode=$1 tag=$2 port=$3 f="$OUT/flood-$2-$1.txt" fp i=0 lg=$LINGER
  [ "$mode" = garbage ] && lg=1000
  rigflood flood "$mode" "$IP" "$COUNT" -b "$ATK" -a "$IP:$port" -c "$FLOOD_CP" -r "$RATE" -l "$lg" > "$f" 2>&1 & fp=$!
  sleep 0.5
  FT=""; FWORST=0; FFAILS=0; FDURING=0
  while [ $i -lt 3 ]; do
    if [ $i -gt 0 ] && grep -q '^send-done' "$f"; then break; fi
    rping1 "$port" "$OUT/rping-$tag-$mode-$i.log"
    grep -q '^send-done' "$f" || FDURING=$((FDURING+1))
    FT="$FT $T1"; [ "$R1" = 0 ] || FFAILS=$((FFAILS+1))
    lt "$FWORST" "$T1" && FWORST=$T1
    i=$((i+1))
  done
  wait $fp
  FMED=$(echo $FT | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {printf "%.2f", (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')
  FLINE=$(grep '^sent=' "$f")
  log "$tag $mode flood: $FLINE; rping -C 1:$FT ($FDURING ended while the flood was sending, $FFAILS failed)"
}

R="$OUT/flood-results.txt"; : > "$R"
port=7600
for d in $DAEMONS; do
  begin_daemon "$d" $port || continue
  tq=$T1; rq=$R1
  log "$tag: rping -C 1 with no flood: ${tq}s rc=$rq"
  # 2. garbage baseline
  snap g
  flood_phase garbage "$tag" $port
  g_line=$FLINE; g_t=$FT; g_worst=$FWORST; g_med=$FMED; g_fails=$FFAILS; g_during=$FDURING
  # 3.-4. REQUEST flood between two snapshots (g: before the garbage flood, for its drops)
  snap b
  flood_phase request "$tag" $port
  snap a
  q_line=$FLINE
  for v in slab sunr udpin udpout rcvbuf rss fds; do eval "echo $v \$b_$v \$a_$v"; done \
    > "$OUT/flood-snap-$tag.txt"   # raw figures before / after the REQUEST flood
  daemon_after $port
  sent=$(kv "$q_line" sent)
  {
    burst_figures "" "$q_line"
    echo "$tag udp_out_extra $(( a_udpout - b_udpout - ${sent:-0} ))"
    echo "$tag rss_after_kb $a_rss"
    echo "$tag fds ${b_fds}->${a_fds}"
    echo "$tag rping_quiet $tq"
    echo "$tag rping_garbage $(echo $g_t | tr ' ' '/')"
    echo "$tag rping_request $(echo $FT | tr ' ' '/')"
    echo "$tag rping_garbage_worst $g_worst"
    echo "$tag rping_request_worst $FWORST"
    echo "$tag rping_garbage_median $g_med"
    echo "$tag rping_request_median $FMED"
    echo "$tag rping_medians $g_med/$FMED"
    echo "$tag garbage_read_drops $(( b_udpin - g_udpin ))/$(( b_rcvbuf - g_rcvbuf ))"
    echo "$tag rping_fails $((g_fails + FFAILS + (rq != 0)))"
    echo "$tag rping_during ${g_during}/${FDURING}"
    echo "$tag send_s $(kv "$g_line" send_s)/$(kv "$q_line" send_s)"
  } >> "$R"
  end_daemon
  port=$((port+10))
done

# ---- comparison table (daemons in columns, in the order run) ---------------------------
table_tags
{
  echo "REQUEST flood: $COUNT x 64-byte IPv4 REQUESTs at ${RATE}/s (0 = unpaced) from $ATK to $IP:3935, ap = the live"
  echo "listener, cp = mapped_cp = $FLOOD_CP with random ports and handles; garbage flood: same count and rate."
  echo "Kernel and daemon figures: REQUEST flood only (before it, and ${LINGER} ms after its last send)."
  table_head
  burst_rows ""
  row "REQUESTs sent by the flooder" sent
  row "datagrams read by the daemon (Udp In - answers)" read
  row "datagrams back to the flooder" back
  row "  of which ACCEPT/REJECT/other" back_types
  row "host UDP out beyond the flood" udp_out_extra
  row "UDP receive-buffer drops (RcvbufErrors)" rcvbuf_drops
  row "garbage flood: datagrams read/dropped" garbage_read_drops
  row "daemon RSS growth, kB" rss_kb
  row "daemon RSS after, kB" rss_after_kb
  row "daemon open fds before->after" fds
  row "rping -C 1, no flood, s" rping_quiet
  row "rping -C 1 during the garbage flood, s" rping_garbage
  row "rping -C 1 during the REQUEST flood, s" rping_request
  row "rping median garbage/REQUEST, s" rping_medians
  row "rpings ended while sending (garbage/REQUEST)" rping_during
  row "rping failures" rping_fails
  row "flood send time garbage/REQUEST, s" send_s
  after_rows flood
} | save_table flood

# ---- checks: every daemon but the reference ---------------------------------------------
ref_figures sent
for d in $DAEMONS; do
  [ "$d" = "$REF" ] && continue
  t=$(basename "$d")
  [ -n "$(val "$t" sent)" ] || continue
  s=$(val "$t" sunr_kb); rs=$(val "$reft" sunr_kb)
  if [ $have_ref = 1 ]; then
    lim=$(slab_limit "$rs")
    check "slab-$t" "kernel SUnreclaim growth ${s} kB <= 10 % of $reft's ${rs} kB (${lim} kB); Slab ${t} $(val "$t" slab_kb) kB, $reft $(val "$reft" slab_kb) kB" \
      test "$s" -le "$lim"
  else note "slab-$t: no $reft run in this boot to compare with (SUnreclaim growth ${s} kB)"; fi
  b=$(val "$t" back); rd=$(val "$t" read); rb=$(val "$reft" back)
  if [ $have_ref = 1 ]; then
    check "sent-back-$t" "${b} datagrams back to the flooder <= ${rd} read, one 48-byte answer per 64-byte REQUEST at most ($reft: ${rb} back for $(val "$reft" read) read)" \
      test "$b" -le "$rd"
  else check "sent-back-$t" "${b} datagrams back to the flooder <= ${rd} read" test "$b" -le "$rd"; fi
  r=$(val "$t" rss_kb)
  check "rss-$t" "daemon RSS growth ${r} kB <= 1024 kB" test "$r" -le 1024
  gm=$(val "$t" rping_garbage_median); qm=$(val "$t" rping_request_median); rf=$(val "$t" rping_fails)
  qw=$(val "$t" rping_request_worst)
  lim=$(echo "$gm $FLOOR" | awk '{v=2*$1; if (v<$2) v=$2; printf "%.2f", v}')
  r=1; [ "$rf" = 0 ] && ! lt "$lim" "$qm" && lt "$qw" "$STALL_S" && r=0
  check "rping-$t" "median rping -C 1 during the REQUEST flood ${qm}s <= max(2 x ${gm}s median during garbage, floor ${FLOOR}s) = ${lim}s; worst ${qw}s < ${STALL_S}s; rping failures: $rf" test $r = 0
  fd=$(val "$t" fds)
  check "alive-$t" "daemon alive after the flood ($(val "$t" alive)), fds unchanged ($fd), listener in the SIGUSR1 dump ($(val "$t" listed))" \
    sh -c "[ $(val "$t" alive) = 1 ] && [ ${fd%->*} = ${fd#*->} ] && [ $(val "$t" listed) = 1 ]"
done
for d in $DAEMONS; do
  [ "$d" = "$REF" ] && note "reference $reft (reported, not checked): alive $(val "$reft" alive), fds $(val "$reft" fds), listener in dump $(val "$reft" listed), rping failures $(val "$reft" rping_fails)"
done
cat "$SUM"
finish
