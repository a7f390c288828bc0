#!/bin/sh
# Suite "privdrop" (our daemon only): after start-up the daemon keeps only CAP_NET_ADMIN
# (effective, permitted and bounding sets; nothing inheritable or ambient; no_new_privs)
# and still serves the real kernel: rping and cmtime through it, its trace showing the
# kernel's requests answered, its SIGUSR1 dump listing live mappings. Then the same as
# user nobody (--user), and without any capability (refused on 6.1: the multicast group
# join needs CAP_NET_ADMIN there). Also checks the attribute the packaged udev rule
# (packaging/iwpmd-rnic.rules) matches: siw0's node_type reads "4: RNIC".
# Knobs: iwpmd=PATH  cmtime=N [20]  rping_count=N [5]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
N=${RIG_RPING_COUNT:-5}; CM=${RIG_CMTIME:-20}
NET_ADMIN_ONLY=0000000000001000
RNIC_NODE_TYPE="4: RNIC"   # the text packaging/iwpmd-rnic.rules compares ATTR{node_type} with

setup_net
note "kernel $(uname -r); siw0 on $DEV ($IP); daemon $IWPMD $IWPMD_ARGS"
start_syslog
dmesg_mark

# ---- the udev rule's attribute ----------------------------------------------------------
nt=$(cat /sys/class/infiniband/siw0/node_type 2>/dev/null)
check udev-node-type "siw0 node_type reads '$nt' (rule matches '$RNIC_NODE_TYPE')" test "$nt" = "$RNIC_NODE_TYPE"

# status_of PID FIELD: a /proc/PID/status field's value
status_of() { sed -n "s/^$2:[[:space:]]*//p" "/proc/$1/status"; }
# check_caps TAG: the running daemon holds CAP_NET_ADMIN only
check_caps() {
  local p=$IWPMD_PID eff prm bnd amb inh nnp
  eff=$(status_of "$p" CapEff); prm=$(status_of "$p" CapPrm); bnd=$(status_of "$p" CapBnd)
  amb=$(status_of "$p" CapAmb); inh=$(status_of "$p" CapInh); nnp=$(status_of "$p" NoNewPrivs)
  check "$1-caps" "CapEff $eff CapPrm $prm CapBnd $bnd CapAmb $amb CapInh $inh NoNewPrivs $nnp" \
    sh -c "[ $eff = $NET_ADMIN_ONLY ] && [ $prm = $NET_ADMIN_ONLY ] && [ $bnd = $NET_ADMIN_ONLY ] &&
           [ $amb = 0000000000000000 ] && [ $inh = 0000000000000000 ] && [ $nnp = 1 ]"
}
# serve TAG: rping, a live pair in the dump, cmtime, all through the dropped daemon
serve() {
  check_rping "$1-rping" "$IP" "$N" "$1"
  live_pair "$IP" 7300 "$1-live"; r=$?; sp=$LIVE_SP; cp=$LIVE_CP
  iwpmd_dump "$OUT/dump-$1.txt"; n=$DUMP_N
  kill $cp $sp 2>/dev/null; wait $cp $sp 2>/dev/null
  check "$1-dump" "SIGUSR1 dump of the dropped daemon: $n mappings with a live listener :7300 and client" \
    sh -c "[ $r = 0 ] && [ $n -ge 2 ] && grep -q '$IP:7300' '$OUT/dump-$1.txt'"
  check_cmtime "$1-cmtime" "$IP" "$CM" "$1"
}

# ---- as root, capabilities dropped ------------------------------------------------------
ST="$OUT/iwpmd.strace"
check start "daemon up (strace'd) with a NETLINK_RDMA socket" start_iwpmd "$ST"
check_caps root
check root-uid "still uid 0 without --user: $(status_of "$IWPMD_PID" Uid)" \
  sh -c "sed -n 's/^Uid:[[:space:]]*//p' /proc/$IWPMD_PID/status | grep -q '^0[[:space:]]'"
serve root
check_caps root-after
check stop "daemon exits on SIGTERM within 5 s" stop_iwpmd
T="$OUT/iwpm-traffic.txt"; decode "$ST" "$T"
note "trace: $(tail -1 "$T")"
check trace-add "listener ADD_MAPPING $IP:7174 answered with MAPPING_ERR=0 after the drop" \
  grep -q " nl send dst=0 IWCM ADD_MAPPING .*ADDR=$IP:7174 .*MAPPING_ERR=0" "$T"
remote_info_ok "$T" "$IP:7174"; r=$?
check trace-query "QUERY_MAPPING replies and REMOTE_INFO as owed ($RI_SENT sent, $RI_OWED port-mapped associations) after the drop" \
  sh -c "grep -q ' nl send dst=0 IWCM QUERY_MAPPING .*MAPPING_ERR=0' $T && [ $r = 0 ]"
u=$(unanswered "$T"); check trace-answered "every kernel request answered" test -z "$u"
detail "$u"
e=$(reply_errors "$T"); check trace-noerr "no error replies / HANDLE_ERR" test -z "$e"
detail "$e"
grep -E 'privileges dropped|Starting iWarp' "$SYSLOG" | tail -2 | sed 's/^/    /' >> "$SUM"

# ---- as nobody (--user), CAP_NET_ADMIN kept across setuid --------------------------------
IWPMD_ARGS="$IWPMD_ARGS --user nobody"
check start-user "daemon up with --user nobody" start_iwpmd ""
check_caps user
check user-uid "uid/gid nobody: Uid $(status_of "$IWPMD_PID" Uid | tr '\t' ' '), Groups '$(status_of "$IWPMD_PID" Groups)'" \
  sh -c "sed -n 's/^Uid:[[:space:]]*//p' /proc/$IWPMD_PID/status | grep -q '^65534[[:space:]]65534[[:space:]]65534[[:space:]]65534' &&
         sed -n 's/^Gid:[[:space:]]*//p' /proc/$IWPMD_PID/status | grep -q '^65534[[:space:]]65534'"
serve user
check stop-user "daemon exits on SIGTERM within 5 s" stop_iwpmd
# ---- no capability at all: what CAP_NET_ADMIN is for -------------------------------------
# 6.1: joining the iwpm multicast group needs it, so the daemon must refuse to start with a
# hint; 6.12 lets anyone join, so there it starts (and is stopped by the timeout).
kv=$(uname -r | awk -F. '{ print $1 * 100 + $2 }')
out=$(timeout 3 busybox su -s /bin/sh nobody -c "$IWPMD --foreground --log-stderr" 2>&1); rc=$?
echo "$out" > "$OUT/no-caps.log"
if [ "$kv" -lt 612 ]; then
  check no-caps "without CAP_NET_ADMIN on $(uname -r): start-up refused (rc $rc) with the CAP_NET_ADMIN hint" \
    sh -c "[ $rc = 1 ] && grep -q 'cannot bind the NETLINK_RDMA socket.*needs CAP_NET_ADMIN' '$OUT/no-caps.log'"
else
  check no-caps "without CAP_NET_ADMIN on $(uname -r): the group join is allowed, the daemon starts and completes the kernel handshake (rc $rc)" \
    sh -c "grep -q 'kernel handshake done' '$OUT/no-caps.log' && ! grep -q 'Couldn.t start' '$OUT/no-caps.log'"
fi
detail "$(grep -E 'Couldn.t start|Starting' "$OUT/no-caps.log")"
check_dmesg dmesg
cat "$SUM"
finish
