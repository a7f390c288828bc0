#!/bin/sh
# Suite "fleet" (run by ../run-2vm.sh, like pm): fleet keys (peer_key_file, iwpmd.conf(5))
# between two daemons of ours on the real kernel, siw in port-mapped mode (siw.port_map=1,
# the rig's patched kernels; see suite-pm.sh), all parts in one boot, the daemons restarted
# between parts. Server 10.77.0.1 (passive side), client 10.77.0.2 (active side), both
# traced; the counters come from `iwpmctl status` on the daemon's control socket.
# Parts (both sides in step through flags in the share):
#   1 keyed   ours on both sides, the same key file (key 1), peer_auth_required = the rig's
#             subnet on both, and on the server remote_info_budget=0: an unauthenticated
#             REQUEST would get its REMOTE_INFO only on the ACK, so a REMOTE_INFO before
#             the ACCEPT shows the authenticated path. cmtime -c N and one `rigcm connect`
#             from a fixed source port across; every peer datagram 124 bytes (sealed) both
#             ways, peer_auth_verified > 0 and no auth failure on either side; every
#             REMOTE_INFO sent before its ACCEPT; the passive kernel reports the client's
#             unmapped port
#   2 attack  a third host on the wire, with no key (run-2vm.sh -w: tools/wire.py between
#             the VMs' links). It keeps the last sealed REQUEST and ACK of each family the
#             client's daemon sent (one IPv6 connect first gives it the IPv6 pair) and
#             injects them with the client's own MAC, address and port: (a) as they were
#             (a replay), (b) their first 64 bytes only (stripped: what rdma-core would
#             read), (c) with one byte of the message flipped. Per step the server's
#             daemon reads the four datagrams (strace), counts them (peer_auth_replayed /
#             peer_auth_missing / peer_auth_wrong_key + 4), sends nothing to its kernel
#             and nothing back; a connect right after connects without a stall. (d) The
#             wire cuts the client's next REQUEST of each family to 64 bytes in flight:
#             each is dropped and counted (peer_auth_missing + 2), the daemon's resend gets
#             through, each connect gets one REMOTE_INFO and waits one resend, never the
#             kernel's 10 s
#   3 rotate  1 000 connects (rotate_connects=N) in ten rounds of cmtime run while both
#             daemons go through the three rotation steps of the key file (add key 2
#             accept-only; key 2 signing; key 1 removed), SIGHUP after each, the server
#             first, then the client, each step while a round's connects are in flight: no
#             connect fails or stalls, no datagram is refused on either side, the client's
#             REQUESTs go from key id 1 to key id 2, `iwpmctl keys` ends with key 2 alone,
#             signing, no reload error
#   4 C       ours keyed (no peer_auth_required) against rdma-core's iwpmd, both ways:
#             cmtime across with no stall; ours as the server gets 64-byte REQUESTs and
#             answers in plain; ours as the client sends 124-byte REQUESTs, which the C
#             daemon reads as 64 bytes and answers (48-byte ACCEPT) and ours takes
# Knobs: role, hostid, peer, sync (run-2vm.sh); ours=PATH [/mnt/rig/bin/iwpmd-rs];
#        c=PATH [/usr/sbin/iwpmd]; iwpmctl=PATH [/mnt/rig/bin/iwpmctl]; cmtime=N [20];
#        connect_max_ms=MS [1000]; rotate_connects=N [1000], rotate_rounds=R [10];
#        parts=LIST [1,2,3,4] (2 and 3 need 1's daemons);
#        fleet_net=CIDRS [10.77.0.0/24,fd00:77::/64]; required=0|1 [1]: peer_auth_required in parts 1-3
#        (0 on the server: the self-test's control, where p2-strip and p2-instrip must
#        fail: a stripped REQUEST is then served as a plain one)
# Needs the wire (run-2vm.sh -w) for part 2.
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
ROLE=${RIG_ROLE:?rig.role=server|client}; PEER=${RIG_PEER:?rig.peer=ADDR}
if [ "$ROLE" = server ]; then OTHER=client; else OTHER=server; fi
OURS=${RIG_OURS:-/mnt/rig/bin/iwpmd-rs}; CD=${RIG_C:-/usr/sbin/iwpmd}
IWPMCTL=${RIG_IWPMCTL:-/mnt/rig/bin/iwpmctl}
CM=${RIG_CMTIME:-20}; CMAX=${RIG_CONNECT_MAX_MS:-1000}
PARTS=",${RIG_PARTS:-1,2,3,4},"
NET=${RIG_FLEET_NET:-10.77.0.0/24,fd00:77::/64}; REQD=${RIG_REQUIRED:-1}
IP6="fd00:77::${RIG_HOSTID:-1}/64"; PEER6="fd00:77::$(echo "$PEER" | sed 's/.*\.//')"
RIG_PORTMAP=${RIG_PORTMAP:-1}
PM=/sys/module/siw/parameters/port_map
CTLS=/tmp/iwpmd-ctl.sock
FD=/tmp/fleet; KF=$FD/peer-keys; CONF=$FD/iwpmd.conf
# test keys (this rig only)
K1=6669656c642d72696720746573742d6b65792d6f6e652d2d2d2d2d2d2d2d2d31
K2=6669656c642d72696720746573742d6b65792d74776f2d2d2d2d2d2d2d2d2d32
FIGS="$OUT/fleet-figures.txt"; : > "$FIGS"   # (fig, lib.sh)
want_part() { case "$PARTS" in *",$1,"*) return 0 ;; esac; return 1; }
T_SUITE=$(uptime_s)

# ---- helpers ----
# keys_step N: the key file at rotation step N (0: key 1; 1: + key 2 accept-only; 2: key 2
# signs; 3: key 1 gone), root-owned, mode 0600
keys_step() {
  mkdir -p $FD; : > $KF.new; chmod 600 $KF.new
  case "$1" in
    0) echo "1 $K1" > $KF.new ;;
    1) printf '1 %s\n2 %s accept-only\n' $K1 $K2 > $KF.new ;;
    2) printf '1 %s\n2 %s\n' $K1 $K2 > $KF.new ;;
    3) echo "2 $K2" > $KF.new ;;
  esac
  mv $KF.new $KF
}
# ours_up TAG REQUIRED(0|1) [BUDGET]: ours, keyed, traced into iwpmd-TAG.strace
ours_up() {
  { cat /etc/iwpmd.conf 2>/dev/null; echo "peer_key_file=$KF"
    [ "$2" = 1 ] && echo "peer_auth_required=$NET"
    [ -n "$3" ] && echo "remote_info_budget=$3"; } > $CONF
  IWPMD=$OURS; IWPMD_ARGS="--systemd --config $CONF --control-socket $CTLS"
  ST="$OUT/iwpmd-$1.strace"
  note "part $PART: ours keyed (key file $(awk '{printf "%s%s%s", (NR>1?", ":""), $1, ($3!=""?" "$3:"")}' $KF); peer_auth_required: $([ "$2" = 1 ] && echo $NET || echo none); remote_info_budget: ${3:-default})"
  start_iwpmd "$ST"
}
c_up() { IWPMD=$CD; IWPMD_ARGS=--systemd; ST="$OUT/iwpmd-$1.strace"; note "part $PART: rdma-core's iwpmd"; start_iwpmd "$ST"; }
ctl() { "$IWPMCTL" --socket $CTLS --timeout 5 "$@"; }
# ctr NAME: a core counter of our daemon (iwpmctl status)
ctr() { ctl --json status 2>/dev/null | grep -o "\"$1\": *[0-9]*" | head -1 | sed 's/.*: *//'; }
AUTHC="peer_auth_verified peer_auth_wrong_key peer_auth_clock peer_auth_replayed peer_auth_missing peer_auth_unkeyed"
# auth_snap FILE: the auth counters, "name value" lines
auth_snap() { : > "$1"; for c in $AUTHC; do echo "$c $(ctr $c)" >> "$1"; done; }
av() { awk -v k="$2" '$1==k {print $2}' "$1"; }
# auth_diff A B: "name +N" for every counter that moved between snapshots A and B
auth_diff() { awk 'NR==FNR { a[$1]=$2; next } { d = $2 - a[$1]; if (d != 0) printf "%s%s+%d", (n++ ? " " : ""), $1, d } END { if (!n) printf "none" }' "$1" "$2"; }
# udp_raw STRACE: every UDP datagram of a daemon's trace with its bytes, in order:
# "send|recv IP:PORT TYPE LEN KEYID HEX" (KEYID: of a 124-byte sealed datagram, else -)
udp_raw() {
  awk 'function hv(s,   i, v) { v = 0; for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1; return v }
    /sin_port=htons\(/ && /"\\x/ {
      if ($0 ~ /(sendto|sendmsg)\(/) d = "send"; else if ($0 ~ /recv(from|msg)\(/) d = "recv"; else next
      match($0, /sin_port=htons\([0-9]+\)/); p = substr($0, RSTART + 15, RLENGTH - 16)
      a = "?"; if (match($0, /inet_addr\("[^"]*"\)/)) { x = substr($0, RSTART + 11, RLENGTH - 13)
        if (x ~ /^\\x/) { gsub(/\\x/, "", x); a = ""; for (i = 1; i < length(x); i += 2) a = a sprintf("%c", hv(substr(x, i, 2))) } else a = x }
      # the data: the first quoted string, as iwpm-decode.awk takes it (-xx: all \xHH)
      if (!match($0, /"([^"\\]|\\.)*"/)) next
      h = substr($0, RSTART + 1, RLENGTH - 2); gsub(/\\x/, "", h)
      n = length(h) / 2; t = int(hv(substr(h, 1, 2)) / 16) % 4
      split("REQUEST ACCEPT ACK REJECT", T, " ")
      k = "-"; if (n == 124 && substr(h, 129, 8) == "49575253") k = hv(substr(h, 193, 8))
      print d, a ":" p, T[t + 1], n, k, h }' "$1"
}
# tcount DECODED ERE: matching lines
tcount() { grep -c -E "$2" "$1"; }
# the client's connect to the server's listener on PORT: CONN_MS, returns rigcm's status
connect_once() {  # connect_once TAG PORT [SRC_PORT] [SRC PEER]: SRC ADDR:PORT and PEER ([v6]) for IPv6
  timeout 30 rigcm connect "${4:-$IP:${3:-0}}" "${5:-$PEER}:$2" 20 > "$OUT/connect-$1.log" 2>&1; r=$?
  CONN_MS=$(sed -n 's/^connected .* ms=\([0-9.]*\).*/\1/p' "$OUT/connect-$1.log" | head -1)
  return $r
}
check_connect() {  # check_connect NAME TAG PORT [SRC_PORT] [SRC PEER]
  local r=1
  connect_once "$2" "$3" "$4" "$5" "$6" && [ -n "$CONN_MS" ] && lt "$CONN_MS" "$CMAX" && r=0
  check "$1" "connect to ${6:-$PEER}:$3: $(head -1 "$OUT/connect-$2.log") (limit $CMAX ms)" test $r = 0
}
stop_daemon() { stop_iwpmd; sleep 0.5; }
# ri_order DECODED: per association of the passive trace, where its REMOTE_INFO went
# (as suite pm's trace-ri-order): remote-info-first, after-accept, after-ack, none
ri_order() {
  awk '/ udp recv .* REQUEST / { cp=$0; sub(/.* cp=/, "", cp); sub(/ .*/, "", cp); h=$0; sub(/.* h=/, "", h); sub(/ .*/, "", h)
         m=$0; if (!sub(/.* mcp=/, "", m)) next; sub(/ .*/, "", m); if (!(h in open)) { open[h]=cp " " m; st[h]="remote-info-first" }; next }
       / udp send .* ACCEPT / { h=$0; sub(/.* h=/, "", h); sub(/ .*/, "", h); if ((h in open) && st[h]=="remote-info-first") st[h]="after-accept"; next }
       / udp recv .* ACK / { h=$0; sub(/.* h=/, "", h); sub(/ .*/, "", h); if (h in open) st[h]="after-ack"; next }
       / nl send dst=0 IWCM REMOTE_INFO / { for (h in open) { split(open[h], a, " ")
           if (index($0, " REMOTE_ADDR=" a[1] " ") && index($0, " MAPPED_REM_ADDR=" a[2] " ")) { print h, st[h]; delete open[h]; break } } }
       END { for (h in open) print h, "none" }' "$1"
}

# ---- siw in port-mapped mode, network ----
[ -w "$PM" ] && echo "$RIG_PORTMAP" > "$PM"
setup_net
ip -6 addr add "$IP6" dev "$DEV" nodad
check portmap "siw.port_map=$(cat "$PM" 2>/dev/null || echo 'missing: unpatched kernel?') before rdma link add" \
  test "$(cat "$PM" 2>/dev/null)" = Y
start_syslog
dmesg_mark
mkdir -p "$SYNC"
note "kernel $(uname -r); role $ROLE; siw0 on $DEV ($IP, port_map $RIG_PORTMAP); peer $PEER; ours $OURS; C $CD; iwpmctl $IWPMCTL; wall clock $(date +%s) s (from the emulated CMOS clock at boot: peer_auth_window needs the two within 60 s)"
[ -x "$IWPMCTL" ] || bad setup "no iwpmctl at $IWPMCTL (run-all.sh puts it in the share's bin/)"
flag "$ROLE.net"; wait_flag "$OTHER.net" 120
check ping "ICMP ping $PEER" sh -c "ping -c 2 -W 5 $PEER > $OUT/ping.txt 2>&1"

# ======== part 1: keyed <-> keyed ========
PART=1
if want_part 1; then
T_PH=$(uptime_s)
keys_step 0
if [ "$ROLE" = server ]; then ours_up p123 "$REQD" 0; else ours_up p123 "$REQD"; fi; r=$?
check p1-start "ours up, keyed (key 1), peer_auth_required=$([ "$REQD" = 1 ] && echo $NET || echo none)" test $r = 0
flag "p1.$ROLE.up"; wait_flag "p1.$OTHER.up" 120
if [ "$ROLE" = server ]; then
  listen_snap /tmp/ls0
  cmtime -b "$IP" -c "$CM" > "$OUT/cmtime-p1-server.log" 2>&1 & sp=$!
  new_listen /tmp/ls0 > /dev/null
  listen_snap /tmp/ls0
  rigcm serve "$IP" 7810 1 60 > "$OUT/serve-p1.log" 2>&1 & s1=$!
  la=$(new_listen /tmp/ls0)
  flag p1.listening; wait_flag p1.done 300
  sleep 0.5; kill $sp 2>/dev/null; wait $sp 2>/dev/null; wait_or_kill $s1 10
  got=$(sed -n 's/^conn n=1 peer=\([^ ]*\) .*/\1/p' "$OUT/serve-p1.log")
  check p1-peer "listener $IP:7810 (TCP LISTEN on $la): the kernel reports the peer ${got:-nothing}, the client's unmapped $PEER:7850 (its REMOTE_INFO was there first)" \
    test "$got" = "$PEER:7850"
else
  wait_flag p1.listening 120
  check_cmtime p1-cmtime "$PEER" "$CM" p1
  r=1; [ -n "$CM_CONNECT_MAX_MS" ] && lt "$CM_CONNECT_MAX_MS" "$CMAX" && r=0
  check p1-cmtime-fast "cmtime -c $CM between keyed daemons: slowest connect ${CM_CONNECT_MAX_MS:-?} ms (limit $CMAX ms)" test $r = 0
  fig p1_cmtime_total_ms "$(cm_col "$OUT/cmtime-p1.txt" connect 1)"; fig p1_cmtime_max_ms "$CM_CONNECT_MAX_MS"
  check_connect p1-connect p1 7810 7850
  fig p1_connect_ms "${CONN_MS:-none}"
  flag p1.done
fi
flag "p1.$ROLE.finished"; wait_flag "p1.$OTHER.finished" 120; sleep 1
T1="$OUT/iwpm-traffic-p1.txt"; decode "$ST" "$T1"
auth_snap "$OUT/auth-p1.txt"
ver=$(av "$OUT/auth-p1.txt" peer_auth_verified); fails=$(awk '$1 ~ /wrong_key|clock|replayed|missing|unkeyed/ && $2 != 0' "$OUT/auth-p1.txt" | tr '\n' ' ')
fig "p1_verified_$ROLE" "$ver"
check p1-verified "peer_auth_verified=${ver:-?} (iwpmctl status); other auth counters non-zero: ${fails:-none}" \
  sh -c "[ '${ver:-0}' -gt 0 ] && [ -z '$fails' ]"
if [ "$ROLE" = server ]; then
  peer_check "$T1" passive; r=$?; nh=$PEER_HANDLES
  all=$(tcount "$T1" " udp (send|recv) $PEER:[0-9]+ "); s124=$(tcount "$T1" " udp (send|recv) $PEER:[0-9]+ [A-Z]+ v4 len=124 ")
  nrq=$(tcount "$T1" " udp recv $PEER:[0-9]+ REQUEST v4 len=124 "); nac=$(tcount "$T1" " udp send $PEER:[0-9]+ ACCEPT v4 len=124 "); nak=$(tcount "$T1" " udp recv $PEER:[0-9]+ ACK v4 len=124 ")
  check p1-sealed "$s124 of $all peer datagrams are 124 bytes (sealed): REQUESTs in $nrq, ACCEPTs out $nac, ACKs in $nak; $nh associations complete" \
    sh -c "[ $r = 0 ] && [ $all -ge 3 ] && [ $s124 = $all ] && [ $nrq -ge 1 ] && [ $nac -ge 1 ] && [ $nak -ge 1 ] && [ $nh -ge $((CM + 1)) ]"
  detail "$PEER_BAD"
  ri_order "$T1" > "$OUT/ri-order-p1.txt"
  nrf=$(grep -c ' remote-info-first$' "$OUT/ri-order-p1.txt"); nno=$(grep -vc ' remote-info-first$' "$OUT/ri-order-p1.txt")
  nri=$(tcount "$T1" ' nl send dst=0 IWCM REMOTE_INFO ')
  check p1-ri-at-once "remote_info_budget=0, sealed REQUESTs: REMOTE_INFO to the kernel before the ACCEPT for $nrf of $((nrf + nno)) associations ($nri REMOTE_INFOs sent; late or none: $nno)" \
    sh -c "[ $nrf -ge $((CM + 1)) ] && [ $nno = 0 ] && [ $nri = $nrf ]"
  detail "$(grep -v ' remote-info-first$' "$OUT/ri-order-p1.txt")"
  fig p1_sealed_server "$s124/$all"
else
  peer_check "$T1" active; r=$?; nh=$PEER_HANDLES
  all=$(tcount "$T1" " udp (send|recv) $PEER:[0-9]+ "); s124=$(tcount "$T1" " udp (send|recv) $PEER:[0-9]+ [A-Z]+ v4 len=124 ")
  nrq=$(tcount "$T1" " udp send $PEER:3935 REQUEST v4 len=124 "); nac=$(tcount "$T1" " udp recv $PEER:[0-9]+ ACCEPT v4 len=124 "); nak=$(tcount "$T1" " udp send $PEER:[0-9]+ ACK v4 len=124 ")
  check p1-sealed "$s124 of $all peer datagrams are 124 bytes (sealed): REQUESTs out $nrq, ACCEPTs in $nac, ACKs out $nak; $nh associations complete" \
    sh -c "[ $r = 0 ] && [ $all -ge 3 ] && [ $s124 = $all ] && [ $nrq -ge 1 ] && [ $nac -ge 1 ] && [ $nak -ge 1 ] && [ $nh -ge $((CM + 1)) ]"
  detail "$PEER_BAD"
  fig p1_sealed_client "$s124/$all"
fi
u=$(unanswered "$T1"); e=$(reply_errors "$T1")
check p1-answered "every kernel request answered, no error replies" sh -c "[ -z '$u' ] && [ -z '$e' ]"
detail "$u$e"
note "part 1: $(elapsed "$T_PH") s"
fi

# ======== part 2: a third host on the wire, with no key ========
PART=2
if want_part 2; then
T_PH=$(uptime_s)
# The wire (run-2vm.sh -w, tools/wire.py on the host) forwards every frame between the two
# VMs and keeps the last sealed REQUEST and ACK of each family that the client's daemon
# sent to the server's. Asked through the share, it injects them again, stripped or with a
# byte flipped, from the client's own MAC, address and port (the victim's), or cuts the
# next REQUEST in flight. It never holds a key.
if [ "$ROLE" = server ]; then
  rigcm listen "$IP" 7801 1 600 > "$OUT/listen-7801.log" 2>&1 & LP=$!
  rigcm serve "${IP6%/*}" 7802 2 600 > "$OUT/listen-7802.log" 2>&1 & LP6=$!   # (listen: IPv4 only)
  waitfor 20 grep -q '^listening' "$OUT/listen-7801.log"; waitfor 20 grep -q '^listening' "$OUT/listen-7802.log"
  flag p2.listening
  prev=v6
  # p2_read TRACE: peer datagrams read from the client's addresses, any port
  p2_read() { grep -E " udp recv ($PEER|\[$PEER6\]):[0-9]+ " "$1"; }
  for step in replay strip flip instrip; do
    wait_flag "p2.$prev.connected" 120
    auth_snap /tmp/a0; decode "$ST" /tmp/t0
    nl0=$(tcount /tmp/t0 ' nl send '); ri0=$(tcount /tmp/t0 ' IWCM REMOTE_INFO '); us0=$(tcount /tmp/t0 ' udp send ')
    ur0=$(p2_read /tmp/t0 | wc -l)
    if [ $step = instrip ]; then
      echo "v4 v6" > "$SYNC/.wire.instrip.go.part"; mv "$SYNC/.wire.instrip.go.part" "$SYNC/wire.instrip.go"
      wait_flag wire.instrip.armed 30; flag p2.instrip.armed
      wait_flag p2.instrip.connected 120; wait_flag wire.instrip.sent 10
    else
      flag "wire.$step.go"; wait_flag "wire.$step.sent" 60
    fi
    sleep 1
    auth_snap /tmp/a1; decode "$ST" /tmp/t1
    nl1=$(tcount /tmp/t1 ' nl send '); ri1=$(tcount /tmp/t1 ' IWCM REMOTE_INFO '); us1=$(tcount /tmp/t1 ' udp send ')
    ur1=$(p2_read /tmp/t1 | wc -l)
    p2_read /tmp/t1 | tail -n $((ur1 - ur0)) > "$OUT/attack-$step-read.txt"
    cp "$SYNC/wire.$step.sent" "$OUT/wire-$step.txt" 2>/dev/null
    inj=$(grep -c -E '^(injected|cut in flight)' "$OUT/wire-$step.txt" 2>/dev/null)
    nv6=$(grep -c ' v6 ' "$OUT/wire-$step.txt" 2>/dev/null)
    d=$(auth_diff /tmp/a0 /tmp/a1)
    case $step in
      replay) c=peer_auth_replayed; what="the kept sealed REQUEST and ACK of each family injected again" ;;
      strip) c=peer_auth_missing; what="the same cut to their first 64 bytes (stripped)" ;;
      flip) c=peer_auth_wrong_key; what="the same with one byte of the message flipped" ;;
    esac
    if [ $step = instrip ]; then
      # the client's next REQUEST of each family cut in flight: each is dropped and
      # counted; the client's daemon sends it again after its retransmission interval and
      # that one is believed, so each connect gets exactly one REMOTE_INFO, at once
      n64=$(grep -c ' REQUEST v[46] len=64 ' "$OUT/attack-$step-read.txt")
      ms=$(echo "$d" | tr ' ' '\n' | grep -c '^peer_auth_missing+2$'); bad=$(echo "$d" | tr ' ' '\n' | grep -E -c '^peer_auth_(wrong_key|clock|replayed|unkeyed)')
      fig p2_instrip_counters "$(echo "$d" | tr ' ' ',')"
      check p2-instrip "the wire cut the client's next sealed REQUEST of each family to 64 bytes in flight ($inj cut, $nv6 IPv6): the daemon read $n64 stripped REQUESTs, counters moved: $d; REMOTE_INFO +$((ri1 - ri0)) for the two connects (one each, from the resent sealed REQUEST)" \
        sh -c "[ $inj = 2 ] && [ $nv6 = 1 ] && [ $n64 = 2 ] && [ $ms = 1 ] && [ $bad = 0 ] && [ $((ri1 - ri0)) = 2 ]"
    else
      fig "p2_${step}_counters" "$(echo "$d" | tr ' ' ',')"
      check "p2-$step" "$what by the wire, as from the client's own address and port ($inj datagrams, $nv6 IPv6): the daemon read $((ur1 - ur0)), counters moved: $d; netlink messages to the kernel +$((nl1 - nl0)) (REMOTE_INFO +$((ri1 - ri0))), datagrams back +$((us1 - us0))" \
        sh -c "[ $inj = 4 ] && [ $nv6 = 2 ] && [ $((ur1 - ur0)) = 4 ] && [ '$d' = '$c+4' ] && [ $nl1 = $nl0 ] && [ $ri1 = $ri0 ] && [ $us1 = $us0 ]"
    fi
    detail "$(cat "$OUT/wire-$step.txt" "$OUT/attack-$step-read.txt" 2>/dev/null | cut -c1-160)"
    flag "p2.$step.checked"; prev=$step
  done
  wait_flag p2.instrip.connected 120
  kill $LP $LP6 2>/dev/null; wait $LP $LP6 2>/dev/null
else
  wait_flag p2.listening 120
  # one keyed exchange over IPv6 first, so that the wire has one of each family to keep
  check_connect p2-v6-connect p2-v6 7802 "" "[${IP6%/*}]:0" "[$PEER6]"
  flag p2.v6.connected
  for step in replay strip flip; do
    wait_flag "p2.$step.checked" 120
    check_connect "p2-after-$step" "p2-$step" 7801
    fig "p2_after_${step}_ms" "${CONN_MS:-none}"
    flag "p2.$step.connected"
  done
  # the in-flight strip: each connect waits for its daemon's resend (1 s), never for the
  # kernel's 10 s timeout
  wait_flag p2.instrip.armed 120
  CMAX0=$CMAX; CMAX=$((CMAX0 + 2000))
  check_connect p2-instrip-v4 p2-instrip-v4 7801
  fig p2_instrip_v4_ms "${CONN_MS:-none}"
  check_connect p2-instrip-v6 p2-instrip-v6 7802 "" "[${IP6%/*}]:0" "[$PEER6]"
  fig p2_instrip_v6_ms "${CONN_MS:-none}"
  CMAX=$CMAX0
  flag p2.instrip.connected
  wait_flag p2.instrip.checked 120
fi
note "part 2: $(elapsed "$T_PH") s"
fi

# ======== part 3: key rotation while connects run ========
PART=3
if want_part 3; then
T_PH=$(uptime_s)
auth_snap "$OUT/auth-p3-before.txt"
udp_raw "$ST" > /tmp/raw-p3-before; N3=$(wc -l < /tmp/raw-p3-before)
# rot_step N: this side's key file to step N and SIGHUP
rot_step() {
  keys_step "$1"; kill -HUP "$IWPMD_PID"; sleep 1
  ctl --json keys > "$OUT/keys-step$1.json" 2>&1
  note "rotation step $1: SIGHUP; keys now $(ctl keys 2>&1 | tr '\n' '|' | cut -c1-200)"
}
# The connects: ROT_ROUNDS rounds of ROT_PER connects (ROT_N in all, 1 000 by default), one
# round after another, each round two cmtime processes of ROT_PER/2 at once (one cmtime
# process creates at most about 71 QPs on the rig's siw: with -c 100, 29 of each 100 failed
# in create_qp), each to a cmtime server of its own (ports 7900..) that the server starts
# first; the client starts rotation step S once round 2S has ended, so that every SIGHUP
# (server first, then client) lands while the next round's connects are in flight.
ROT_N=${RIG_ROTATE_CONNECTS:-1000}; ROT_ROUNDS=${RIG_ROTATE_ROUNDS:-10}; ROT_PER=$((ROT_N / ROT_ROUNDS)); ROT_HALF=$((ROT_PER / 2))
if [ "$ROLE" = server ]; then
  listen_snap /tmp/ls3; SPS=""; k=0
  while [ $k -lt $((2 * ROT_ROUNDS)) ]; do
    cmtime -b "$IP" -p $((7900 + k)) -c $ROT_HALF > "$OUT/cmtime-p3-$k-server.log" 2>&1 & SPS="$SPS $!"
    k=$((k + 1))
  done
  p3_listening() { ss -ltnH | awk '{print $4}' > /tmp/ls-now3; [ "$(only_in /tmp/ls-now3 /tmp/ls3 | wc -l)" -ge $((2 * ROT_ROUNDS)) ]; }
  waitfor 60 p3_listening || note "part 3: not every cmtime server listens after 60 s"
  flag p3.listening
  for s in 1 2 3; do wait_flag "p3.go$s" 300; rot_step $s; flag "p3.rot$s.server"; wait_flag "p3.rot$s.client" 60; done
  wait_flag p3.done 600
  sleep 0.5; for p in $SPS; do kill $p 2>/dev/null; wait $p 2>/dev/null; done
else
  wait_flag p3.listening 120
  R3="$OUT/p3-rounds.txt"; : > "$R3"
  # cm_half K: one cmtime process of the round (server port 7900+K); its line in $R3.K:
  # rc, failure lines, connect total ms, slowest connect ms
  cm_half() {
    timeout 300 cmtime -s "$PEER" -p $((7900 + $1)) -c $ROT_HALF > "$OUT/cmtime-p3-$1-client.log" 2>&1; rc=$?
    f=$(grep -i 'fail' "$OUT/cmtime-p3-$1-client.log" | grep -v -c 'rdma_get_cm_event in process_server_events: Bad file descriptor')
    grep -A8 '^step' "$OUT/cmtime-p3-$1-client.log" > "$OUT/cmtime-p3-$1.txt"
    echo "$rc $f $(cm_col "$OUT/cmtime-p3-$1.txt" connect 1) $(cm_col "$OUT/cmtime-p3-$1.txt" connect 2)" > "$R3.$1"
  }
  (
    k=0
    while [ $k -lt $ROT_ROUNDS ]; do
      t0=$(uptime_s)
      cm_half $((2 * k)) & h=$!; cm_half $((2 * k + 1)); wait $h
      # round, rc of each half, failure lines, connect total ms (sum), slowest connect ms, wall s
      cat "$R3.$((2 * k))" "$R3.$((2 * k + 1))" | awk -v k=$k -v w="$(elapsed "$t0")" '
        { rc = rc (NR > 1 ? "/" : "") $1; f += $2; t += $3; if ($4 == "") miss = 1; else if ($4 > m) m = $4 }
        END { printf "%d %s %d %.2f %s %s\n", k, rc, f, t, (miss ? "" : m), w }' >> "$R3"
      k=$((k + 1))
    done
  ) & LOOP=$!
  for s in 1 2 3; do
    waitfor 300 sh -c "[ \$(wc -l < $R3) -ge $((2 * s)) ]"
    flag "p3.go$s"; wait_flag "p3.rot$s.server" 60; rot_step $s; flag "p3.rot$s.client"
  done
  wait_or_kill $LOOP 600
  flag p3.done
  # per round: index, cmtime rc, failure lines, connect total ms, slowest connect ms, wall s
  n=$(wc -l < "$R3"); nok=$(awk '$2=="0/0" && $3==0 && NF==6' "$R3" | wc -l)
  mx=$(awk '$5 > m { m = $5 } END { print m + 0 }' "$R3")
  wmx=$(awk '$NF > m { m = $NF } END { print m + 0 }' "$R3")
  tot=$(awk '{ t += $4 } END { printf "%.0f", t }' "$R3")
  fig p3_connects "$((nok * ROT_PER))/$ROT_N"; fig p3_connect_max_ms "$mx"; fig p3_round_max_s "$wmx"; fig p3_connect_total_ms "$tot"
  check p3-connects "cmtime during the rotation: $nok of $ROT_ROUNDS rounds of $ROT_PER connects (two cmtime -c $ROT_HALF at once) all connected ($((nok * ROT_PER)) of $ROT_N), connect time summed over rounds ${tot} ms, slowest connect ${mx} ms (stall limit ${STALL_S} s), slowest round ${wmx} s" \
    sh -c "[ $n = $ROT_ROUNDS ] && [ $nok = $n ] && awk -v m=$mx -v s=$STALL_S 'BEGIN { exit !(m < s * 1000) }'"
  detail "$(awk '$2!="0/0" || $3!=0 || NF!=6' "$R3")"
  sed 's/^/    round /' "$R3" >> "$SUM"
fi
flag "p3.$ROLE.finished"; wait_flag "p3.$OTHER.finished" 120; sleep 1
auth_snap "$OUT/auth-p3-after.txt"
d=$(auth_diff "$OUT/auth-p3-before.txt" "$OUT/auth-p3-after.txt")
check p3-no-refusal "auth counters over the rotation: $d (only peer_auth_verified may move)" \
  sh -c "echo '$d' | grep -q -x 'peer_auth_verified+[0-9]*'"
ctl --json keys > "$OUT/keys-final.json" 2>&1; ctl keys > "$OUT/keys-final.txt" 2>&1
ids=$(grep -o '"id": *[0-9]*' "$OUT/keys-final.json" | sed 's/.*: *//' | tr '\n' ' ' | sed 's/ $//')
sg=$(grep -o '"signing": *true' "$OUT/keys-final.json" | wc -l)
rerr=$(grep -o '"reload_error": *[^,}]*' "$OUT/keys-final.json" | sed 's/.*: *//')
v2=$(grep -o '"verified": *[0-9]*' "$OUT/keys-final.json" | sed 's/.*: *//' | head -1)
check p3-keys "iwpmctl keys after step 3: ids [$ids], $sg signing, key 2 verified ${v2:-?}, reload_error ${rerr:-?}" \
  sh -c "[ '$ids' = 2 ] && [ $sg = 1 ] && [ '${rerr:-x}' = null ] && [ '${v2:-0}' -gt 0 ]"
detail "$(cat "$OUT/keys-final.txt")"
udp_raw "$ST" > "$OUT/udp-raw-p3.txt"
tail -n +$((N3 + 1)) "$OUT/udp-raw-p3.txt" | awk '$1=="send" && $4==124 {print $5}' > /tmp/kid
k1=$(grep -c -x 1 /tmp/kid); k2=$(grep -c -x 2 /tmp/kid); first=$(head -1 /tmp/kid); last=$(tail -1 /tmp/kid)
fig "p3_sent_key1_key2_$ROLE" "$k1/$k2"
check p3-key-ids "sealed datagrams this daemon sent during part 3: $k1 under key id 1, $k2 under key id 2; first ${first:-none}, last ${last:-none}" \
  sh -c "[ '$first' = 1 ] && [ '$last' = 2 ] && [ $k2 -ge 1 ] && [ $((k1 + k2)) = $(wc -l < /tmp/kid) ]"
alive=no; kill -0 "$IWPMD_PID" 2>/dev/null && alive=yes
check p3-alive "daemon alive after three SIGHUPs: $alive" test $alive = yes
note "part 3: $(elapsed "$T_PH") s"
fi
if want_part 1; then
  flag "p123.$ROLE.closing"; wait_flag "p123.$OTHER.closing" 120
  [ -n "$LP" ] && { kill $LP 2>/dev/null; wait $LP 2>/dev/null; }
  check p123-stop "daemon of parts 1-3 exits on SIGTERM" stop_daemon
fi

# ======== part 4: ours keyed <-> rdma-core's iwpmd, both directions ========
PART=4
if want_part 4; then
for dir in ours-c c-ours; do
  T_PH=$(uptime_s)
  # dir = server-client
  mine=${dir%-*}; [ "$ROLE" = client ] && mine=${dir#*-}
  keys_step 0
  if [ "$mine" = ours ]; then ours_up "p4-$dir" 0; else c_up "p4-$dir"; fi; r=$?
  check "p4-$dir-start" "$mine up" test $r = 0
  flag "p4.$dir.$ROLE.up"; wait_flag "p4.$dir.$OTHER.up" 120
  if [ "$ROLE" = server ]; then
    listen_snap /tmp/ls0
    cmtime -b "$IP" -c "$CM" > "$OUT/cmtime-p4-$dir-server.log" 2>&1 & sp=$!
    new_listen /tmp/ls0 > /dev/null; flag "p4.$dir.listening"; wait_flag "p4.$dir.done" 300
    sleep 0.5; kill $sp 2>/dev/null; wait $sp 2>/dev/null
  else
    wait_flag "p4.$dir.listening" 120
    check_cmtime "p4-$dir-cmtime" "$PEER" "$CM" "p4-$dir"
    fig "p4_${dir}_cmtime_total_ms" "$(cm_col "$OUT/cmtime-p4-$dir.txt" connect 1)"; fig "p4_${dir}_cmtime_max_ms" "$CM_CONNECT_MAX_MS"
    flag "p4.$dir.done"
  fi
  flag "p4.$dir.$ROLE.finished"; wait_flag "p4.$dir.$OTHER.finished" 120; sleep 1
  T4="$OUT/iwpm-traffic-p4-$dir.txt"; decode "$ST" "$T4"
  if [ "$mine" = ours ]; then
    auth_snap "$OUT/auth-p4-$dir.txt"
    fl=$(awk '$1 !~ /verified/ && $2 != 0' "$OUT/auth-p4-$dir.txt" | tr '\n' ' ')
    check "p4-$dir-auth" "ours keyed against C: no auth counter but peer_auth_verified moved (non-zero: ${fl:-none})" test -z "$fl"
  fi
  if [ "$ROLE" = server ]; then
    peer_check "$T4" passive; r=$?; nh=$PEER_HANDLES
    if [ "$mine" = ours ]; then
      n64=$(tcount "$T4" " udp recv $PEER:[0-9]+ REQUEST v4 len=64 "); nrq=$(tcount "$T4" " udp recv $PEER:[0-9]+ REQUEST ")
      s124=$(tcount "$T4" " udp send $PEER:[0-9]+ [A-Z]+ v4 len=124 ")
      check "p4-$dir-plain" "ours (keyed) as the server of C: $n64 of $nrq REQUESTs plain 64 bytes, answered in plain ($s124 sealed answers); $nh associations complete" \
        sh -c "[ $r = 0 ] && [ $nh -ge $CM ] && [ $nrq -ge 1 ] && [ $n64 = $nrq ] && [ $s124 = 0 ]"
    else
      n64=$(tcount "$T4" " udp recv $PEER:[0-9]+ REQUEST v4 len=64 "); nrq=$(tcount "$T4" " udp recv $PEER:[0-9]+ REQUEST ")
      check "p4-$dir-c-reads" "rdma-core as the server of ours (keyed): read $n64 of $nrq REQUESTs as 64 bytes; $nh associations complete" \
        sh -c "[ $r = 0 ] && [ $nh -ge $CM ] && [ $nrq -ge 1 ] && [ $n64 = $nrq ]"
    fi
  else
    peer_check "$T4" active; r=$?; nh=$PEER_HANDLES
    if [ "$mine" = ours ]; then
      s124=$(tcount "$T4" " udp send $PEER:3935 REQUEST v4 len=124 "); nrq=$(tcount "$T4" " udp send $PEER:3935 REQUEST ")
      a48=$(tcount "$T4" " udp recv $PEER:[0-9]+ ACCEPT v4 len=48 "); nac=$(tcount "$T4" " udp recv $PEER:[0-9]+ ACCEPT ")
      check "p4-$dir-sealed" "ours (keyed) as the client of C: $s124 of $nrq REQUESTs sealed (124 bytes), $a48 of $nac ACCEPTs plain 48 bytes, taken; $nh associations complete" \
        sh -c "[ $r = 0 ] && [ $nh -ge $CM ] && [ $nrq -ge 1 ] && [ $s124 = $nrq ] && [ $nac -ge 1 ] && [ $a48 = $nac ]"
    fi
  fi
  detail "$PEER_BAD"
  check "p4-$dir-stop" "$mine exits on SIGTERM" stop_daemon
  note "part 4 ($dir): $(elapsed "$T_PH") s"
done
fi

check_dmesg dmesg
flag "$ROLE.finished"; wait_flag "$OTHER.finished" 120
note "suite time: $(elapsed "$T_SUITE") s"
fig suite_s "$(elapsed "$T_SUITE")"
cat "$SUM"
finish
