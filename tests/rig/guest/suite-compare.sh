#!/bin/sh
# Suite "compare" (run by ../compare.sh, which boots it once per round and daemon:
# rounds=1 round=R daemons=D, because the kernel slows down with every storm served in
# one boot). With several daemons or rounds in one boot they run interleaved (floor, C,
# ours, none, floor, ...). Per daemon and round, daemon untraced and freshly started:
#   1. listen storm: `rigcm storm IP STORM BATCH` (STORM listeners, each an ADD_MAPPING
#      round trip, then all destroyed, each a REMOVE_MAPPING); µs/op of the batch that
#      ends at 1000 live and of the one that ends at STORM live, median of the destroy
#      batches;
#   2. cmtime -c CM through it: connect total and worst single connect, ms;
#   3. the daemon's CPU time (utime/stime of /proc/PID/stat) over each of the two.
# "floor" is `rigtool floor-responder` (answers at once, keeps nothing: the least any
# daemon can cost on this kernel); "none" is no daemon (the kernel gives up on the port
# mapper and goes unmapped: the kernel's own cost). profile=1 then runs each daemon once
# more under `strace -f -c` over a 1000-listener storm and cmtime (syscall profile; its
# times are not comparable with the untraced ones).
# Results: $OUT/compare-results.txt, one "ROUND LABEL KEY VALUE" line per figure.
# Checks: every storm reached STORM listeners, every cmtime connected all CM with no stall.
# Knobs: daemons=floor,c,ours,none  rounds=R [3] (0: only the profile)  round=FIRST [1]
#        storm=N [10000]  batch=B [500]
#        cmtime=N [50]  profile=0|1 [1]  ours=PATH [/mnt/rig/bin/iwpmd-rs]  c=PATH [/usr/sbin/iwpmd]
#        ours_args=A,B (more arguments for ours)
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
ROUNDS=${RIG_ROUNDS:-3}; STORM=${RIG_STORM:-10000}; BATCH=${RIG_BATCH:-500}; CM=${RIG_CMTIME:-50}
DAEMONS=$(echo "${RIG_DAEMONS:-floor,c,ours,none}" | tr ',' ' ')
OURS=${RIG_OURS:-/mnt/rig/bin/iwpmd-rs}; CD=${RIG_C:-/usr/sbin/iwpmd}
RES="$OUT/compare-results.txt"; : > "$RES"

# storm_figures FILE ROUND LABEL: the storm's figures into the results
storm_figures() {
  put "$2" "$3" listen_1k "$(awk '$1=="listen" && $2=="live=1000" {sub(/us_per_op=/,"",$3); print $3}' "$1")"
  put "$2" "$3" listen_top "$(awk -v n="live=$STORM" '$1=="listen" && $2==n {sub(/us_per_op=/,"",$3); print $3}' "$1")"
  put "$2" "$3" destroy_med "$(awk '$1=="destroy" {sub(/us_per_op=/,"",$3); v[++n]=$3} END {
      for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (v[j]<v[i]) {x=v[i]; v[i]=v[j]; v[j]=x}
      if (n) printf "%.1f\n", (n%2) ? v[(n+1)/2] : (v[n/2]+v[n/2+1])/2 }' "$1")"
  for k in listen_us_per_op listen_max_us destroy_us_per_op; do
    put "$2" "$3" "$k" "$(awk -v k="$k" '$1=="total" {for (i=2;i<=NF;i++) if (index($i, k "=")==1) print substr($i, length(k)+2)}' "$1")"
  done
}
# one_run ROUND LABEL: storm + cmtime through one freshly started daemon (or none)
one_run() {
  local r=$1 l=$2 tag="$2-$1" c0 c1 c2 n
  if [ "$l" != none ]; then
    use_daemon "$l"; start_iwpmd "" || { bad "start-$tag" "$IWPMD did not start"; return; }
  fi
  c0=$(cpu_ms "$IWPMD_PID")
  timeout 600 rigcm storm "$IP" "$STORM" "$BATCH" > "$OUT/storm-$tag.txt" 2>&1
  c1=$(cpu_ms "$IWPMD_PID")
  n=$(awk '$1=="total" {sub(/listeners=/,"",$2); print $2}' "$OUT/storm-$tag.txt")
  check "storm-$tag" "$n of $STORM listeners up, then destroyed ($(tail -1 "$OUT/storm-$tag.txt"))" test "${n:-0}" = "$STORM"
  storm_figures "$OUT/storm-$tag.txt" "$r" "$l"
  check_cmtime "cmtime-$tag" "$IP" "$CM" "$tag"
  c2=$(cpu_ms "$IWPMD_PID")
  put "$r" "$l" cm_total "$(cm_col "$OUT/cmtime-$tag.txt" connect 1)"
  put "$r" "$l" cm_max "$(cm_col "$OUT/cmtime-$tag.txt" connect 2)"
  echo "$c0 $c1 $c2" | awk -v r="$r" -v l="$l" '{printf "%s %s cpu_storm_user_ms %d\n%s %s cpu_storm_sys_ms %d\n%s %s cpu_cm_user_ms %d\n%s %s cpu_cm_sys_ms %d\n",
      r, l, $3-$1, r, l, $4-$2, r, l, $5-$3, r, l, $6-$4}' >> "$RES"
  [ "$l" != none ] && stop_iwpmd
  log "$tag: $(grep "^$r $l " "$RES" | cut -d' ' -f3- | tr '\n' ' ')"
}
# profile LABEL: the same work (1000-listener storm, cmtime) under strace -f -c
profile() {
  local l=$1 p i=0 name
  use_daemon "$l"; name=$(basename "$IWPMD")
  log "profile: $IWPMD $IWPMD_ARGS under strace -f -c"
  strace -f -c -o "$OUT/strace-c-$l.txt" "$IWPMD" $IWPMD_ARGS & sj=$!
  while [ $i -lt 50 ] && [ -z "$(rigtool nl-portid 2>/dev/null)" ]; do sleep 0.1; i=$((i+1)); done
  sleep 0.5
  p=$(pidof "$name" | awk '{print $NF}')
  rigcm storm "$IP" 1000 500 > "$OUT/storm-profile-$l.txt" 2>&1
  cmtime_pair "$IP" "$CM" "profile-$l"
  [ -n "$p" ] && kill -TERM "$p"
  wait_or_kill "$sj" 10
}

setup_net
note "kernel $(uname -r); siw0 on $DEV ($IP); storm $STORM (batch $BATCH), cmtime -c $CM, $ROUNDS rounds over: $DAEMONS"
start_syslog
r=${RIG_ROUND:-1}; last=$((r + ROUNDS - 1))
while [ "$r" -le "$last" ]; do
  for l in $DAEMONS; do one_run "$r" "$l"; done
  r=$((r+1))
done
if [ "${RIG_PROFILE:-1}" = 1 ]; then
  for l in $DAEMONS; do [ "$l" = none ] || profile "$l"; done
fi
cat "$RES" >> "$SUM"
finish
