# attack.sh: what suite-flood and suite-pairs share. Both aim a UDP burst from an
# attacker address (veth1) at each daemon in turn, take the same kernel and daemon figures
# around it, and print one table with the daemons in columns. Sourced after lib.sh.

# snap PREFIX: kernel and daemon figures into PREFIX_slab, _sunr (kB), _udpin, _udpout,
# _rcvbuf (Udp InDatagrams, OutDatagrams, RcvbufErrors), _rss (kB), _fds
snap() {
  eval "$(awk -v p="$1" '/^Slab:/ {print p "_slab=" $2} /^SUnreclaim:/ {print p "_sunr=" $2}' /proc/meminfo)"
  eval "$(awk -v p="$1" '$1=="Udp:" && $2 ~ /^[0-9]+$/ {print p "_udpin=" $2 "; " p "_udpout=" $5 "; " p "_rcvbuf=" $6}' /proc/net/snmp)"
  eval "$1_rss=$(awk '/^VmRSS:/ {print $2}' /proc/$IWPMD_PID/status 2>/dev/null || echo 0)"
  eval "$1_fds=$(ls /proc/$IWPMD_PID/fd 2>/dev/null | wc -l)"
}
# rping1 PORT LOG: one rping -C 1 to the live listener; sets T1 (seconds) and R1 (0 when
# the ping data came back, else rping's status or 99). rping's own teardown race
# ("rdma_get_cm_event: Bad file descriptor" after the last ping, exit 255) is not a
# failed connection; a hang after the ping shows in T1 (stall limit).
rping1() {
  local t0; t0=$(uptime_s)
  timeout 30 rping -c -a "$IP" -p "$1" -C 1 -v > "$2" 2>&1; R1=$?
  T1=$(elapsed "$t0")
  if grep -q '^ping data' "$2"; then
    [ $R1 = 0 ] || log "rping exited $R1 after its ping ($(tail -1 "$2")): counted as connected"
    R1=0
  else [ $R1 != 0 ] || R1=99; fi
}

# burst_figures KEYPREFIX LINE: the figures of one burst between snapshots b and a, as
# "$tag KEY VALUE" lines (LINE: rigflood's result line)
burst_figures() {
  local p=$1 line=$2 sent back
  sent=$(kv "$line" sent); back=$(kv "$line" received)
  echo "$tag ${p}slab_kb $(( a_slab - b_slab ))"
  echo "$tag ${p}sunr_kb $(( a_sunr - b_sunr ))"
  echo "$tag ${p}sent ${sent:-0}"
  echo "$tag ${p}read $(( a_udpin - b_udpin - ${back:-0} ))"
  echo "$tag ${p}back ${back:-0}"
  echo "$tag ${p}back_types $(kv "$line" accept)/$(kv "$line" reject)/$(( $(kv "$line" ack) + $(kv "$line" request) + $(kv "$line" other) ))"
  echo "$tag ${p}rcvbuf_drops $(( a_rcvbuf - b_rcvbuf ))"
  echo "$tag ${p}rss_kb $(( a_rss - b_rss ))"
}
# daemon_after PORT: is the daemon alive, and does its SIGUSR1 dump still list the
# listener on PORT; sets alive and listed (1 = yes)
daemon_after() {
  alive=0; kill -0 "$IWPMD_PID" 2>/dev/null && alive=1
  iwpmd_dump "$OUT/dump-$tag.txt"; dump_pairs "$OUT/dump-$tag.txt" > "$OUT/pairs-$tag.txt"
  listed=0; grep -q "$IP:$1(" "$OUT/pairs-$tag.txt" && listed=1
}
# end_daemon: the last figures of one daemon, then its rping server and the daemon stop
end_daemon() {
  { echo "$tag alive $alive"; echo "$tag listed $listed"; } >> "$R"
  kill $sp 2>/dev/null; wait $sp 2>/dev/null
  stop_iwpmd
}

# ---- the comparison table: daemons in columns, in the order run ---------------------
table_tags() { TAGS=""; for d in $DAEMONS; do TAGS="$TAGS $(basename "$d")"; done; }
val() { awk -v t="$1" -v k="$2" '$1==t && $2==k {print $3}' "$R"; }   # val TAG KEY
row() {  # row LABEL KEY
  local l="$1" k=$2 t line
  line=$(printf '%-52s' "$l")
  for t in $TAGS; do line="$line$(printf ' %18s' "$(val "$t" "$k")")"; done
  echo "$line"
}
table_head() {
  local t line; line=$(printf '%-52s' "")
  for t in $TAGS; do line="$line$(printf ' %18s' "$t")"; done; echo "$line"
}
# burst_rows KEYPREFIX: the rows of burst_figures, in the order both tables print them
burst_rows() {
  row "kernel Slab growth, kB" ${1}slab_kb
  row "kernel SUnreclaim growth, kB" ${1}sunr_kb
}
slab_limit() { echo "$1" | awk '{v=$1/10; if (v<0) v=0; printf "%d", v}'; }   # 10 % of $1, >= 0
# after_rows WHAT: the rows that close both tables (WHAT: "flood", "pairs")
after_rows() {
  row "daemon alive after the $1 (1 = yes)" alive
  row "listener in the SIGUSR1 dump after (1 = yes)" listed
}
# save_table NAME: the table on stdin into $OUT/NAME-table.txt and the summary
save_table() { cat > "$OUT/$1-table.txt"; cat "$OUT/$1-table.txt" >> "$SUM"; }
# ref_figures KEY: reft = the reference daemon's tag; have_ref = 1 when this boot has its
# figure KEY (so the others can be judged against it)
ref_figures() { reft=$(basename "$REF"); have_ref=0; [ -n "$(val "$reft" "$1")" ] && have_ref=1; }
# begin_daemon DAEMON PORT: start DAEMON (sets IWPMD, tag) and an rping server on PORT
# (pid in sp), then one rping -C 1 with no attack (T1, R1); fails when the daemon did not
# start (after saying so)
begin_daemon() {
  IWPMD=$1; tag=$(basename "$1")
  start_iwpmd "" || { bad "start-$tag" "$1 did not start"; return 1; }
  rping -s -P -a "$IP" -p "$2" > "$OUT/rping-$tag-server.log" 2>&1 & sp=$!
  wait_listen "$2"
  rping1 "$2" "$OUT/rping-$tag-quiet.log"
}
