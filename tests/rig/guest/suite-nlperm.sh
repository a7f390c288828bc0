#!/bin/sh
# Suite "nlperm": what an unprivileged local process (uid 65534, no capabilities) can do on
# the iwpm netlink channel of this kernel, with a daemon running. The kernels differ:
# 6.1's RDMA netlink socket keeps its multicast groups for CAP_NET_ADMIN, 6.12's lets
# anyone join (docs/protocol.md §5.8). Everything is asked of the kernel for real:
#  1. send a kernel-shaped ADD_MAPPING to the daemon's port id (expected on both: refused
#     by the kernel with EPERM, so only privileged processes can forge kernel requests,
#     which the daemon then tells apart by the sender's port id: suite negative);
#  2. join group 2 (RDMA_NL_GROUP_IWPM) while a listener makes the kernel multicast its
#     REG_PID request (expected: refused on 6.1; joined on 6.12, and the REG_PID arrives
#     there too); the daemon must answer it and the connection work as before;
#  3. say HELLO to the kernel as a daemon would (expected on both: answered, since no iwpm
#     operation needs a capability); the kernel then takes that process for the port
#     mapper and marks the registration incomplete. Once it has gone, connections must
#     still work without a stall, and the daemon must be the port mapper again by
#     answering the REG_PID that the next listen multicasts; a daemon restart
#     (HELLO + MAPINFO) works as well.
# Knobs: iwpmd=PATH iwpmd_args=A,B  nobody=UID [65534]  rival=1 (optional last step, below)
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
NOBODY=${RIG_NOBODY:-65534}
KREL=$(uname -r)
case "$KREL" in
  6.1.*) JOIN=refused ;;
  6.12.*) JOIN=joined ;;
  *) JOIN=unknown ;;
esac

setup_net
note "kernel $KREL; siw0 on $DEV ($IP); daemon $IWPMD $IWPMD_ARGS; unprivileged uid $NOBODY; group-2 join expected: $JOIN"
start_syslog
dmesg_mark
ST="$OUT/iwpmd.strace"
check start "daemon up" start_iwpmd "$ST"

# ---- 1. unprivileged forgery to the daemon's port id -----------------------------------
rigtool -u "$NOBODY" nl-add "$IWPMD_PORTID" "$IP" 4242 4242 > "$OUT/forge-nonroot.txt" 2>&1; r=$?
check forge-nonroot "uid $NOBODY cannot send a kernel-shaped request to the daemon's port id $IWPMD_PORTID" \
  sh -c "[ $r != 0 ] && grep -q 'Operation not permitted' $OUT/forge-nonroot.txt"
detail "$(cat "$OUT/forge-nonroot.txt")"

# ---- 2. unprivileged group-2 member while the kernel multicasts REG_PID -------------------
L="$OUT/listen-nonroot.txt"
rigtool -u "$NOBODY" nl-listen 2 8 > "$L" 2>&1 & lp=$!
sleep 1
check_rping rping-listen "$IP" 5 listen 7601
wait $lp; lr=$?
note "uid $NOBODY joining group 2: $(head -1 "$L")"
grep '^recv' "$L" | head -5 | sed 's/^/    /' >> "$SUM"
case "$JOIN" in
  refused)
    check join-nonroot "uid $NOBODY may not join group 2 on $KREL (bind refused: EPERM)" \
      sh -c "[ $lr = 3 ] && grep -q 'refused: Operation not permitted' $L" ;;
  joined)
    check join-nonroot "uid $NOBODY may join group 2 on $KREL" sh -c "[ $lr = 0 ] && grep -q ': joined' $L"
    check regpid-nonroot "uid $NOBODY received the kernel's REG_PID multicast (device siw0)" \
      grep -q 'recv client=2 op=REG_PID .*dev=siw0' "$L" ;;
  *) echo "INFO join-nonroot: kernel $KREL: $(head -1 "$L")" >> "$CHECKS" ;;
esac
detail "$(cat "$L")" 8

# ---- 3. unprivileged HELLO: the kernel takes anyone for the port mapper ----------------------
iwpmd_dump "$OUT/dump-before-hello.txt"
H="$OUT/hello-nonroot.txt"
rigtool -u "$NOBODY" nl-hello > "$H" 2>&1; hr=$?
check hello-nonroot "the kernel answers an unprivileged HELLO (no iwpm operation needs a capability)" \
  sh -c "[ $hr = 0 ] && grep -q 'recv client=2 op=HELLO .*abi=4' $H"
detail "$(cat "$H")" 6
# rigtool has exited: the kernel's port id now names a closed socket
check_rping rping-after-hello "$IP" 5 after-hello 7602
live_pair "$IP" 7603 live-after-hello; r=$?
iwpmd_dump "$OUT/dump-after-hello.txt"
if grep -q "$IP:7603(" "$OUT/dump-after-hello.txt"; then m=mapped; else m=unmapped; fi
kill $LIVE_CP $LIVE_SP 2>/dev/null; wait $LIVE_CP $LIVE_SP 2>/dev/null
# The HELLO left the kernel's registration incomplete, so the next listen multicasts REG_PID
# again; the daemon, still a group-2 member, answers it and is the port mapper once more.
check retaken "after the unprivileged HELLO the daemon answers the next REG_PID and maps a new listener :7603" \
  sh -c "[ $r = 0 ] && [ $m = mapped ]"
note "after the unprivileged HELLO a new listener is $m by the daemon (live pair rc $r)"
check stop "daemon exits on SIGTERM" stop_iwpmd

# ---- a daemon restart takes the port mapper back --------------------------------------
ST2="$OUT/iwpmd-restarted.strace"
check restart "daemon up again" start_iwpmd "$ST2"
live_pair "$IP" 7604 live-restarted; r=$?
iwpmd_dump "$OUT/dump-restarted.txt"
check restart-mapped "after the restart a new listener :7604 is mapped again (SIGUSR1 dump)" \
  sh -c "[ $r = 0 ] && grep -q '$IP:7604(' $OUT/dump-restarted.txt"
kill $LIVE_CP $LIVE_SP 2>/dev/null; wait $LIVE_CP $LIVE_SP 2>/dev/null
check stop-restarted "daemon exits on SIGTERM" stop_iwpmd

# ---- optional (rig.rival=1, off in run-all): an unprivileged rival port mapper ------------
# rigtool mute-responder as uid 65534 next to a running daemon: it says HELLO, joins groups
# 1+2, answers REG_PID and ADD_MAPPING, never QUERY. On 6.1 its bind is refused; on 6.12 it
# runs, and which of the two gets each kernel request is a race. Reported as INFO only.
if [ "${RIG_RIVAL:-0}" = 1 ]; then
  ST3="$OUT/iwpmd-rival.strace"
  start_iwpmd "$ST3" || bad rival-start "daemon did not start"
  dmesg_mark
  rigtool -u "$NOBODY" mute-responder > "$OUT/rival.txt" 2>&1 & rp=$!
  sleep 1
  if kill -0 $rp 2>/dev/null; then rs=running; else rs="refused: $(head -1 "$OUT/rival.txt")"; fi
  rping_pair "$IP" 3 rival1 7611; r1=$?; t1=$RPING_T
  rping_pair "$IP" 3 rival2 7612; r2=$?; t2=$RPING_T
  kill $rp 2>/dev/null; wait $rp 2>/dev/null
  stop_iwpmd
  T3="$OUT/iwpm-traffic-rival.txt"; decode "$ST3" "$T3"
  echo "INFO rival: unprivileged rival port mapper $rs; rping rc $r1 in ${t1}s, rc $r2 in ${t2}s; kernel requests the daemon saw: $(cnt "$T3" ' nl recv src=0 IWCM (ADD|QUERY)_MAPPING '); REJECTs sent: $(cnt "$T3" ' udp send .* REJECT '); kernel: $(dmesg_iwpm_since | head -3 | tr '\n' '|')" >> "$CHECKS"
fi

T="$OUT/iwpm-traffic.txt"; decode "$ST" "$T"
T2="$OUT/iwpm-traffic-restarted.txt"; decode "$ST2" "$T2"
check regpid-answered "the daemon answered the REG_PID it shared with the unprivileged member" \
  grep -q ' nl send dst=0 IWCM REG_PID .*IBDEV_NAME=siw0 .*PID_ERR=0' "$T"
u=$(unanswered "$T"); check trace-answered "every kernel request answered with SEQ = request seq" test -z "$u"; detail "$u"
u=$(unanswered "$T2"); check trace-answered-restarted "after the restart too" test -z "$u"; detail "$u"
cat "$SUM"
finish
