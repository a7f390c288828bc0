#!/bin/sh
# Suite "pairs": blind REQUEST + ACK pairs against the UDP peer port 3935, for several
# daemons in ONE boot (ours and the C iwpmd), with a comparison table.
#
# One VM, as suite-flood: siw0 on veth0 (10.88.0.1, the victim, with a live listener
# rping -s -P on 10.88.0.1:PORT); the attacker is a second address on veth1 (10.88.0.3).
# The attacker sends COUNT pairs, each a well-formed REQUEST for the listener (random
# handle, cp = mapped_cp IP = the attacker's address, random ports) followed at once by
# the ACK written blind from it (same handle, cp echoed, ap = the listener: on siw the
# mapped address is the local one; version 0, pmtime 0, padding zero). It never reads an
# ACCEPT before its ACK, so a daemon that lets an ACK confirm the exchange (and hand the
# kernel its REMOTE_INFO, or give back a REMOTE_INFO budget token) is fed one REMOTE_INFO
# per pair, which the kernel keeps until a connection consumes it (i.e. for ever).
# Two shapes in turn, per daemon (untraced):
#   identity  the REQUEST's reserved (mapped cp) port = its cp port (siw's own shape)
#   pm        port-mapped: reserved port != cp port, same IP
# Per shape: snapshot (/proc/meminfo Slab + SUnreclaim, /proc/net/snmp Udp, daemon VmRSS
# and fds), the pairs (paced, answers drained and counted for LINGER ms after the last
# send), a wait until the daemon's :3935 socket is drained, snapshot again, then one
# legitimate rping -C 1 to the listener. At the end a SIGUSR1 dump.
# Checks (every daemon but the reference one; the reference is reported only):
#   slab-identity, slab-pm  kernel SUnreclaim growth <= 10 % of the reference's, same shape
#   rss      daemon VmRSS growth over both shapes <= 1024 kB
#   rping-identity, rping-pm  the rping after the pairs connects (ping data back), < STALL_S
#   alive    daemon alive afterwards, listener in the SIGUSR1 dump
# Output: pairs-table.txt (the comparison), pairs-results.txt ("daemon key value" lines),
# pairs-DAEMON-SHAPE.txt (the flooder's output), rping-DAEMON-*.log.
# Knobs: daemons=PATH,PATH [/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd]  reference=PATH
#        [/usr/sbin/iwpmd]  count=N pairs per shape [40000]  rate=R datagrams/s [20000;
#        a pair is two]  linger=MS [3000]  shapes=identity,pm
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
DAEMONS=$(echo "${RIG_DAEMONS:-/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd}" | tr ',' ' ')
REF=${RIG_REFERENCE:-/usr/sbin/iwpmd}
COUNT=${RIG_COUNT:-40000}; RATE=${RIG_RATE:-20000}; LINGER=${RIG_LINGER:-3000}
SHAPES=$(echo "${RIG_SHAPES:-identity,pm}" | tr ',' ' ')
ATK=10.88.0.3

setup_net
ip addr add "$ATK/24" dev veth1
note "kernel $(uname -r); siw0 on $DEV ($IP); attacker $ATK (veth1); daemons: $DAEMONS (reference $REF)"
note "pairs: $COUNT REQUEST + blind ACK pairs per shape ($SHAPES) to $IP:3935 at ${RATE} datagrams/s, answers drained ${LINGER} ms after the last send"
start_syslog

. "$RIG_LIB_DIR/attack.sh"
# wait_drained [SECS]: until no UDP socket on port 3935 (0F5F) has queued datagrams (max 10 s);
# sets DRAIN_S (seconds waited)
wait_drained() {
  local t0 i=0; t0=$(uptime_s)
  while awk '$2 ~ /:0F5F$/ { split($5, q, ":"); if (q[2] != "00000000") busy=1 } END { exit !busy }' \
      /proc/net/udp /proc/net/udp6 2>/dev/null; do
    i=$((i+1)); [ $i -ge $(( ${1:-10} * 10 )) ] && break; sleep 0.1
  done
  DRAIN_S=$(elapsed "$t0")
}
mode_of() { if [ "$1" = pm ]; then echo pairs-pm; else echo pairs; fi; }

R="$OUT/pairs-results.txt"; : > "$R"
port=7650
for d in $DAEMONS; do
  begin_daemon "$d" $port || continue
  log "$tag: rping -C 1 with no pairs: ${T1}s rc=$R1"
  echo "$tag rping_quiet $T1" >> "$R"
  snap s
  for sh in $SHAPES; do
    f="$OUT/pairs-$tag-$sh.txt"
    snap b
    rigflood flood "$(mode_of "$sh")" "$IP" "$COUNT" -b "$ATK" -a "$IP:$port" -c "$ATK" -r "$RATE" -l "$LINGER" > "$f" 2>&1
    wait_drained 10
    snap a
    line=$(grep '^sent=' "$f")
    rping1 $port "$OUT/rping-$tag-$sh.log"
    log "$tag $sh: $line; daemon socket drained after ${DRAIN_S}s; SUnreclaim +$(( a_sunr - b_sunr )) kB, RSS +$(( a_rss - b_rss )) kB; rping after: ${T1}s rc=$R1"
    {
      burst_figures "${sh}_" "$line"
      echo "$tag ${sh}_fds ${b_fds}->${a_fds}"
      echo "$tag ${sh}_send_s $(kv "$line" send_s)"
      echo "$tag ${sh}_drain_s $DRAIN_S"
      echo "$tag ${sh}_rping $T1"
      echo "$tag ${sh}_rping_rc $R1"
    } >> "$R"
  done
  daemon_after $port
  {
    echo "$tag rss_kb $(( a_rss - s_rss ))"
    echo "$tag rss_after_kb $a_rss"
    echo "$tag fds ${s_fds}->${a_fds}"
  } >> "$R"
  end_daemon
  port=$((port+10))
done

# ---- comparison table (daemons in columns, in the order run) ---------------------------
table_tags
{
  echo "REQUEST + blind ACK pairs: $COUNT pairs per shape at ${RATE} datagrams/s from $ATK to $IP:3935, ap = the live"
  echo "listener, cp = mapped_cp IP = $ATK, random ports and handles; each ACK (same handle, cp echoed, ap = the listener)"
  echo "sent right after its REQUEST, no ACCEPT read. identity: mapped cp port = cp port; pm: mapped cp port != cp port."
  echo "Figures per shape: before the pairs, and after ${LINGER} ms of draining answers and the daemon's socket drained."
  table_head
  for sh in $SHAPES; do
    echo "-- shape $sh"
    burst_rows "${sh}_"
    row "datagrams sent (REQUEST + ACK)" ${sh}_sent
    row "datagrams read by the daemon (Udp In - answers)" ${sh}_read
    row "UDP receive-buffer drops (RcvbufErrors)" ${sh}_rcvbuf_drops
    row "datagrams back to the attacker" ${sh}_back
    row "  of which ACCEPT/REJECT/other" ${sh}_back_types
    row "daemon RSS growth, kB" ${sh}_rss_kb
    row "daemon open fds before->after" ${sh}_fds
    row "send time, s" ${sh}_send_s
    row "daemon socket drained after the last answer, s" ${sh}_drain_s
    row "rping -C 1 after the pairs, s" ${sh}_rping
    row "  its status (0 = connected)" ${sh}_rping_rc
  done
  echo "-- whole run"
  row "rping -C 1 before any pairs, s" rping_quiet
  row "daemon RSS growth over every shape, kB" rss_kb
  row "daemon RSS after, kB" rss_after_kb
  row "daemon open fds before->after" fds
  after_rows pairs
} | save_table pairs

# ---- checks: every daemon but the reference ---------------------------------------------
ref_figures alive
for d in $DAEMONS; do
  t=$(basename "$d")
  [ -n "$(val "$t" alive)" ] || continue
  REFERENCE=""; [ "$d" = "$REF" ] && REFERENCE=reference
  for sh in $SHAPES; do
    s=$(val "$t" ${sh}_sunr_kb); rs=$(val "$reft" ${sh}_sunr_kb)
    if [ "$d" = "$REF" ]; then
      note "reference $reft (reported, not checked), shape $sh: SUnreclaim growth ${s} kB, Slab $(val "$t" ${sh}_slab_kb) kB, $(val "$t" ${sh}_read) datagrams read, $(val "$t" ${sh}_back) back"
    elif [ $have_ref = 1 ]; then
      lim=$(slab_limit "$rs")
      check "slab-$sh-$t" "shape $sh: kernel SUnreclaim growth ${s} kB <= 10 % of $reft's ${rs} kB (${lim} kB); Slab ${t} $(val "$t" ${sh}_slab_kb) kB, $reft $(val "$reft" ${sh}_slab_kb) kB; ${t} read $(val "$t" ${sh}_read) datagrams" \
        test "$s" -le "$lim"
    else note "slab-$sh-$t: no $reft run in this boot to compare with (SUnreclaim growth ${s} kB)"; fi
    rt=$(val "$t" ${sh}_rping); rc=$(val "$t" ${sh}_rping_rc)
    r=1; [ "$rc" = 0 ] && lt "$rt" "$STALL_S" && r=0
    check "rping-$sh-$t" "rping -C 1 after the $sh pairs: ${rt}s (rc $rc), limit ${STALL_S}s" test $r = 0
  done
  r=$(val "$t" rss_kb)
  check "rss-$t" "daemon RSS growth over every shape ${r} kB <= 1024 kB (per shape: $(for sh in $SHAPES; do printf '%s %s kB ' "$sh" "$(val "$t" ${sh}_rss_kb)"; done); fds $(val "$t" fds))" test "$r" -le 1024
  check "alive-$t" "daemon alive after the pairs ($(val "$t" alive)), listener in the SIGUSR1 dump ($(val "$t" listed))" \
    sh -c "[ $(val "$t" alive) = 1 ] && [ $(val "$t" listed) = 1 ]"
done
REFERENCE=""
cat "$SUM"
finish
