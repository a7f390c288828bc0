#!/bin/sh
# Guest side of experiments/remote-info-bound.sh (busybox sh; run by run-vm.sh, which
# copies guest/lib.sh beside it). Measures how much unreclaimable kernel memory a flood of
# forged connect REQUESTs pins through the C iwpmd's REMOTE_INFO messages, and whether it
# comes back.
#
# One VM, siw0 on veth0 (10.88.0.1), the forger on a second address of veth1 (10.88.0.3):
#   1. C iwpmd (/usr/sbin/iwpmd) + a live listener (rping -s -P on 10.88.0.1:7600)
#   2. rping -C 3 through the daemon (port 7174): the normal path works
#   3. snapshot: /proc/meminfo SUnreclaim + Slab, kmalloc-512 objects (/proc/slabinfo)
#   4. COUNT forged REQUESTs for the listener at RATE/s (rigflood flood request, cp =
#      mapped_cp = 10.88.0.3 with random ports); the C daemon pushes one REMOTE_INFO to
#      the kernel per new REQUEST; one rping -C 1 to the listener while the flood runs
#   5. once the daemon has read its socket dry: snapshot, then one sample every STEP s for
#      WAIT s (stock kernel: stays; bounded kernel: at most the cap, back after the expiry)
#   6. the daemon restarted under strace (REMOTE_INFOs counted from its trace); DUPS
#      REQUESTs with one and the same key (duplicates), then CONNS sequential rping -C 1
#      (each should consume its own REMOTE_INFO): REMOTE_INFOs sent, kmalloc-512 growth
#   7. rping -C 3 again; kernel log lines about iwpm
# Output ($OUT): rib-results.txt ("key value" lines), rib-samples.txt ("seconds after the
# flood, SUnreclaim kB, kmalloc-512 objects"), flood.txt, kernel-iwpm.txt, rping-*.log.
# Knobs (run-vm.sh -e): count=N [40000] rate=R [1000] wait=S [30] step=S [5] dups=N [200]
#        conns=N [50]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
COUNT=${RIG_COUNT:-40000}; RATE=${RIG_RATE:-1000}; WAIT=${RIG_WAIT:-30}; STEP=${RIG_STEP:-5}
ATK=10.88.0.3; PORT=7600
R="$OUT/rib-results.txt"; : > "$R"
S="$OUT/rib-samples.txt"; : > "$S"
put() { echo "$1 $2" >> "$R"; log "$1 $2"; }

sunr() { awk '/^SUnreclaim:/ {print $2}' /proc/meminfo; }
slab() { awk '/^Slab:/ {print $2}' /proc/meminfo; }
# active kmalloc-512 objects (struct iwpm_remote_info lives there); -1 without slabinfo
k512() { awk '$1=="kmalloc-512" {print $2; f=1} END {if (!f) print -1}' /proc/slabinfo 2>/dev/null || echo -1; }
# kd A B: B - A, or n/a when either count is missing (a kernel without /proc/slabinfo:
# the 6.12 rig configuration has no CONFIG_SLUB_DEBUG)
kd() { if [ "$1" = -1 ] || [ "$2" = -1 ]; then echo n/a; else echo $(( $2 - $1 )); fi; }
udp_in() { awk '$1=="Udp:" && $2 ~ /^[0-9]+$/ {print $2}' /proc/net/snmp; }
udp_drops() { awk '$1=="Udp:" && $2 ~ /^[0-9]+$/ {print $6}' /proc/net/snmp; }
# settle: wait (max 60 s) until the UDP input counter has not moved for 2 s, i.e. the
# daemon has read every queued REQUEST (and pushed its REMOTE_INFOs)
settle() {
  local a b i=0 still=0
  a=$(udp_in)
  while [ $i -lt 120 ] && [ $still -lt 4 ]; do
    sleep 0.5; b=$(udp_in)
    if [ "$a" = "$b" ]; then still=$((still+1)); else still=0; fi
    a=$b; i=$((i+1))
  done
}

setup_net
ip addr add "$ATK/24" dev veth1
note "kernel $(uname -r): $(cut -d' ' -f4- /proc/version | cut -c1-60)"
note "flood: $COUNT REQUESTs at ${RATE}/s from $ATK to $IP:3935 for listener $IP:$PORT; samples every ${STEP}s for ${WAIT}s"
start_iwpmd "" || { bad start "$IWPMD did not start"; finish; }
rping -s -P -a "$IP" -p $PORT > "$OUT/rping-listener.log" 2>&1 & LP=$!
wait_listen $PORT || bad listener "no listener on :$PORT"
check_rping rping-before "$IP" 3 before 7174
sleep 1
dmesg_mark
b_sunr=$(sunr); b_slab=$(slab); b_k512=$(k512); b_in=$(udp_in); b_drop=$(udp_drops)
put sunr_before_kb "$b_sunr"; put slab_before_kb "$b_slab"; put k512_before "$b_k512"

rigflood flood request "$IP" "$COUNT" -b "$ATK" -a "$IP:$PORT" -c "$ATK" -r "$RATE" -l 1000 \
  > "$OUT/flood.txt" 2>&1 & FP=$!
sleep 1
t0=$(uptime_s)
timeout 30 rping -c -a "$IP" -p $PORT -C 1 -v > "$OUT/rping-during.log" 2>&1; rc=$?
td=$(elapsed "$t0")
grep -q '^ping data' "$OUT/rping-during.log" && rc=0
put rping_during "rc=$rc,${td}s,flood_still_sending=$(grep -q '^send-done' "$OUT/flood.txt" && echo 0 || echo 1)"
wait $FP
settle
t_end=$(uptime_s)
a_sunr=$(sunr); a_slab=$(slab); a_k512=$(k512)
put flood "$(grep '^sent=' "$OUT/flood.txt" | cut -d' ' -f1-3)"
back=$(grep '^sent=' "$OUT/flood.txt" | tr ' ' '\n' | sed -n 's/^received=//p')
put udp_read_by_daemon $(( $(udp_in) - b_in - ${back:-0} ))   # Udp InDatagrams minus the answers the flooder read
put udp_rcvbuf_drops $(( $(udp_drops) - b_drop ))
put sunr_after_kb "$a_sunr"; put slab_after_kb "$a_slab"; put k512_after "$a_k512"
put sunr_growth_kb $(( a_sunr - b_sunr ))
put k512_growth "$(kd "$b_k512" "$a_k512")"
echo "0 $a_sunr $a_k512" >> "$S"
el=0
while [ $el -lt "$WAIT" ]; do
  sleep "$STEP"
  el=$(elapsed "$t_end" | cut -d. -f1)
  echo "$el $(sunr) $(k512)" >> "$S"
  log "sample +${el}s: SUnreclaim $(sunr) kB, kmalloc-512 $(k512)"
done
e_sunr=$(sunr); e_k512=$(k512)
put sunr_end_kb "$e_sunr"; put k512_end "$e_k512"
put sunr_left_kb $(( e_sunr - b_sunr ))
put k512_left "$(kd "$b_k512" "$e_k512")"
# From here the daemon runs under strace (restarted; the kernel hands it the listener's
# mapping again), so the REMOTE_INFOs it pushes in the next two phases are counted.
kill -0 "$IWPMD_PID" 2>/dev/null && alive=1 || alive=0
put daemon_alive_after_flood $alive
stop_iwpmd
start_iwpmd "$OUT/iwpmd.strace" || bad restart "$IWPMD did not restart under strace"
ri_sent() { decode "$OUT/iwpmd.strace" "$OUT/iwpmd.decoded"; grep -c ' nl send dst=0 IWCM REMOTE_INFO ' "$OUT/iwpmd.decoded"; }
r0=$(ri_sent)
# 6. duplicates: DUPS REQUESTs with the same addresses (cp = mapped_cp = 10.88.0.3:40000,
#    new handle each); the C daemon pushes a REMOTE_INFO for each, all with one key
DUPS=${RIG_DUPS:-200}
d0=$(k512); ds0=$(sunr); i=0
while [ $i -lt "$DUPS" ]; do
  rigflood request "$IP" "$ATK:40000" "$ATK:40000" "$IP:$PORT" -b "$ATK" -w 20 > /dev/null 2>&1
  i=$((i+1))
done
settle
r1=$(ri_sent)
put dup_requests "$DUPS"; put dup_remote_infos $((r1 - r0)); put dup_k512_growth "$(kd "$d0" "$(k512)")"; put dup_sunr_growth_kb $(( $(sunr) - ds0 ))
# 6b. consumption: CONNS rping -C 1 to the listener, one after another; each connection
#    should consume the REMOTE_INFO its own REQUEST made, leaving no object behind
CONNS=${RIG_CONNS:-50}
c0=$(k512); cs0=$(sunr); i=0; cf=0; t0=$(uptime_s)
while [ $i -lt "$CONNS" ]; do
  timeout 30 rping -c -v -a "$IP" -p $PORT -C 1 > "$OUT/rping-conn.log" 2>&1
  grep -q '^ping data' "$OUT/rping-conn.log" || cf=$((cf+1))
  i=$((i+1))
done
tc=$(elapsed "$t0")
sleep 1
c1=$(k512); cs1=$(sunr); r2=$(ri_sent)
put conns "$CONNS"; put conn_failed "$cf"; put conn_total_s "$tc"; put conn_remote_infos $((r2 - r1))
put conn_k512_growth "$(kd "$c0" "$c1")"; put conn_sunr_growth_kb $(( cs1 - cs0 ))
check_rping rping-after "$IP" 3 after 7174
dmesg_iwpm_since > "$OUT/kernel-iwpm.txt"
put kernel_iwpm_lines "$(wc -l < "$OUT/kernel-iwpm.txt")"
head -5 "$OUT/kernel-iwpm.txt" | sed 's/^/    /' | tee -a "$SUM"
kill $LP 2>/dev/null; wait $LP 2>/dev/null
stop_iwpmd
finish
