#!/bin/sh
# Suite "negative": hostile local input must not disturb the daemon.
#  1. Forged netlink: another local process (rigtool, root) unicasts kernel-shaped iwpm
#     ADD_MAPPING / REMOVE_MAPPING (header pid 0, like the kernel's) to the daemon's port
#     id. Expectation rig.forged=ignored (default): no reply, mapping table unchanged.
#     rig.forged=accepted is the positive control for a daemon known not to check the
#     sender (the C iwpmd): the forged mapping must show up, proving the forgery really
#     reached the daemon.
#  2. Garbage UDP datagrams to port 3935 (IPv4 and IPv6): received, never answered,
#     the daemon stays up, and connections keep working with the full peer exchange.
# Knobs: iwpmd=PATH iwpmd_args=A,B  forged=ignored|accepted  rping_count=N [10]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
N=${RIG_RPING_COUNT:-10}; FORGED=${RIG_FORGED:-ignored}
IP6=fd00:88::1

setup_net
ip -6 addr add "$IP6/64" dev "$DEV" nodad
note "kernel $(uname -r); siw0 on $DEV ($IP, $IP6); daemon $IWPMD $IWPMD_ARGS; forged netlink expected: $FORGED"
start_syslog
dmesg_mark
ST="$OUT/iwpmd.strace"
check start "daemon up" start_iwpmd "$ST"
rping -s -P -a "$IP" -p 7400 > "$OUT/rping-live-server.log" 2>&1 & sp=$!
wait_listen 7400
iwpmd_dump "$OUT/dump-before.txt"; dump_pairs "$OUT/dump-before.txt" > "$OUT/pairs-before.txt"
check dump-before "listener $IP:7400 mapped before the forgery" grep -q "$IP:7400(" "$OUT/pairs-before.txt"

# ---- 1. forged netlink ----------------------------------------------------------
rigtool nl-add "$IWPMD_PORTID" "$IP" 4242 4242 > "$OUT/forge.txt" 2>&1; r1=$?
rigtool nl-remove "$IWPMD_PORTID" "$IP" 7400 4343 >> "$OUT/forge.txt" 2>&1; r2=$?
check forge-sent "forged ADD_MAPPING $IP:4242 and REMOVE_MAPPING $IP:7400 sent to port id $IWPMD_PORTID" \
  sh -c "[ $r1 = 0 ] && [ $r2 = 0 ]"
detail "$(cat "$OUT/forge.txt")"
sleep 1
iwpmd_dump "$OUT/dump-forged.txt"; dump_pairs "$OUT/dump-forged.txt" > "$OUT/pairs-forged.txt"

# ---- 2. garbage UDP to 3935 --------------------------------------------------------
G="$OUT/garbage.txt"; : > "$G"
junk() { rigtool udp "$1" 3935 "$2" >> "$G" 2>&1; }
z() { printf '00%.0s' $(seq "$1"); }                               # z N: N zero bytes, hex
WIRE_IPS="0a580001$(z 12)0a580001$(z 12)"                          # cp, ap = 10.88.0.1
junk "$IP" 30313233343536373839                                    # 10 bytes
junk "$IP" 07                                                      # 1 byte
junk "$IP" "07$(z 47)"                                             # 48 bytes, IP version 7
junk "$IP" "$(printf 'ff%.0s' $(seq 200))"                         # 200 bytes of 0xff
junk "$IP" "1400000200010001deadbeefdeadbeef$WIRE_IPS"             # ACCEPT, unknown association
junk "$IP" "2400000200010001deadbeefdeadbeef$WIRE_IPS"             # ACK, unknown association
junk "$IP6" 3031323334353637383930313233                          # 14 bytes over IPv6
junk "$IP6" "08$(z 63)"                                            # 64 bytes, IP version 8
sleep 2
kill -0 "$IWPMD_PID" 2>/dev/null; alive=$?
check alive "daemon still running after the garbage" test $alive = 0

# ---- 3. connections keep working --------------------------------------------------
check_rping rping-after "$IP" "$N" after 7401
t0=$(uptime_s)
timeout 60 rping -c -a "$IP" -p 7400 -C "$N" -v > "$OUT/rping-old-listener.log" 2>&1; rc=$?
t=$(elapsed "$t0")
if [ "$FORGED" = ignored ]; then
  r=1; [ $rc = 0 ] && lt "$t" "$STALL_S" && r=0
  check rping-forged-listener "connection to the listener named in the forged REMOVE: rc=$rc in ${t}s" test $r = 0
else note "connection to the listener the forged REMOVE targeted: rc=$rc in ${t}s (informational with forged=accepted)"; fi
kill $sp 2>/dev/null; wait $sp 2>/dev/null
if [ "$FORGED" = ignored ]; then check_dmesg dmesg
else note "kernel lines (forged=accepted): $(dmesg_iwpm_since | head -3 | tr '\n' '|')"; fi
check stop "daemon exits on SIGTERM" stop_iwpmd

# ---- evidence from the daemon's trace ------------------------------------------------
T="$OUT/iwpm-traffic.txt"; decode "$ST" "$T"
note "trace: $(tail -1 "$T")"
got_add=$(grep -E ' nl recv .* ADD_MAPPING .*SEQ=4242 .*ADDR='"$IP"':4242' "$T")
got_rem=$(grep -E ' nl recv .* REMOVE_MAPPING .*SEQ=4343 .*ADDR='"$IP"':7400' "$T")
check forge-received "the daemon read both forged messages (strace recv)" sh -c "[ -n '$got_add' ] && [ -n '$got_rem' ]"
detail "$got_add
$got_rem"
replies=$(grep -E ' nl send .*SEQ=(4242|4343) ' "$T")
if [ "$FORGED" = ignored ]; then
  check forge-no-reply "no reply to the forged requests" test -z "$replies"; detail "$replies"
  if cmp -s "$OUT/pairs-before.txt" "$OUT/pairs-forged.txt"; then
    ok forge-table "mapping table unchanged by the forgery ($(wc -l < "$OUT/pairs-forged.txt") mappings)"
  else bad forge-table "mapping table changed by forged netlink"; detail "$(diff "$OUT/pairs-before.txt" "$OUT/pairs-forged.txt")" 10; fi
else
  check forge-accepted "positive control: the forged mapping $IP:4242 is in the table and $IP:7400 is gone" \
    sh -c "grep -q '$IP:4242(' $OUT/pairs-forged.txt && ! grep -q '$IP:7400(' $OUT/pairs-forged.txt"
  detail "$replies"
fi
# garbage: every datagram received, none answered
ports=$(sed -n 's/.* from port \([0-9]*\)$/\1/p' "$G" | tr '\n' ' ')
nrecv=0; answered=""
for p in $ports; do
  grep -q -E " udp recv [^ ]*:$p " "$T" && nrecv=$((nrecv+1))
  a=$(grep -E " udp send [^ ]*:$p " "$T"); [ -n "$a" ] && answered="$answered$a
"
done
nsent=$(echo $ports | wc -w)
check garbage-received "daemon read $nrecv of $nsent garbage datagrams" sh -c "[ $nsent = 8 ] && [ $nrecv = $nsent ]"
detail "$(cat "$G")" 8
check garbage-no-answer "no UDP answer to any garbage datagram" test -z "$answered"; detail "$answered"
peer_check "$T" both 4 "$IP:7401"; r=$?
check trace-peer "after the garbage: $PEER_HANDLES associations, each with REQUEST/ACCEPT/ACK both ways" test $r = 0
detail "$PEER_BAD"
remote_info_ok "$T" "$IP:7401"; r=$?
check trace-remote-info "REMOTE_INFO as owed for the connections after the garbage ($RI_SENT sent, $RI_OWED port-mapped associations)" test $r = 0
cat "$SUM"
finish
