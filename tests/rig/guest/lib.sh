# Helpers for the guest suites (busybox sh):  . "$RIG_LIB_DIR/lib.sh"
#
# Results: $OUT/checks.txt gets one line per check, "PASS name: detail" or
# "FAIL name: detail"; the host's run-all.sh collects them. A suite exits with the
# number of failed checks.
#
# Daemon under test: rig.iwpmd=PATH (run-vm.sh -e iwpmd=...), default the C
# /usr/sbin/iwpmd; rig.iwpmd_args=a,b (comma separated, "none" = no arguments),
# default --systemd. It must stay in the foreground, log through syslog (/dev/log),
# stop on SIGTERM and log its mapping table ("Mapping #" lines) on SIGUSR1.
RIG_NAME="${RIG_NAME:-$(hostname)}"
RIG_LIB_DIR="${RIG_LIB_DIR:-$(dirname "$0")}"
if [ -n "$RIG_SHARE" ]; then OUT="$RIG_SHARE/out/$RIG_NAME"; else OUT=/tmp/out; fi
mkdir -p "$OUT"
CHECKS="$OUT/checks.txt"; : > "$CHECKS"
SUM="$OUT/summary.txt"; : > "$SUM"
SYSLOG=/var/log/messages
IWPMD="${RIG_IWPMD:-/usr/sbin/iwpmd}"
IWPMD_ARGS=$(echo "${RIG_IWPMD_ARGS:---systemd}" | tr ',' ' ')
[ "$IWPMD_ARGS" = none ] && IWPMD_ARGS=""
IWPMD_PID=""; IWPMD_JOB=""; FAILS=0
# A connection that waits for the port mapper's 10 s kernel timeout takes >= 10 s;
# anything above this many seconds for a whole rping run counts as a stall.
STALL_S=${RIG_STALL_S:-5}

log()  { echo "[$RIG_NAME $(cut -d' ' -f1 /proc/uptime)] $*"; }
note() { log "$*"; echo "$*" >> "$SUM"; }
# While REFERENCE names a role ("reference", "control"), checks report about a daemon that
# is not under test: INFO lines saying whether each holds, never a failure.
REFERENCE=""
ok()   { if [ -n "$REFERENCE" ]; then info_ref "$1" holds "$2"; return; fi
         echo "PASS $1: $2" >> "$CHECKS"; log "PASS $1: $2"; }
bad()  { if [ -n "$REFERENCE" ]; then info_ref "$1" "DOES NOT HOLD" "$2"; return; fi
         echo "FAIL $1: $2" >> "$CHECKS"; log "FAIL $1: $2"; FAILS=$((FAILS+1)); }
info_ref() { echo "INFO $1 ($REFERENCE): $2: $3" >> "$CHECKS"; log "INFO $1 ($REFERENCE): $2: $3"; }
# check NAME DETAIL CMD...: PASS if CMD succeeds
check() { local n=$1 d=$2; shift 2; if "$@"; then ok "$n" "$d"; else bad "$n" "$d"; fi; }
# role_check ROLE NAME DETAIL CMD...: check, or with ROLE set an INFO line naming the role
# of the daemon checked ("reference", "control": run for comparison, not under test)
role_check() { local REFERENCE=$1; shift; check "$@"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# only_in A B: lines of file A that are not in file B (the guest's busybox has no comm)
only_in() { awk 'NR==FNR { b[$0]=1; next } !($0 in b)' "$2" "$1"; }
elapsed() { echo "$1 $(uptime_s)" | awk '{printf "%.2f", $2-$1}'; }
lt() { echo "$1 $2" | awk '{exit !(($1 + 0) < ($2 + 0))}'; }   # lt A B: A < B (decimals)
finish() {
  cp "$SYSLOG" "$OUT/syslog.txt" 2>/dev/null; dmesg > "$OUT/dmesg.txt"
  echo "===== $RIG_NAME checks"; cat "$CHECKS"
  echo "===== $RIG_NAME: $FAILS failed of $(wc -l < "$CHECKS") checks"
  exit "$FAILS"
}

# Debian's busybox runs its own applets before $PATH: call iproute2 explicitly.
ip() { /bin/ip "$@"; }
ss() { /bin/ss "$@"; }

start_syslog() {
  [ -n "$(pidof syslogd)" ] && return 0
  : > "$SYSLOG"; syslogd -O "$SYSLOG" -l 8; sleep 0.2
}

# start_iwpmd [STRACE_FILE]: start the daemon under test as a background job (under
# strace -f when a file is given), wait until its NETLINK_RDMA socket with multicast
# groups exists (its port id goes to IWPMD_PORTID). Returns 1 if it did not come up.
start_iwpmd() {
  start_syslog
  IWPMD_JOB=""; IWPMD_PID=""; IWPMD_PORTID=""
  keyed_args
  if [ -n "$1" ]; then
    log "starting $IWPMD $IWPMD_ARGS under strace -> $1"
    strace -f -tt -s 4096 -xx -o "$1" \
      -e trace=socket,bind,connect,setsockopt,sendto,sendmsg,sendmmsg,recvfrom,recvmsg,recvmmsg,close \
      $IWPMD $IWPMD_ARGS &
  else
    log "starting $IWPMD $IWPMD_ARGS"
    $IWPMD $IWPMD_ARGS &
  fi
  IWPMD_JOB=$!
  local i=0 name; name=$(basename "$IWPMD")
  while [ $i -lt 100 ]; do
    IWPMD_PORTID=$(rigtool nl-portid 2>/dev/null)
    [ -n "$IWPMD_PORTID" ] && break
    kill -0 "$IWPMD_JOB" 2>/dev/null || break
    sleep 0.1; i=$((i+1))
  done
  if [ -n "$1" ]; then IWPMD_PID=$(pidof "$name" | awk '{print $NF}'); else IWPMD_PID=$IWPMD_JOB; fi
  # Traced, wait (5 s at most) for its HELLO to the kernel to have returned: the kernel
  # takes a daemon's port id from its messages, inside the send, and until then sends its
  # requests to the old daemon's (a connect then goes unmapped: "Unable to send a nlmsg").
  # A socket is not yet a HELLO: under strace on a loaded host 0.65 s lay between the two.
  [ -n "$1" ] && waitfor 5 grep -q -E '(sendto|sendmsg)\(.*nlmsg_type=0x808.*\) = [0-9]' "$1"
  sleep 0.5   # HELLO / MAPINFO exchange
  if [ -n "$IWPMD_PORTID" ] && [ -n "$IWPMD_PID" ] && kill -0 "$IWPMD_PID" 2>/dev/null; then
    log "iwpmd pid $IWPMD_PID, netlink port id $IWPMD_PORTID"; return 0
  fi
  log "iwpmd did not come up (pid '$IWPMD_PID', port id '$IWPMD_PORTID')"; return 1
}
# keyed_args: with rig.keys=1 our daemon (iwpmd-rs) runs with a fleet key (peer_key_file,
# iwpmd.conf(5)): a root-owned 0600 key file of one key (id 1, a test key of this rig only)
# added to the configuration its arguments name (--config FILE, else /etc/iwpmd.conf), in
# IWPMD_ARGS. So the suites written for unkeyed daemons show a keyed daemon of ours with
# rdma-core's: it must pass them unchanged. Once per start (the key line is added once).
RIG_KEY1=6669656c642d72696720746573742d6b65792d6f6e652d2d2d2d2d2d2d2d2d31
keyed_args() {
  [ "${RIG_KEYS:-0}" = 1 ] && [ "$(basename "$IWPMD")" = iwpmd-rs ] || return 0
  case " $IWPMD_ARGS " in *" --config /tmp/iwpmd-keyed.conf "*) return 0 ;; esac
  local kf=/tmp/rig-peer-keys conf=/tmp/iwpmd-keyed.conf src=/etc/iwpmd.conf args="" prev="" a
  for a in $IWPMD_ARGS; do
    if [ "$prev" = --config ]; then src=$a; prev=""; continue; fi
    if [ "$a" = --config ]; then prev=$a; continue; fi
    args="$args $a"
  done
  ( umask 077; echo "1 $RIG_KEY1" > $kf )
  { cat "$src" 2>/dev/null; echo "peer_key_file=$kf"; } > $conf
  IWPMD_ARGS="${args# } --config $conf"
  log "keyed: fleet key 1 in $kf, configuration $conf (from $src)"
}
# keyed_check: with rig.keys=1, a check that our daemon took its fleet key (its start-up
# line "fleet keys: ..." in syslog); nothing otherwise
keyed_check() {
  [ "${RIG_KEYS:-0}" = 1 ] && [ "$(basename "$IWPMD")" = iwpmd-rs ] || return 0
  local l; l=$(grep -o 'fleet keys: .*' "$SYSLOG" 2>/dev/null | tail -1)
  check keyed "our daemon keyed (rig.keys=1): ${l:-no 'fleet keys:' line in syslog}" test -n "$l"
}
# stop_iwpmd: SIGTERM, wait up to 5 s; returns 1 if it had to be killed.
stop_iwpmd() {
  local i=0 rc=0 p=${IWPMD_PID:-$IWPMD_JOB}
  [ -n "$p" ] && kill -TERM "$p" 2>/dev/null
  while [ -n "$p" ] && kill -0 "$p" 2>/dev/null; do
    i=$((i+1)); [ $i -ge 50 ] && { kill -9 "$p"; rc=1; break; }; sleep 0.1
  done
  reap_job
  log "iwpmd stopped"; IWPMD_PID=""; IWPMD_JOB=""
  [ -n "$p" ] && return $rc
  return 1
}
# reap_job: wait (at most 5 s) for the background job (strace exits after its tracee)
reap_job() {
  local i=0
  [ -n "$IWPMD_JOB" ] || return 0
  while kill -0 "$IWPMD_JOB" 2>/dev/null; do
    i=$((i+1)); [ $i -ge 50 ] && { kill -9 "$IWPMD_JOB" 2>/dev/null; break; }; sleep 0.1
  done
  wait "$IWPMD_JOB" 2>/dev/null
}
kill9_iwpmd() {
  kill -9 "$IWPMD_PID"; reap_job
  log "iwpmd pid $IWPMD_PID killed with SIGKILL"; IWPMD_PID=""; IWPMD_JOB=""
}
# iwpmd_dump FILE: SIGUSR1, collect the new syslog lines into FILE; DUMP_N = mappings.
iwpmd_dump() {
  local n i=0 m=-1 c
  n=$(wc -l < "$SYSLOG")
  : > "$1"; DUMP_N=0
  [ -n "$IWPMD_PID" ] || return 1
  kill -USR1 "$IWPMD_PID"
  # Until the dump has begun and the log stops growing (max 12 s). Both daemons log the
  # signal at once but the C daemon dumps later, from its main loop (over a second later
  # under strace on TCG, once 8 s on a loaded host), so a pause after the signal's line is
  # not the end of the dump.
  while [ $i -lt 60 ]; do
    sleep 0.2; c=$(wc -l < "$SYSLOG")
    [ "$c" = "$m" ] && [ "$c" -gt "$n" ] &&
      tail -n +$((n+1)) "$SYSLOG" | grep -q 'print_iwpm_mapped_ports' && break
    m=$c; i=$((i+1))
  done
  tail -n +$((n+1)) "$SYSLOG" > "$1"
  DUMP_N=$(grep -c 'Mapping #' "$1")
}
# dump_pairs FILE: the mapped pairs of a dump, one "local -> mapped" line each, sorted
dump_pairs() {
  awk '/Local address/{sub(/.*Local address /,""); l=$0} /Mapped address/{sub(/.*Mapped address /,""); print l " -> " $0}' "$1" | sort
}
dmesg_mark() { DMESG_MARK=$(dmesg | wc -l); }
dmesg_iwpm_since() { dmesg | tail -n +$((DMESG_MARK+1)) | grep -i -E 'iwpm|iw_cm|port ?map' ; }
# check_dmesg NAME: no iwpm kernel warnings since the last dmesg_mark
check_dmesg() {
  local l; l=$(dmesg_iwpm_since)
  if [ -z "$l" ]; then ok "$1" "no iwpm kernel messages"; else bad "$1" "kernel: $(echo "$l" | head -3 | tr '\n' '|')"; fi
}
# siw_add NETDEV NAME: an siw device. With RIG_PORTMAP=1 (knob portmap=1; the rig's patched
# kernels only, kernel/siw-port-map-*.patch) siw runs iw_cm's port-mapped path, as a hardware
# RNIC does: the parameter is read when the device is added, so it is written first.
siw_add() {
  if [ -n "${RIG_PORTMAP:-}" ]; then
    echo "$RIG_PORTMAP" > /sys/module/siw/parameters/port_map 2>/dev/null ||
      bad setup "siw.port_map=$RIG_PORTMAP: no such parameter (unpatched kernel?)"
  fi
  rdma link add "$2" type siw netdev "$1" && log "siw: $2 on $1${RIG_PORTMAP:+ (port_map $RIG_PORTMAP)}"
}

# setup_net: siw device siw0 on eth0 (two-VM mode, 10.77.0.<hostid>) or on a veth pair
# veth0 10.88.0.1/24 <-> veth1 inside this VM (one-VM mode; rping to the own address
# is carried by kernel loopback). Sets DEV and IP.
setup_net() {
  ip link set lo up
  if [ -e /sys/class/net/eth0 ]; then DEV=eth0; IP=10.77.0.${RIG_HOSTID:-1}
  else
    DEV=veth0; IP=10.88.0.1
    ip link add veth0 type veth peer name veth1
    ip addr add 10.88.0.2/24 dev veth1; ip link set veth1 up
  fi
  ip link set "$DEV" up
  ip addr add "$IP/24" dev "$DEV"
  siw_add "$DEV" siw0 || bad setup "rdma link add siw0 on $DEV"
}

# wait_listen PORT [SECS]: wait (at most SECS, 10) until a TCP listener on PORT exists. An
# iWARP listener's siw socket appears only after the port mapper has answered the listen's
# ADD_MAPPING, so a client started after this cannot overtake its server (on a loaded host
# a fixed "sleep 1" was sometimes too short: QUERY before ADD, a REJECT and a stall).
wait_listen() {
  local i=0 n=$(( ${2:-10} * 10 ))
  while [ -z "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]; do
    i=$((i+1)); [ $i -ge $n ] && { log "no listener on :$1 after ${2:-10}s"; return 1; }; sleep 0.1
  done
}
# rping_pair ADDR COUNT TAG [PORT]: rping server + client; sets RPING_T (client seconds)
# and RPING_LINES; returns 0 when the client exits 0 and both sides logged COUNT pings.
# (rping's server sometimes exits 255 after the last ping, "wait for RDMA_READ_ADV state
# 10 / rdma_get_cm_event: Bad file descriptor", a teardown race of its own threads: its
# status is logged, not judged.)
rping_pair() {
  local a=$1 n=$2 tag=$3 p=${4:-7174} sp rc src t0 sl
  rping -s -a "$a" -p "$p" -C "$n" -v > "$OUT/rping-$tag-server.log" 2>&1 & sp=$!
  wait_listen "$p"
  t0=$(uptime_s)
  timeout 60 rping -c -a "$a" -p "$p" -C "$n" -v > "$OUT/rping-$tag-client.log" 2>&1; rc=$?
  RPING_T=$(elapsed "$t0")
  if [ $rc = 0 ]; then wait_or_kill $sp 10; else sleep 2; kill $sp 2>/dev/null; wait $sp; fi; src=$?
  RPING_LINES=$(grep -c '^ping data' "$OUT/rping-$tag-client.log")
  sl=$(grep -c '^server ping data' "$OUT/rping-$tag-server.log")
  log "rping[$tag] $a -C $n: client rc=$rc server rc=$src, ping lines client $RPING_LINES server $sl, ${RPING_T}s"
  [ $rc = 0 ] && [ "$RPING_LINES" = "$n" ] && [ "$sl" = "$n" ]
}
# check_rping NAME ADDR COUNT TAG [PORT]: rping works and shows no stall
check_rping() {
  if rping_pair "$2" "$3" "$4" "$5"; then
    if lt "$RPING_T" "$STALL_S"; then ok "$1" "rping -C $3 to $2: $RPING_LINES ping lines in ${RPING_T}s"
    else bad "$1" "rping -C $3 to $2 took ${RPING_T}s (stall; limit ${STALL_S}s)"; fi
  else bad "$1" "rping -C $3 to $2 failed ($RPING_LINES ping lines, ${RPING_T}s; see rping-$4-*.log)"; fi
}

# live_pair ADDR PORT TAG: a persistent rping server (-P) and a client that keeps
# pinging; waits (max 15 s) until the client has exchanged data, so no connect is left
# half-done when they are killed. Sets LIVE_SP, LIVE_CP; returns 1 if it never connected.
live_pair() {
  local i=0
  rping -s -P -a "$1" -p "$2" > "$OUT/rping-$3-server.log" 2>&1 & LIVE_SP=$!
  wait_listen "$2"
  rping -c -v -a "$1" -p "$2" > "$OUT/rping-$3-client.log" 2>&1 & LIVE_CP=$!
  while ! grep -q 'ping data' "$OUT/rping-$3-client.log"; do
    i=$((i+1)); [ $i -ge 75 ] && { log "live rping client on :$2 never connected"; return 1; }; sleep 0.2
  done
  sleep 0.5
}
# cmtime_pair ADDR N TAG: cmtime server (-b) + client (-s); table to cmtime-TAG.txt;
# sets CM_CONNECT_MAX_MS, CM_FAILS, CM_RC.
cmtime_pair() {
  local a=$1 n=$2 tag=$3 sp
  cmtime -b "$a" -c "$n" > "$OUT/cmtime-$tag-server.log" 2>&1 & sp=$!
  sleep 1
  timeout 120 cmtime -s "$a" -c "$n" > "$OUT/cmtime-$tag-client.log" 2>&1; CM_RC=$?
  sleep 0.5; kill $sp 2>/dev/null; wait $sp 2>/dev/null
  # cmtime's event thread may read the event channel while main() destroys it at exit
  # ("failure in rdma_get_cm_event in process_server_events: Bad file descriptor", with
  # rc 0 and a complete table): a teardown race of the tool, not a failed connection.
  CM_FAILS=$(grep -i 'fail' "$OUT/cmtime-$tag-client.log" | grep -v -c 'rdma_get_cm_event in process_server_events: Bad file descriptor')
  grep -A8 '^step' "$OUT/cmtime-$tag-client.log" > "$OUT/cmtime-$tag.txt"
  CM_CONNECT_MAX_MS=$(cm_col "$OUT/cmtime-$tag.txt" connect 2)
  log "cmtime[$tag] -c $n: rc=$CM_RC, $CM_FAILS failure lines, connect max ${CM_CONNECT_MAX_MS:-?} ms"
}
# cm_col FILE ROW N: column N (1 total ms, 2 max ms, 3 min us, 4 us/conn) of a cmtime
# table row; cmtime prints %11.2f fields with no separator, so wide numbers touch
cm_col() { awk -v r="$2" -v n="$3" '$1==r { s=substr($0, index($0, ":") + 2); printf "%.2f\n", substr(s, 11*(n-1) + 1, 11) + 0 }' "$1"; }
# check_cmtime NAME ADDR N TAG
check_cmtime() {
  cmtime_pair "$2" "$3" "$4"
  if [ "$CM_RC" = 0 ] && [ "$CM_FAILS" = 0 ] && [ -n "$CM_CONNECT_MAX_MS" ]; then
    if lt "$CM_CONNECT_MAX_MS" $((STALL_S*1000)); then ok "$1" "cmtime -c $3: all connected, connect max ${CM_CONNECT_MAX_MS} ms"
    else bad "$1" "cmtime -c $3: connect max ${CM_CONNECT_MAX_MS} ms (stall)"; fi
  else bad "$1" "cmtime -c $3: rc=$CM_RC, $CM_FAILS failure lines (cmtime-$4-client.log)"; fi
  sed 's/^/    /' "$OUT/cmtime-$4.txt" >> "$SUM"
}

# decode STRACE_FILE OUT_FILE: the daemon's port-mapper messages (iwpm-decode.awk)
decode() { awk -f "$RIG_LIB_DIR/iwpm-decode.awk" "$1" > "$2"; }
# has FILE ERE: the decoded trace has a matching line
has() { grep -q -E "$2" "$1"; }
cnt() { grep -c -E "$2" "$1"; }
# unanswered FILE: kernel requests (REG_PID, ADD, QUERY, MAPINFO_NUM from port id 0)
# without a daemon reply carrying SEQ=<request hseq>, one line each
unanswered() {
  awk '$3=="recv" && ($4=="src=0" || $4=="src=?") && $5=="IWCM" && $6 ~ /^(REG_PID|ADD_MAPPING|QUERY_MAPPING|MAPINFO_NUM)$/ {
         s=$7; sub(/hseq=/,"",s); want[$6 " " s]=$0 }
       $3=="send" && $5=="IWCM" { for (i=8;i<=NF;i++) if ($i ~ /^SEQ=/) { s=$i; sub(/SEQ=/,"",s); got[$6 " " s]=1 } }
       END { for (k in want) if (!(k in got)) print want[k] }' "$1"
}
# reply_errors FILE: daemon replies with a non-zero error attribute, and HANDLE_ERRs
reply_errors() { grep -E ' nl send .*(MAPPING_ERR=[1-9]|PID_ERR=[1-9]| HANDLE_ERR )' "$1"; }
# hpid_wrong FILE PORTID: daemon messages whose header pid is not its port id
hpid_wrong() { grep -E ' nl send ' "$1" | grep -v " hpid=$2 "; }

# wait_or_kill PID SECS: wait for a background job, killing it after SECS; returns its status
wait_or_kill() {
  local i=0
  while kill -0 "$1" 2>/dev/null; do i=$((i+1)); [ $i -ge $(($2*5)) ] && { kill "$1" 2>/dev/null; break; }; sleep 0.2; done
  wait "$1"
}
# Cross-VM barriers through the shared 9p folder (both VMs mount the same host dir).
SYNC="${RIG_SHARE:-/tmp}/out/${RIG_SYNC:-sync}"
flag()      { mkdir -p "$SYNC"; echo "$RIG_NAME $(uptime_s)" > "$SYNC/$1"; }
wait_flag() {  # wait_flag NAME [SECONDS]
  local i=0 n=$(( ${2:-120} * 5 ))
  while [ ! -e "$SYNC/$1" ]; do i=$((i+1)); [ $i -ge $n ] && { bad barrier "timeout waiting for $1"; return 1; }; sleep 0.2; done
}
# peer_check FILE ROLE [VER] [AP]: associations (handle + connecting address; a daemon
# may reuse a handle for a later connection) whose UDP exchange is incomplete in
# the decoded trace. ROLE active: sent REQUEST, got ACCEPT, sent ACK; passive: got
# REQUEST, sent ACCEPT, got ACK; both: all six (one VM talking to itself). VER: 4 or 6
# (default any), AP: only datagrams for that accepting address (IP:PORT). Sets PEER_HANDLES (handles seen) and PEER_BAD ("handle: missing ..."
# lines, also in $OUT/peer-ROLE-VER.txt); returns 0 when nothing is missing.
peer_check() {
  local f="$OUT/peer-$2-${3:-all}.txt"
  awk -v role="$2" -v ver="${3:-}" -v ap="${4:-}" '
    $2=="udp" && (ver=="" || $6=="v" ver) && (ap=="" || index($0, " ap=" ap " ")) {
      h=""; c=""; for (i=7;i<=NF;i++) { if ($i ~ /^h=/) h=substr($i,3); if ($i ~ /^cp=/) c=substr($i,4) }
      if (h=="") next
      h=h "/" c; k=$3 " " $5; seen[h]=1; ev[h, k]=1 }
    END { n=0
      if (role!="passive") { need["send REQUEST"]=1; need["recv ACCEPT"]=1; need["send ACK"]=1 }
      if (role!="active")  { need["recv REQUEST"]=1; need["send ACCEPT"]=1; need["recv ACK"]=1 }
      for (h in seen) { n++; m=""; for (k in need) if (!((h, k) in ev)) m=m " [" k "]"
        if (m!="") print h ": missing" m }
      print "#handles " n }' "$1" > "$f"
  PEER_HANDLES=$(awk '/^#handles/{print $2}' "$f")
  PEER_BAD=$(grep -v '^#handles' "$f")
  [ -z "$PEER_BAD" ] && [ "$PEER_HANDLES" -gt 0 ]
}
# local_answer_check FILE AP VER: connects to a listener on our own IP answered from the
# daemon's table (ours by default): QUERY replies for AP with MAPPING_ERR 0, no UDP datagram
# at all (no REQUEST to itself) and, siw's connecting side being NO_PORT_MAP, no REMOTE_INFO
# (it would map the peer's address to itself, which the kernel assumes without one).
# RIG_LOCAL=1 selects it.
local_answer_check() {
  local n
  n=$(awk -v ap="$2" '/ nl send dst=0 IWCM QUERY_MAPPING / && index($0, "REMOTE_ADDR=" ap " ") &&
                      / MAPPING_ERR=0/ { n++ } END { print n + 0 }' "$1")
  check "trace-local-$3" "$3: $n connects to $2 answered from the daemon's own table: QUERY reply, no identity REMOTE_INFO, no UDP to itself" \
    local_answers_ok "$1" "$2" "$n"
}
local_answers_ok() {  # FILE AP N
  [ "$3" -ge 1 ] && ! grep -q ' udp send ' "$1" && ! grep -q ' IWCM REMOTE_INFO ' "$1"
}
# identity_ri: true when the daemon under test sends a REMOTE_INFO even for a peer that is
# not port mapped (mapped cp = cp), as the C iwpmd does for every new REQUEST; ours
# (iwpmd-rs in the share) sends none then: the kernel, finding no entry, reports the
# connection's own remote address, which is that same address, and every entry no
# connection consumes stays in the kernel for ever.
identity_ri() { [ "$(basename "$IWPMD")" != iwpmd-rs ]; }
# remote_info_ok FILE AP: the REMOTE_INFOs sent for listener AP (LOCAL_ADDR, as printed by
# the decoder) are the ones the daemon owes. C: at least one. Ours: exactly one per
# association whose REQUEST was port mapped (mcp port != cp port), none for the others
# (with siw, which is NO_PORT_MAP, that is none at all). Sets RI_SENT and RI_OWED.
remote_info_ok() {
  RI_SENT=$(awk -v ap="$2" '/ nl send dst=0 IWCM REMOTE_INFO / && index($0, "LOCAL_ADDR=" ap " ") { n++ } END { print n + 0 }' "$1")
  RI_OWED=$(awk -v ap="$2" '/ udp recv .* REQUEST / && index($0, " ap=" ap " ") {
      cp = $0; sub(/.* cp=/, "", cp); sub(/ .*/, "", cp)
      h = $0; sub(/.* h=/, "", h); sub(/ .*/, "", h)
      m = $0; if (!sub(/.* mcp=/, "", m)) next; sub(/ .*/, "", m)
      cpp = cp; sub(/.*:/, "", cpp); mp = m; sub(/.*:/, "", mp)
      if (mp != cpp) owed[h "/" cp] = 1 }
    END { n = 0; for (k in owed) n++; print n }' "$1")
  if identity_ri; then [ "$RI_SENT" -ge 1 ]; else [ "$RI_SENT" = "$RI_OWED" ]; fi
}
# echo_checks TRACE: every IPv4 ACK echoes its ACCEPT's version bits, pmtime and 24 unused
# address bytes (pairs of handle and echo from the decoded trace; the server compares what
# it sent with what came back, the client what it got with what it sent), and (ours as the
# server) every ACCEPT carries an echo cookie and no ACK failed it. Uses ROLE.
echo_checks() {
  local ne me nz nu
  he() { grep -E " udp $2 [^ ]* $3 v4 " "$1" | sed -n 's/.* h=\([0-9a-f]*\).* echo=\([^ ]*\).*/\1 \2/p' | sort -u; }
  # (a delivery notice, ours as the passive side: the ACCEPT again with unused byte 20 set
  # to 01, docs/protocol.md §6.12, is not ACKed by our active side: left out here)
  nonotice() { awk '{ split($2, f, "/"); if (substr(f[3], 41, 2) != "01" || substr(f[3], 47, 2) != "c1") print }'; }
  if [ "$ROLE" = server ]; then he "$1" send ACCEPT | nonotice > /tmp/ea; he "$1" recv ACK | nonotice > /tmp/eb
  else he "$1" recv ACCEPT | nonotice > /tmp/ea; he "$1" send ACK | nonotice > /tmp/eb; fi
  ne=$(wc -l < /tmp/ea); me=$(only_in /tmp/ea /tmp/eb | head -3)
  check echo "each of $ne IPv4 ACKs echoes its ACCEPT's version, pmtime and 24 unused bytes" sh -c "[ $ne -ge 1 ] && [ -z '$me' ]"
  detail "$me"
  if [ "$ROLE" = server ] && ! identity_ri; then
    nz=$(awk '{ split($2, f, "/"); if (f[3] ~ /[1-9a-f]/) n++ } END { print n + 0 }' /tmp/ea)
    nu=$(grep -c 'does not echo the cookie' "$SYSLOG" 2>/dev/null)
    check cookie "ours as the passive side: $nz of $ne IPv4 ACCEPTs carry an echo cookie; unverified-ACK log lines: ${nu:-0}" \
      sh -c "[ $nz = $ne ] && [ ${nu:-0} = 0 ]"
  fi
}
# detail LINES: append evidence lines (indented) under the last check
detail() { [ -n "$1" ] && echo "$1" | head -${2:-5} | sed 's/^/    /' >> "$CHECKS"; return 0; }

# The IPv4 handshake and one rping through the daemon, from a decoded trace ($1; the
# listener is $IP:7174): HELLO/MAPINFO, REG_PID, the listener's ADD_MAPPING, and every
# association with REQUEST/ACCEPT/ACK both ways plus REMOTE_INFO and the QUERY reply.
trace_checks_v4() {
  local T=$1 r
  check trace-hello "HELLO(4) sent, kernel answered HELLO ABI_VERSION=4, MAPINFO sent" \
    sh -c "grep -q ' nl send dst=0 IWCM HELLO .*ABI_VERSION=4' $T && grep -q ' nl recv src=[0?] IWCM HELLO .*ABI_VERSION=4' $T && grep -q ' nl send dst=0 IWCM MAPINFO .*ULIB_VER=4' $T"
  check trace-regpid "REG_PID from the kernel answered (ULIB_VER=4, PID_ERR=0)" \
    sh -c "grep -q ' nl recv src=[0?] IWCM REG_PID ' $T && grep -q ' nl send dst=0 IWCM REG_PID .*ULIB_VER=4 PID_ERR=0' $T"
  check trace-add "listener ADD_MAPPING $IP:7174 answered with MAPPING_ERR=0" \
    grep -q " nl send dst=0 IWCM ADD_MAPPING .*ADDR=$IP:7174 MAPPED_LOC_ADDR=$IP:7174 MAPPING_ERR=0" "$T"
  if [ "${RIG_LOCAL:-0}" = 1 ]; then
    local_answer_check "$T" "$IP:7174" v4
    return
  fi
  peer_check "$T" both 4; r=$?
  local ri=0; remote_info_ok "$T" "$IP:7174" || ri=1
  check trace-peer "v4: $PEER_HANDLES associations, each with UDP REQUEST->:3935 / ACCEPT / ACK both ways; QUERY reply to the kernel; REMOTE_INFO as owed ($RI_SENT sent, $RI_OWED port-mapped associations)" \
    sh -c "test $r = 0 && test $PEER_HANDLES -ge 2 && grep -q ' udp send $IP:3935 REQUEST v4 len=64 .*ap=$IP:7174' $T &&
           test $ri = 0 &&
           grep -q ' nl send dst=0 IWCM QUERY_MAPPING .*REMOTE_ADDR=$IP:7174 .*MAPPING_ERR=0' $T"
  detail "$PEER_BAD"
}

# A count of each kind of message in a decoded trace ($1), into the suite summary.
trace_summary() {
  grep -v '^#' "$1" | awk '{$1=""; print}' | sed 's/hseq=[0-9]* //; s/ h=[0-9a-f]*//' | awk '{print $1,$2,$3,$4,$5}' | sort | uniq -c | sed 's/^/    /' >> "$SUM"
}

# settled_dump FILE: SIGUSR1 to $IWPMD_PID, wait until the dump has begun and syslog has
# been still for 1 s (at most 20 s), the new lines into FILE; DUMP_N = mappings in it (large tables log slowly).
settled_dump() {
  local n c m=-1 s=0 i=0
  n=$(wc -l < "$SYSLOG"); : > "$1"; DUMP_N=0
  [ -n "$IWPMD_PID" ] || return 1
  kill -USR1 "$IWPMD_PID"
  while [ $i -lt 80 ] && [ $s -lt 4 ]; do
    sleep 0.25; c=$(wc -l < "$SYSLOG")
    if [ "$c" = "$m" ] && [ "$c" -gt "$n" ] &&
       tail -n +$((n+1)) "$SYSLOG" | grep -q 'print_iwpm_mapped_ports'; then s=$((s+1)); else s=0; fi
    m=$c; i=$((i+1))
  done
  tail -n +$((n+1)) "$SYSLOG" > "$1"
  DUMP_N=$(grep -c 'Mapping #' "$1")
}

# ---- performance comparison (suite-compare*.sh): $CD, $OURS, $RES set by the suite ----
# use_daemon LABEL: point IWPMD / IWPMD_ARGS at floor, c, ours or a path
use_daemon() {
  case "$1" in
    floor) IWPMD=/usr/local/bin/rigtool; IWPMD_ARGS=floor-responder ;;
    c) IWPMD=$CD; IWPMD_ARGS=--systemd ;;
    ours) IWPMD=$OURS; IWPMD_ARGS="--systemd $(echo "${RIG_OURS_ARGS:-}" | tr ',' ' ')" ;;
    *) IWPMD=$1; IWPMD_ARGS=--systemd ;;
  esac
}
# cpu_ms PID: user and system CPU time of the process (all threads), ms ("0 0" if none)
cpu_ms() {
  if [ -n "$1" ] && [ -r "/proc/$1/stat" ]; then
    sed 's/^.*) //' "/proc/$1/stat" | awk -v hz=100 '{printf "%d %d\n", $12*1000/hz, $13*1000/hz}'
  else echo "0 0"; fi
}
put() { echo "$1 $2 $3 $4" >> "$RES"; }   # put ROUND LABEL KEY VALUE

# ---- port-mapped mode (suites pm and pmops) ----
listen_snap() { { echo "#"; ss -ltnH | awk '{print $4}'; } > "$1"; }   # (never empty: only_in)
port_of() { echo "$1" | sed 's/.*://'; }
# new_listen BEFORE: wait (10 s) for a TCP LISTEN socket whose address is not in file BEFORE
# (listen_snap); prints its local address as ss shows it. On a port-mapped device
# siw's listener appears on the mapped port once the daemon answered the ADD_MAPPING.
new_listen() {
  local i=0 l
  while [ $i -lt 100 ]; do
    ss -ltnH | awk '{print $4}' > /tmp/ls-now   # (the guest has no /dev/stdin)
    l=$(only_in /tmp/ls-now "$1" | head -1)
    [ -n "$l" ] && { echo "$l"; return 0; }
    sleep 0.1; i=$((i+1))
  done
  return 1
}
# host_bind PORT: can an ordinary socket of this host take TCP PORT? (busybox nc -l binds
# 0.0.0.0:PORT and listens.) 0 = it could (nc seen listening, then stopped); 1 = refused,
# HB_ERR = nc's message
host_bind() {
  local p i=0
  nc -l -p "$1" > /dev/null 2> "$OUT/nc-$1.err" & p=$!
  while [ $i -lt 30 ]; do
    if ! kill -0 $p 2>/dev/null; then wait $p; HB_ERR=$(head -1 "$OUT/nc-$1.err"); return 1; fi
    if ss -ltnpH "sport = :$1" 2>/dev/null | grep -q '"nc"'; then kill $p; wait $p 2>/dev/null; HB_ERR=""; return 0; fi
    sleep 0.1; i=$((i+1))
  done
  kill $p 2>/dev/null; wait $p 2>/dev/null; HB_ERR="nc neither bound nor failed in 3 s"; return 1
}
# host_bind_freed PORT: host_bind succeeds within 5 s (the daemon has let the port go)
host_bind_freed() {
  local i=0
  while [ $i -lt 10 ]; do host_bind "$1" && return 0; sleep 0.5; i=$((i+1)); done
  return 1
}
# mapped_ports DUMP: the mapped ports of a dump, one per line
mapped_ports() { dump_pairs "$1" | sed 's/([^)]*)//g; s/IPV[46] //g' | awk '{p=$3; sub(/.*:/, "", p); print p}' | sort -u; }
# dump_map FILE LOCAL: the mapped address (IP:PORT) the dump lists for LOCAL (IP:PORT)
dump_map() { dump_pairs "$1" | sed 's/([^)]*)//g; s/IPV[46] //g' | awk -v l="$2" '$1==l {print $3; exit}'; }
# mapped_differs FILE: every mapping of the dump has mapped port != local port (and >= 1);
# prints "yes" or "no" (for the checks' sh -c, which knows no functions)
mapped_differs() {
  dump_pairs "$1" | sed 's/([^)]*)//g; s/IPV[46] //g' |
    awk '{ n++; a=$1; b=$3; sub(/.*:/, "", a); sub(/.*:/, "", b); if (a == b) bad++ } END { print (n >= 1 && bad == 0) ? "yes" : "no" }'
}
# fds_back: the daemon's fd count returns to FD0 within 5 s; FDN = the count seen
fds_back() {
  local i=0
  while [ $i -lt 25 ]; do
    FDN=$(ls /proc/"$IWPMD_PID"/fd 2>/dev/null | wc -l); [ "$FDN" = "$FD0" ] && return 0
    sleep 0.2; i=$((i+1))
  done
  return 1
}

# waitfor SECONDS CMD...: poll CMD every 0.2 s until it succeeds (1 if it never did)
waitfor() {
  local i=0 n=$(( $1 * 5 )); shift
  while [ $i -lt $n ]; do "$@" && return 0; sleep 0.2; i=$((i+1)); done; return 1
}
# The rig's stand-in for systemd's FD store (tools/rigfdstore.c): its control folder, its
# notify socket, and st KEY: a value of its state file (pid, stored, ready, restarts, ...)
CTL=/tmp/fdstore; NOTIFY=/tmp/notify.sock
st() { sed -n "s/^$1 //p" $CTL/state 2>/dev/null; }

# share_copy FILE NAME: FILE into the share as $SYNC/NAME, whole or not at all (a copy
# beside it, then a rename): the other VM polls for NAME and reads it at once, and under
# a loaded host a plain cp was once read half-written (both cross checks failed in CI)
share_copy() { mkdir -p "$SYNC"; cp "$1" "$SYNC/.$2.part" && mv "$SYNC/.$2.part" "$SYNC/$2"; }

# cross_handles TRACE FAMILY: the two-VM suites' cross check. Waits (at most 20 s) for the
# other VM's trace ($SYNC/$OTHER-traffic.txt, into PT), then compares the association
# handles (handle/cp) of every REQUEST, ACCEPT and ACK in TRACE with the other side's
# (FAMILY: the ERE of the family tags to compare, v4 or v[46]). Sets CROSS to the
# differences (empty: both traces agree); cross_ok tests the outcome.
cross_handles() {
  local t=$1 fam=$2 i=0 op mine theirs
  PT="$SYNC/$OTHER-traffic.txt"
  while [ ! -s "$PT" ] && [ $i -lt 100 ]; do sleep 0.2; i=$((i+1)); done
  CROSS=""
  for op in REQUEST ACCEPT ACK; do
    # the client sends REQUEST and ACK, the server ACCEPT
    case "$ROLE/$op" in server/ACCEPT | client/REQUEST | client/ACK) mine=send theirs=recv ;; *) mine=recv theirs=send ;; esac
    assoc_handles "$t" $mine $op "$fam" > /tmp/a; assoc_handles "$PT" $theirs $op "$fam" > /tmp/b
    CROSS="$CROSS$(diff /tmp/a /tmp/b)"
  done
}
assoc_handles() {  # assoc_handles TRACE send|recv OP FAMILY: "handle/cp" lines, sorted, unique
  grep -E " udp $2 [^ ]* $3 $4 " "$1" | sed 's/.* cp=\([^ ]*\) .* h=\([0-9a-f]*\).*/\2\/\1/' | sort -u
}
cross_ok() { [ -s "$PT" ] && [ -z "$CROSS" ]; }

# DATA_TRIES: how many rping clients (and, for rping -C N, servers) a two-VM suite starts
# for one exchange. Under a loaded TCG host the server's siw sometimes never reads the
# client's first message (siw_accept hands the socket to the QP only after its MPA reply;
# docs/testing.md, "Lost first data"), long after the port mapper answered, and the client
# then waits for ever. Losses come together on a loaded host (three in a row seen), so a
# try that exchanged no data is followed by another, up to this many; the checks judge the
# last one and name it. A silent daemon still shows: the kernel connects unmapped after
# 10 s, so ping lines come, late, and the stall limits fail the checks.
DATA_TRIES=${RIG_DATA_TRIES:-4}

# live_client PORT: the live rping client to $PEER:PORT, left running (pid in cp, log in
# live_log) once it has exchanged data; up to DATA_TRIES clients to the same persistent
# server. Sets try.
live_client() {
  local i
  try=0
  while [ $try -lt $DATA_TRIES ]; do
    try=$((try+1))
    live_log="$OUT/rping-live-client.log"; [ $try = 1 ] || live_log="$OUT/rping-live-client-$try.log"
    rping -c -v -a "$PEER" -p "$1" > "$live_log" 2>&1 & cp=$!
    i=0; while ! grep -q 'ping data' "$live_log" && [ $i -lt 75 ]; do sleep 0.2; i=$((i+1)); done
    grep -q 'ping data' "$live_log" && break
    note "live rping client $try exchanged no data; $( [ $try -lt $DATA_TRIES ] && echo retrying || echo giving up)"
    kill $cp 2>/dev/null; wait $cp 2>/dev/null; sleep 0.5
  done
}

# ---- rping -C N across (suites twovm and pm) ----
# Each try a fresh server and client on the same port (rping -C N ends after N pings).
# rping_servers PORT: the server's side: a server (-C $N) on $IP:PORT, announced
# (rping.listening.K) once it listens (on a port-mapped device that is on the mapped port: a
# client started earlier was refused), and another in its place each time the client gives
# up on one (rping.retry.K: with its data lost a server never exits on its own), until the
# client is done (rping.done). All append to rping-server.log. Sets rping_rc (the last
# server's status) and rping_lines (the servers' ping lines).
rping_servers() {
  local k=0 rp i
  : > "$OUT/rping-server.log"
  while :; do
    k=$((k+1)); listen_snap /tmp/ls-rping
    rping -s -a "$IP" -p "$1" -C "$N" -v >> "$OUT/rping-server.log" 2>&1 & rp=$!
    new_listen /tmp/ls-rping > /dev/null; flag "rping.listening.$k"
    i=0
    while [ ! -e "$SYNC/rping.retry.$k" ] && [ ! -e "$SYNC/rping.done" ] && [ $i -lt 900 ]; do sleep 0.2; i=$((i+1)); done
    { [ -e "$SYNC/rping.retry.$k" ] && [ $k -lt $DATA_TRIES ]; } || break
    note "rping server $k stopped: its client gave up on it"; kill $rp 2>/dev/null; wait $rp
  done
  [ -e "$SYNC/rping.done" ] || bad barrier "timeout waiting for rping.done"
  # (the last server ends after its N pings; one still waiting is stopped)
  wait_or_kill $rp 10; rping_rc=$?
  rping_lines=$(grep -c '^server ping data' "$OUT/rping-server.log")
}
# rping_client PORT: the client's side of rping_servers: up to DATA_TRIES clients to
# $PEER:PORT, the next one only after a try exchanged no data in 25 s. Sets rc, t (seconds
# of the last try), l (its ping lines) and rping_try; the last try's log is
# rping-client.log, the earlier ones rping-client-K.log.
rping_client() {
  local cp i log="$OUT/rping-client.log"
  rc=1; t=0; l=0
  rping_try=0
  while [ $rping_try -lt $DATA_TRIES ]; do
    rping_try=$((rping_try+1))
    wait_flag "rping.listening.$rping_try" 120 || break
    t0=$(uptime_s)
    timeout 60 rping -c -a "$PEER" -p "$1" -C "$N" -v > "$log" 2>&1 & cp=$!
    i=0
    while kill -0 $cp 2>/dev/null; do
      if [ $i -ge 125 ] && ! grep -q 'ping data' "$log"; then kill $cp 2>/dev/null; break; fi
      sleep 0.2; i=$((i+1))
    done
    wait $cp; rc=$?; t=$(elapsed "$t0"); l=$(grep -c 'ping data' "$log")
    { [ "$l" != 0 ] || [ "$rping_try" = $DATA_TRIES ]; } && break
    note "rping -C $N try $rping_try exchanged no data (rc $rc, ${t}s); a new server and client"
    mv "$log" "$OUT/rping-client-$rping_try.log"; flag "rping.retry.$rping_try"
  done
  flag rping.done
}
# rping_client_ok: rping_client's last try ran all N pings within the stall limit. (rc 255
# after all N pings is rping's own teardown race, seen once with no daemon at all on a
# loaded host: the connection, which is what the port mapper serves, worked.)
rping_client_ok() { { [ "$rc" = 0 ] || [ "$rc" = 255 ]; } && [ "$l" = "$N" ] && lt "$t" "$STALL_S"; }

# ---- figures, and a daemon restarted behind the FD store (suites pmops, storage, zerogap) ----
# fig KEY VALUE: one figure of the suite, "KEY VALUE" appended to its file $FIGS
fig() { echo "$1 $2" >> "$FIGS"; log "figure $1 $2"; }
# kv LINE KEY: the VALUE of the word KEY=VALUE in LINE (a tool's "k=v k=v" report line)
kv() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
gone() { ! kill -0 "$1" 2>/dev/null; }
# fdstore_ready N [SECS]: wait (at most SECS, 15) until the FD store stand-in has seen N
# READY=1 notifications in all (the "ready" of each daemon it started)
fdstore_ready() { waitfor "${2:-15}" fdstore_ready_now "$1"; }
fdstore_ready_now() { [ "$(st ready)" -ge "$1" ] 2>/dev/null; }
# fdstore_serve CMD...: the stand-in (pid SP) runs CMD with a notify socket and an FD store
# (as systemd runs the packaged unit), and on SIGUSR2 stops it if it still runs and starts
# it again with the stored sockets (as Restart= does)
fdstore_serve() {
  mkdir -p "$CTL"
  rigfdstore serve $NOTIFY $CTL 100000 -- "$@" >> "$OUT/rigfdstore.log" 2>&1 & SP=$!
}
# fdstore_start CMD...: fdstore_serve, then its first READY=1; IWPMD_PID = the daemon
fdstore_start() {
  fdstore_serve "$@"; fdstore_ready 1 15 || return 1
  IWPMD_PID=$(st pid); IWPMD_JOB=""; sleep 0.5
  log "iwpmd pid $IWPMD_PID behind the FD store stand-in (pid $SP)"
}
# fdstore_again HOW: a new daemon from the stand-in, the old one SIGKILLed first (HOW kill9)
# or stopped by the stand-in (term); 1 if no new READY=1 came within 30 s
fdstore_again() {
  local r0 p; r0=$(st ready); p=$(st pid)
  if [ "$1" = kill9 ]; then kill -9 "$p"; waitfor 5 gone "$p"; fi
  kill -USR2 "$SP"
  fdstore_ready $((r0 + 1)) 30 || return 1
  IWPMD_PID=$(st pid); sleep 0.5
}
# fdstore_stop: SIGTERM to the stand-in, which stops the daemon and exits (its stored
# sockets close with it)
fdstore_stop() { kill -TERM "$SP" 2>/dev/null; waitfor 10 gone "$SP"; wait "$SP" 2>/dev/null; IWPMD_PID=""; }
# probe_start PORTS SUFFIX: a probe (rigfdstore probe) binds every port of file PORTS in a
# loop (0.0.0.0, no SO_REUSEADDR) until probe_stop; its report in $OUT/probeSUFFIX.txt,
# the ports it got in $OUT/probe-freeSUFFIX.txt. PROBE_STOP is the file that stops it.
PROBE_STOP=/tmp/probe-stop
probe_start() {
  PROBE_SUFFIX=$2; rm -f "$PROBE_STOP"
  rigfdstore probe "$1" "$PROBE_STOP" > "$OUT/probe$2.txt" 2> "$OUT/probe-free$2.txt" & PROBE_PID=$!
}
# probe_stop: stops the probe; GAP_FREE = binds that succeeded, GAP_ROUNDS = its rounds
probe_stop() {
  touch "$PROBE_STOP"; wait "$PROBE_PID"
  GAP_FREE=$(sed -n 's/.*free=\([0-9]*\).*/\1/p' "$OUT/probe$PROBE_SUFFIX.txt")
  GAP_ROUNDS=$(sed -n 's/.*rounds=\([0-9]*\).*/\1/p' "$OUT/probe$PROBE_SUFFIX.txt")
}
# restart_kill9 PORTS SUFFIX: SIGKILL this side's daemon and start a new one while the
# mapped ports listed in file PORTS are probed. With STORE=1 (ours behind the stand-in) the
# stand-in starts it with the stored sockets, and a probe binds the ports in a loop from
# before the kill until 2 s after the new READY=1 (ours settles its restored mappings when
# the kernel's replay window ends): each success is a moment the host stack could have
# taken a mapped port. Without a store, port-mapped, each port is bound once between the
# kill and the new daemon (a loop would hold a port when the new daemon re-binds it for the
# kernel's MAPINFO record, which then fails with err 11, and the mapping is lost).
# Sets RESTART_RC (0: the new daemon is up), RESTART_S (kill to up), GAP_PORTS, GAP_FREE,
# GAP_ROUNDS ("-" when nothing was probed); gap_check judges them.
restart_kill9() {
  local t0 p
  GAP_PORTS=$(wc -l < "$1"); GAP_FREE=-; GAP_ROUNDS=-; RESTART_RC=1
  if [ "${STORE:-0}" = 1 ]; then
    probe_start "$1" "$2"; sleep 0.5; t0=$(uptime_s)
    fdstore_again kill9 && RESTART_RC=0; RESTART_S=$(elapsed "$t0")
    sleep 2; probe_stop
  else
    t0=$(uptime_s); kill9_iwpmd
    if [ "${RIG_PORTMAP:-0}" = 1 ]; then
      GAP_FREE=0; GAP_ROUNDS=1
      for p in $(cat "$1"); do host_bind "$p" && GAP_FREE=$((GAP_FREE+1)); done
    fi
    start_iwpmd "" && RESTART_RC=0; RESTART_S=$(elapsed "$t0")
  fi
}
# gap_check NAME: the zero-gap check of the last restart_kill9: with the store no probe
# bind succeeded (over at least one port and round); without it, reported ("no FD store")
gap_check() {
  if [ "${STORE:-0}" = 1 ]; then
    check "$1" "a probe bound the $GAP_PORTS mapped ports of this side in a loop through the restart: ${GAP_ROUNDS:-?} rounds, ${GAP_FREE:-?} binds succeeded" \
      sh -c "[ '$GAP_PORTS' -ge 1 ] && [ '${GAP_FREE:-x}' = 0 ] && [ '${GAP_ROUNDS:-0}' -gt 0 ]"
    detail "$(head -3 "$OUT/probe-free$PROBE_SUFFIX.txt")"
  else
    role_check "no FD store" "$1" "between the SIGKILL and the new daemon a host socket could bind $GAP_FREE of the $GAP_PORTS mapped ports of this side" test "$GAP_FREE" = 0
  fi
}
