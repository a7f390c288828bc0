#!/bin/sh
# Suite "forge" (run by ../run-2vm.sh): can a remote host make the passive side's kernel
# report a forged peer address for its connection?
#
# VM A (server, 10.77.0.1) runs each daemon under test in turn (rig.daemons, ours and the
# C iwpmd, in ONE boot) with a librdmacm listener (tools/rigcm.c serve) that prints the
# peer address the kernel reports for every accepted connection (rdma_get_peer_addr).
# VM B (client, 10.77.0.2) runs NO daemon: it is the attacker. Per daemon, B
#   1. control: connects from 10.77.0.2:CPORT (no REQUEST): the peer must be B's address;
#   2. forgery: sends ONE REQUEST to A:3935 with cp = TRUSTED:FPORT (an address that is not
#      B's, rig.trusted, 10.77.0.50), mapped_cp = 10.77.0.2:FPORT (its own), ap = the
#      listener, then connects from 10.77.0.2:FPORT.
# A daemon that believes the REQUEST pushes REMOTE_INFO {mapped remote = B's address,
# remote = TRUSTED} into A's kernel, which then reports the connection from B as coming
# from TRUSTED:FPORT. A prints a table (forge-table.txt) with, per daemon: the answer B
# got to its REQUEST, the REMOTE_INFOs the daemon sent (strace), the control and forged
# connections' peer addresses. Checks (A, every daemon but rig.reference): the forged
# connection shows B's true address; the control connection shows B's address; no
# REMOTE_INFO naming TRUSTED. The reference (C) is reported only, with whether the
# forgery reproduced. B checks that its connections were established.
# Knobs: role, hostid, peer, sync (run-2vm.sh); daemons=PATH,PATH
#        [/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd]  reference=PATH [/usr/sbin/iwpmd]
#        trusted=IP [10.77.0.50]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
ROLE=${RIG_ROLE:?rig.role=server|client}; PEER=${RIG_PEER:?rig.peer=ADDR}
DAEMONS=$(echo "${RIG_DAEMONS:-/mnt/rig/bin/iwpmd-rs,/usr/sbin/iwpmd}" | tr ',' ' ')
REF=${RIG_REFERENCE:-/usr/sbin/iwpmd}
TRUSTED=${RIG_TRUSTED:-10.77.0.50}
if [ "$ROLE" = server ]; then OTHER=client; else OTHER=server; fi

setup_net
mkdir -p "$SYNC"
start_syslog
if [ "$ROLE" = server ]; then
  note "kernel $(uname -r); victim $IP (siw0 on $DEV); attacker $PEER (no daemon); daemons: $DAEMONS (reference $REF); forged cp $TRUSTED"
else
  note "kernel $(uname -r); attacker $IP (siw0 on $DEV, NO daemon); victim $PEER; forged cp $TRUSTED"
fi
flag "$ROLE.up"; wait_flag "$OTHER.up" 120
check ping "ICMP ping $PEER" sh -c "ping -c 2 -W 5 $PEER > $OUT/ping.txt 2>&1"

R="$OUT/forge-results.txt"; : > "$R"
i=0
for d in $DAEMONS; do
  tag=$(basename "$d"); port=$((7700 + i*10)); cport=$((41000 + i*10)); fport=$((cport + 1))
  if [ "$ROLE" = server ]; then
    IWPMD=$d; ST="$OUT/iwpmd-$tag.strace"
    check "start-$tag" "$d up" start_iwpmd "$ST"
    rigcm serve "$IP" "$port" 2 90 > "$OUT/serve-$tag.log" 2>&1 & sp=$!
    j=0; while ! grep -q '^listening' "$OUT/serve-$tag.log" 2>/dev/null && [ $j -lt 50 ]; do sleep 0.2; j=$((j+1)); done
    sleep 0.3   # the listen's ADD_MAPPING is answered before rdma_listen returns
    flag "ready-$tag"; wait_flag "done-$tag" 120
    wait_or_kill $sp 20
    sleep 0.5
    stop_iwpmd
    T="$OUT/iwpm-traffic-$tag.txt"; decode "$ST" "$T"
    ctl=$(sed -n 's/^conn n=1 peer=\([^ ]*\) .*/\1/p' "$OUT/serve-$tag.log")
    fgd=$(sed -n 's/^conn n=2 peer=\([^ ]*\) .*/\1/p' "$OUT/serve-$tag.log")
    ri=$(grep -c ' nl send .* IWCM REMOTE_INFO ' "$T")
    rit=$(grep ' nl send .* IWCM REMOTE_INFO ' "$T" | grep -c "REMOTE_ADDR=$TRUSTED:")
    ans=$(cat "$SYNC/answer-$tag" 2>/dev/null)
    if [ "$fgd" = "$TRUSTED:$fport" ]; then verdict="reproduced: the kernel reports the forged $TRUSTED"
    elif [ "$fgd" = "$PEER:$fport" ]; then verdict="blocked: the kernel reports the true $PEER"
    else verdict="inconclusive (peer '${fgd:-none}')"; fi
    {
      echo "$tag answer ${ans:-none}"
      echo "$tag remote_info $ri"
      echo "$tag remote_info_trusted $rit"
      echo "$tag control_peer ${ctl:-none}"
      echo "$tag forged_peer ${fgd:-none}"
      echo "$tag verdict $verdict"
    } >> "$R"
    note "$tag: B's REQUEST answered with ${ans:-nothing}; $ri REMOTE_INFO sent ($rit naming $TRUSTED); control peer ${ctl:-none}; forged connection peer ${fgd:-none}: forgery $verdict"
    if [ "$d" = "$REF" ]; then
      note "reference $tag (reported, not checked): forgery $verdict"
    else
      check "forge-$tag" "connection from $PEER:$fport after a REQUEST naming $TRUSTED:$fport: the kernel reports ${fgd:-no connection} (must be $PEER:$fport)" \
        test "$fgd" = "$PEER:$fport"
      check "control-$tag" "connection from $PEER:$cport without a REQUEST: the kernel reports ${ctl:-no connection}" \
        test "$ctl" = "$PEER:$cport"
      check "no-forged-remote-info-$tag" "no REMOTE_INFO naming $TRUSTED ($rit of $ri REMOTE_INFOs)" test "$rit" = 0
    fi
  else
    wait_flag "ready-$tag" 120
    timeout 40 rigcm connect "$IP:$cport" "$PEER:$port" 30 > "$OUT/connect-$tag-control.log" 2>&1; rc=$?
    check "control-$tag" "connect from $IP:$cport to $PEER:$port: $(head -1 "$OUT/connect-$tag-control.log")" test $rc = 0
    rigflood request "$PEER" "$TRUSTED:$fport" "$IP:$fport" "$PEER:$port" -b "$IP" -w 1000 > "$OUT/request-$tag.log" 2>&1
    a=$(sed -n 's/^answer type=\([A-Z]*\) .*/\1/p' "$OUT/request-$tag.log" | sort | uniq -c | awk '{printf "%s%s x%s", (NR>1?", ":""), $2, $1}')
    echo "${a:-none}" > "$SYNC/answer-$tag"
    timeout 40 rigcm connect "$IP:$fport" "$PEER:$port" 30 > "$OUT/connect-$tag-forged.log" 2>&1; rc=$?
    check "connect-$tag" "connect from $IP:$fport after the forged REQUEST (answers: ${a:-none}): $(head -1 "$OUT/connect-$tag-forged.log")" test $rc = 0
    flag "done-$tag"
  fi
  i=$((i+1))
done

if [ "$ROLE" = server ]; then
  TAGS=""; for d in $DAEMONS; do TAGS="$TAGS $(basename "$d")"; done
  val() { awk -v t="$1" -v k="$2" '$1==t && $2==k {$1=""; $2=""; sub(/^  /, ""); print}' "$R"; }
  {
    echo "Forged REQUEST from $PEER (no daemon) to $IP:3935: cp = $TRUSTED:FPORT, mapped_cp = $PEER:FPORT, ap = the"
    echo "listener; then a connection from $PEER:FPORT. Peer = rdma_get_peer_addr on $IP's accepted cm_id."
    printf '%-12s %-12s %-14s %-18s %-18s %s\n' daemon "REQUEST ans." "REMOTE_INFOs" "control peer" "forged-conn peer" "forgery"
    for t in $TAGS; do
      printf '%-12s %-12s %-14s %-18s %-18s %s\n' "$t" "$(val "$t" answer)" "$(val "$t" remote_info) ($(val "$t" remote_info_trusted) forged)" \
        "$(val "$t" control_peer)" "$(val "$t" forged_peer)" "$(val "$t" verdict | cut -d: -f1)"
    done
  } > "$OUT/forge-table.txt"
  cat "$OUT/forge-table.txt" >> "$SUM"
fi
flag "$ROLE.finished"; wait_flag "$OTHER.finished" 120
cat "$SUM"
finish
