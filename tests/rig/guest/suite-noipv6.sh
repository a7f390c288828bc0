#!/bin/sh
# Suite "noipv6": one VM booted with ipv6.disable=1 (run-vm.sh -K ipv6.disable=1), so
# socket(AF_INET6, ...) fails with EAFNOSUPPORT. The daemon under test (strace'd) must
# start anyway with its IPv4 sockets only, say in its log that a family is missing, and
# serve an IPv4 rping with the full port-mapper conversation.
# Knobs: iwpmd=PATH iwpmd_args=A,B  rping_count=N [10]
#        family_log=ERE [address family not supported|Address family not supported]
RIG_LIB_DIR=$(dirname "$0"); . "$RIG_LIB_DIR/lib.sh"
N=${RIG_RPING_COUNT:-10}
FAMILY_LOG=${RIG_FAMILY_LOG:-[Aa]ddress family not supported}

# ---- the kernel really has no IPv6 -------------------------------------------------
v6=absent
[ -e /proc/net/if_inet6 ] && v6="present (/proc/net/if_inet6)"
[ -d /proc/sys/net/ipv6 ] && v6="present (/proc/sys/net/ipv6)"
check ipv6-absent "kernel booted with ipv6.disable=1 and without IPv6 state: $v6" \
  sh -c "grep -qw 'ipv6.disable=1' /proc/cmdline && test '$v6' = absent"

setup_net
note "kernel $(uname -r) ($(cat /proc/cmdline | tr ' ' '\n' | grep '^ipv6')); siw0 on $DEV ($IP); daemon $IWPMD $IWPMD_ARGS"
start_syslog
dmesg_mark
ST="$OUT/iwpmd.strace"
check start "daemon up with a NETLINK_RDMA socket although IPv6 is missing" start_iwpmd "$ST"

# ---- IPv4 rping through the daemon -----------------------------------------------
check_rping rping "$IP" "$N" v4

# ---- a live mapping shows in the dump ---------------------------------------------
live_pair "$IP" 7200 live; r=$?; sp=$LIVE_SP; cp=$LIVE_CP
check live "a persistent listener :7200 and a client exchanging data" test $r = 0
iwpmd_dump "$OUT/dump-live.txt"; n1=$DUMP_N
kill $cp 2>/dev/null; wait $cp 2>/dev/null
kill $sp 2>/dev/null; wait $sp 2>/dev/null
dump_pairs "$OUT/dump-live.txt" | sed 's/^/    /' >> "$SUM"
if [ "$n1" -ge 2 ] && dump_pairs "$OUT/dump-live.txt" | grep -q "$IP:7200("; then
  ok dump "SIGUSR1: $n1 mappings with listener :7200 + client live"
else bad dump "SIGUSR1: $n1 mappings (want >=2 incl. $IP:7200; see dump-live.txt)"; fi
check_dmesg dmesg
alive=0; kill -0 "$IWPMD_PID" 2>/dev/null && alive=1
check alive "daemon still running after the connections" test $alive = 1
check stop "daemon exits on SIGTERM within 5 s" stop_iwpmd

# ---- the missing family, from the daemon's own syscalls and log --------------------------
v6fail=$(grep -E 'socket\(AF_INET6, SOCK_DGRAM[^)]*\) += -1 EAFNOSUPPORT' "$ST" | head -1)
check afnosupport "socket(AF_INET6, SOCK_DGRAM) failed with EAFNOSUPPORT in the daemon" test -n "$v6fail"
detail "$v6fail"
v6ok=$(grep -E 'socket\(AF_INET6,[^)]*\) += [0-9]' "$ST" | head -3)
check no-v6-socket "no AF_INET6 socket was ever opened" test -z "$v6ok"
detail "$v6ok"
# strace -xx prints the address string as hex escapes
ANY4='inet_addr\("(0\.0\.0\.0|\\x30\\x2e\\x30\\x2e\\x30\\x2e\\x30)"\)'
v4l=$(grep -E "bind\([0-9]+, \{sa_family=AF_INET, sin_port=htons\(3935\), sin_addr=$ANY4\}, [0-9]+\) += 0" "$ST" | head -1)
v4c=$(grep -E "bind\([0-9]+, \{sa_family=AF_INET, sin_port=htons\(0\), sin_addr=$ANY4\}, [0-9]+\) += 0" "$ST" | head -1)
check v4-sockets "IPv4 peer sockets bound: listener 0.0.0.0:3935 and client 0.0.0.0:0" test -n "$v4l" -a -n "$v4c"
detail "$v4l
$v4c"
flog=$(grep -E "iwpmd.*($FAMILY_LOG)" "$SYSLOG" | head -3)
check log-family "the daemon logged the missing address family" test -n "$flog"
detail "$flog"
fatal=$(grep -E "iwpmd.*Couldn't start" "$SYSLOG" | head -1)
check no-fatal "no start-up failure in the log" test -z "$fatal"
detail "$fatal"

# ---- the IPv4 conversation from the trace -----------------------------------------------
T="$OUT/iwpm-traffic.txt"; decode "$ST" "$T"
note "trace: $(tail -1 "$T")"
trace_checks_v4 "$T"
u=$(unanswered "$T"); check trace-answered "every kernel request answered with SEQ = request seq" test -z "$u"
detail "$u"
e=$(reply_errors "$T"); check trace-noerr "no error replies / HANDLE_ERR" test -z "$e"
detail "$e"
trace_summary "$T"
cat "$SUM"
finish
