#!/bin/bash
# Run every real-kernel rig suite against our daemon, with the C iwpmd as reference.
#
# Usage: tests/rig/run-all.sh [--kernel 6.1|6.12|all] [--daemon PATH] [--no-c] [--only SUITE,...]
#                             [--selftest]
#   --kernel K     boot Linux 6.1 (Debian 12), 6.12 (Debian 13) or both in turn [all]; each
#                  kernel gets the whole run below and its own results folder; with
#                  RIG_JOBS=2 the kernels run side by side (about half the wall time on a
#                  2-core host; CI does this)
#   --daemon PATH  our iwpmd binary (default: cargo build --release -p iwpmd, then
#                  target/release/iwpmd)
#   --no-c         skip the C reference runs that are not comparisons (restart, negative,
#                  abi, noipv6, nlperm, twovm C<->C); single (cmtime), the mixed twovm pairs, perf,
#                  flood, forge, pairs and trickle (C and ours side by side in one boot) and
#                  restart-load (ours, then C, compared in one table) always run
#   --only LIST    only these suites: single,restart,restart-load,negative,abi,noipv6,nlperm,
#                  twovm,perf,flood,flood6,forge,pairs,trickle,privdrop,zerogap (with zerogap-pm),
#                  pm, pmops, fleet (port-mapped mode: the rig's patched kernels, RIG_PATCHES=1,
#                  the default; fleet: fleet keys between two daemons of ours, read with
#                  iwpmctl: built here, or beside --daemon PATH, or RIG_IWPMCTL), storage
#                  (NVMe over Fabrics and NFS over RDMA between two VMs on a kernel of its
#                  own, kernel/storage.config: the team folder's prebuilt image when
#                  kernel/prebuilt.txt pins it, else built into RIG_STORAGE_CACHE
#                  [/var/cache/iwpm-rig-storage] on first use); and, not in the default
#                  list, pm-hold (with pm: ours as a port-mapped passive side with no
#                  REMOTE_INFO budget: every REMOTE_INFO held for the ACK; ours as the
#                  client waits for the delivery notice)
#   --selftest     also prove that the checks can fail: run the single suite against a
#                  deliberately broken responder (tools/rigtool.c mute-responder: never
#                  answers QUERY_MAPPING) and the negative suite against the C iwpmd
#                  with forged=ignored (it does not check senders), and the forge suite
#                  with the C iwpmd checked as if it were ours; the checks listed
#                  below must FAIL there, and each such failure counts as a PASS
# Environment: RIG_JOBS=2 runs the kernels side by side; RIG_LANES=2 runs each kernel's
# two-VM suites (twovm, forge, trickle, pm, pmops, fleet) beside its one-VM suites, RIG_LANES=3
# also splits the one-VM suites in two (kernel conversation; perf, floods and attacks);
# RIG_PAIR_SLOTS=N lets N two-VM runs share the host at once (1 by default).
# RIG_STORAGE_LANE=1 runs the storage boots beside everything else, at nice
# RIG_STORAGE_NICE [10; CI 0], the two kernels' in turn (CI; default: last in the last lane).
# RIG_WITHOUT=storage,... leaves those suites out (after --only).
# RIG_SIDE_SLOT=FILE: with RIG_STORAGE_LANE=1, FILE is touched once every kernel's storage
# lane has ended (the cargo test then runs the system test beside the rig's rest).
# RIG_STORAGE_MODES="0 1" (the default) are the siw.port_map modes the storage suite boots
# (one boot each; "1" alone for the port-mapped one). RIG_STORAGE_PAIRS=server:client,...
# replaces the storage rounds' pairings; RIG_STORAGE_WIRE=1 puts the wire (tools/wire.py)
# between the storage VMs, and with RIG_WIRE_PCAP=1 it keeps the frames' heads. (QEMU
# keeps them anyway, in each storage VM's eth0.pcap: storage_frames below.)
# Suites (guest/suite-*.sh) pass only on daemon-side evidence: the daemon's strace'd
# netlink/UDP conversation, its SIGUSR1 mapping dumps, dmesg, and rping/cmtime timing.
# Results: target/rig/<kernel>/ (summary.txt, cmtime.txt, flood.txt, forge.txt, pairs.txt,
# trickle.txt, restart-load.txt, fleet.txt, share/out/<run>/ with every trace, console-<run>.log) and
# target/rig/summary.txt (every kernel's summary in turn, then the total and the wall time
# per kernel); exit status 0 only if every check of every run on every kernel passed.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OURS=""; KERNELS=all; ARGS=(); WITH_C=1; ONLY="single,restart,restart-load,negative,abi,noipv6,nlperm,twovm,perf,flood,flood6,forge,pairs,trickle,privdrop,zerogap,pm,pmops,fleet,storage"; SELFTEST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) KERNELS="$2"; shift 2 ;;
    --daemon) OURS="$2"; shift 2 ;;
    --no-c) WITH_C=0; ARGS+=("$1"); shift ;;
    --only) ONLY="$2"; ARGS+=("$1" "$2"); shift 2 ;;
    --selftest) SELFTEST=1; ARGS+=("$1"); shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
# RIG_WITHOUT=SUITE,...: those suites left out of the list (CI, while a suite's known flake
# is under investigation: docs/testing.md says which and why)
for w in ${RIG_WITHOUT:+${RIG_WITHOUT//,/ }}; do ONLY=",$ONLY,"; ONLY=${ONLY//,$w,/,}; ONLY=${ONLY#,}; ONLY=${ONLY%,}; done
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
RIG_TOP="${CARGO_TARGET_DIR:-$REPO/target}/rig"
[ "$KERNELS" = all ] && KERNELS="${RIG_KVERS// /,}"
for k in ${KERNELS//,/ }; do
  RIG_KVER=$k rig_kver_ok || { echo "unknown kernel $k (known: $RIG_KVERS, all)" >&2; exit 2; }
done

# ---- every kernel in turn: this script once per kernel (RIG_ALL_ONE=1), results apart ----
if [ "${RIG_ALL_ONE:-0}" != 1 ]; then
  mkdir -p "$RIG_TOP"
  exec 8> "$RIG_TOP/.lock"   # compat-report waits on this one while any kernel runs
  flock -n 8 || { echo "[run-all] waiting for another run-all on $RIG_TOP" >&2; flock -w 3600 8 || { echo "[run-all] gave up waiting" >&2; exit 1; }; }
  T0=$(date +%s); TOP_SUMMARY="$RIG_TOP/summary.txt"
  # results of the layout before per-kernel folders would only mislead
  rm -rf "$RIG_TOP/share" "$RIG_TOP"/console-*.log "$RIG_TOP"/{cmtime,flood,flood6,forge,pairs,trickle,restart-load}.txt
  : > "$TOP_SUMMARY"
  if [ -z "$OURS" ]; then
    (cd "$REPO" && CARGO_ENCODED_RUSTFLAGS=$(scripts/release-rustflags) cargo build --release -p iwpmd >&2) || { echo "FAIL setup: cargo build --release -p iwpmd" | tee -a "$TOP_SUMMARY"; exit 1; }
    OURS="${CARGO_TARGET_DIR:-$REPO/target}/release/iwpmd"
    # iwpmctl for the fleet suite, built here as our daemon was (with --daemon nothing is
    # built: the cargo test that wraps the rig holds cargo's lock; the suite then takes the
    # iwpmctl beside that binary, which .ci/run builds with it, or RIG_IWPMCTL)
    if want fleet && [ -z "${RIG_IWPMCTL:-}" ]; then
      (cd "$REPO" && CARGO_ENCODED_RUSTFLAGS=$(scripts/release-rustflags) cargo build --release -p iwpm-control >&2) || { echo "FAIL setup: cargo build --release -p iwpm-control" | tee -a "$TOP_SUMMARY"; exit 1; }
    fi
  fi
  rc=0; TIMES=(); NP=0; NF=0; PAR=0
  RIG_KERNEL_COUNT=$(echo ${KERNELS//,/ } | wc -w); export RIG_KERNEL_COUNT
  [ -n "${RIG_SIDE_SLOT:-}" ] && rm -f "$RIG_SIDE_SLOT" "$RIG_SIDE_SLOT.lanes"
  [ "${RIG_JOBS:-1}" -ge 2 ] && [ "$KERNELS" != "${KERNELS//,/}" ] && PAR=1
  if [ $PAR = 1 ]; then
    # The kernels side by side (RIG_JOBS=2; each kernel's run keeps its own folder, share
    # and console logs, and run-2vm.sh picks a free socket port per pair). The kernel
    # images and the shared initramfs are made first, one at a time.
    for k in ${KERNELS//,/ }; do
      RIG_KVER=$k "$RIG_DIR/build-kernel.sh" > /dev/null || { echo "FAIL setup: kernel $k" | tee -a "$TOP_SUMMARY"; exit 1; }
    done
    "$RIG_DIR/mkinitramfs.sh" >&2 || { echo "FAIL setup: initramfs" | tee -a "$TOP_SUMMARY"; exit 1; }
    declare -A PIDS=()
    for k in ${KERNELS//,/ }; do
      echo "[run-all] ===== kernel $k (in parallel) =====" >&2
      RIG_INITRD_READY=1 RIG_ALL_ONE=1 RIG_KVER=$k "$0" --kernel "$k" --daemon "$OURS" ${ARGS[@]+"${ARGS[@]}"} \
        > >(sed -u "s/^/[$k] /" >&2) 2>&1 &
      PIDS[$k]=$!
    done
    for k in ${KERNELS//,/ }; do wait "${PIDS[$k]}" || rc=1; done
    TIMES+=("side by side")
  fi
  for k in ${KERNELS//,/ }; do
    t=$(date +%s)
    if [ $PAR = 0 ]; then
      echo "[run-all] ===== kernel $k =====" >&2
      RIG_ALL_ONE=1 RIG_KVER=$k "$0" --kernel "$k" --daemon "$OURS" ${ARGS[@]+"${ARGS[@]}"} || rc=1
      TIMES+=("$k $(( $(date +%s) - t ))s")
    fi
    f="$RIG_TOP/$k/summary.txt"
    { echo "=== kernel $k (target/rig/$k/summary.txt)"; cat "$f" 2>/dev/null || echo "FAIL setup: no summary for kernel $k"; echo; } >> "$TOP_SUMMARY"
    p=$(grep -c '^   PASS' "$f" 2>/dev/null); q=$(grep -cE '^(   )?FAIL' "$f" 2>/dev/null)
    NP=$((NP+${p:-0})); NF=$((NF+${q:-0}))
    [ -f "$f" ] || NF=$((NF+1))
  done
  [ $rc = 0 ] || [ $NF -gt 0 ] || NF=1   # a kernel's run failed without a FAIL line
  { echo "== rig, every kernel ($KERNELS): $NP passed, $NF failed; wall $(( $(date +%s) - T0 ))s (${TIMES[*]})"; } | tee -a "$TOP_SUMMARY"
  echo "$NP passed, $NF failed"
  [ $NF = 0 ]; exit
fi

RES="$RIG_TOP/$RIG_KVER"
SHARE="$RES/share"
SUMMARY="$RES/summary.txt"
# One run at a time per results folder (cargo test and a manual run may overlap): the
# VM names, the share and the two-VM sockets would collide.
mkdir -p "$RES"
exec 9> "$RES/.lock"
flock -n 9 || { echo "[run-all] waiting for another run-all on $RES" >&2; flock -w 1800 9 || { echo "[run-all] gave up waiting" >&2; exit 1; }; }
T_START=$(date +%s)
rm -rf "$SHARE/out"; mkdir -p "$SHARE/bin" "$SHARE/out"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
stamp() { echo "$(( $(date +%s) - T_START ))s"; }

# ---- kernel, initramfs, our binary ------------------------------------------------
t=$(date +%s)
KERNEL=$("$RIG_DIR/build-kernel.sh" | tail -1) || { say "FAIL setup: no kernel"; exit 1; }
export RIG_KVER "$(rig_kernel_var)=$KERNEL"   # what run-vm.sh boots
if [ "${RIG_INITRD_READY:-0}" != 1 ]; then
  "$RIG_DIR/mkinitramfs.sh" >&2 || { say "FAIL setup: initramfs"; exit 1; }
fi
if [ -z "$OURS" ]; then
  (cd "$REPO" && CARGO_ENCODED_RUSTFLAGS=$(scripts/release-rustflags) cargo build --release -p iwpmd >&2) || { say "FAIL setup: cargo build --release -p iwpmd"; exit 1; }
  OURS="${CARGO_TARGET_DIR:-$REPO/target}/release/iwpmd"
fi
[ -x "$OURS" ] || { say "FAIL setup: our daemon $OURS is not an executable"; exit 1; }
cp "$OURS" "$SHARE/bin/iwpmd-rs"
FLEET_CTL=0
if want fleet; then  # the fleet suite reads our daemon's counters and keys with iwpmctl
  # (RIG_IWPMCTL, else the one beside our binary); without one the suite does not run: a
  # FAIL line where the rig is required (IWPM_RIG_REQUIRED=1, as in CI), else a note
  CTLBIN=${RIG_IWPMCTL:-$(dirname "$OURS")/iwpmctl}
  if [ -x "$CTLBIN" ] && cp "$CTLBIN" "$SHARE/bin/iwpmctl"; then FLEET_CTL=1
  elif [ "${IWPM_RIG_REQUIRED:-0}" = 1 ]; then say "FAIL setup: no iwpmctl at $CTLBIN for the fleet suite (cargo build --release -p iwpm-control)"
  else say "fleet: not run: no iwpmctl at $CTLBIN (cargo build --release -p iwpm-control, or RIG_IWPMCTL=PATH)"; fi
fi
RS=/mnt/rig/bin/iwpmd-rs; C=/usr/sbin/iwpmd
STORAGE_CACHE=${RIG_STORAGE_CACHE:-/var/cache/iwpm-rig-storage}
# Ours as C talks to itself in one VM: connects to its own IP go over UDP (REQUEST/ACCEPT/ACK
# to itself), which the one-VM suites check on the real kernel; single-ours runs the
# default, answering such connects from the daemon's own table (local=1).
RS_UDP=--systemd,--no-local-answers
say "rig: Linux $RIG_KVER kernel $KERNEL; initramfs $INITRD_DEFAULT; ours $OURS ($(sha256sum "$OURS" | cut -c1-12)) as $RS; C $C; setup $(( $(date +%s) - t ))s"

# ---- runs ----------------------------------------------------------------------------
RUNS=()   # run names in order, for the summary
run1() {  # run1 NAME TIMEOUT SUITE [-e KEY=VAL]...
  local name=$1 tmo=$2 suite=$3 t0 rc; shift 3
  t0=$(date +%s)
  "$RIG_DIR/run-vm.sh" -n "$name" -s "$SHARE" -T "$tmo" -m 1024 -l "$RES/console-$name.log" "$@" \
    "$RIG_DIR/guest/suite-$suite.sh" > /dev/null 2>&1; rc=$?
  collect "$name" "$rc" "$(( $(date +%s) - t0 ))"
}
pair_slot() {  # takes one of RIG_PAIR_SLOTS host-wide slots on fd 7 (waits up to 30 min);
  # with SOLO=1 every slot (fd 7 and 6), for a suite whose judged figures need the host
  local i n=${RIG_PAIR_SLOTS:-1} waited=0
  if [ "${SOLO:-0}" = 1 ]; then
    exec 7> /tmp/iwpm-rig-2vm-pairs.0.lock; flock -w 1800 7 || return 1
    [ "$n" -ge 2 ] && { exec 6> /tmp/iwpm-rig-2vm-pairs.1.lock; flock -w 1800 6 || return 1; }
    return 0
  fi
  while [ $waited -lt 1800 ]; do
    for ((i = 0; i < n; i++)); do
      exec 7> "/tmp/iwpm-rig-2vm-pairs.$i.lock"
      flock -n 7 && return 0
    done
    sleep 1; waited=$((waited + 1))
  done
  echo "[run-all] no free pair slot after 30 min" >&2; return 1
}
run2() {  # run2 NAME SERVER_DAEMON CLIENT_DAEMON [-e KEY=VAL]...  (guest test: $TEST2, else twovm)
  local name=$1 a=$2 b=$3 t0 rc; shift 3; t0=$(date +%s)
  # At most RIG_PAIR_SLOTS pairs on the host at once, whichever kernel runs them (1 by
  # default; CI allows 2: a pair's VMs wait on the network and on each other most of the
  # time, at about a fifth of a core each, and the judged connect times have wide margins).
  [ -n "${NO_PAIR_SLOT:-}" ] || pair_slot || { collect "$name-A" 125 0; collect "$name-B" 125 0; return; }
  ${VM_NICE:+nice -n "$VM_NICE"} "$RIG_DIR/run-2vm.sh" -s "$SHARE" -T 300 -n "$name-A,$name-B" -A iwpmd="$a" -B iwpmd="$b" "$@" \
    ${TEST2:+"$TEST2"} > "$RES/console-$name.log" 2>&1
  exec 7>&- 6>&-
  grep -q "status" "$RES/console-$name.log" || true
  [ -z "${RUN2_AFTER:-}" ] || "$RUN2_AFTER" "$name"
  rc=$(sed -n "s/.*$name-A status \([0-9]*\).*/\1/p" "$RES/console-$name.log"); collect "$name-A" "${rc:-125}" "$(( $(date +%s) - t0 ))"
  rc=$(sed -n "s/.*$name-B status \([0-9]*\).*/\1/p" "$RES/console-$name.log"); collect "$name-B" "${rc:-125}" "$(( $(date +%s) - t0 ))"
}
vm_cpu() {  # vm_cpu NAME: ", host CPU Ns" from run-vm.sh's record of the VM's QEMU, if any
  awk '{ t = 0; for (i = 1; i <= NF; i++) { split($i, p, "m"); sub(/s$/, "", p[2]); t += p[1] * 60 + p[2] }
         printf ", host CPU %.0fs", t }' "$SHARE/out/$1/vm-cpu.txt" 2>/dev/null
}
collect() {  # collect NAME RC SECONDS: fold the run's checks into the summary
  local name=$1 rc=$2 secs=$3 f="$SHARE/out/$1/checks.txt" np nf
  RUNS+=("$name")
  np=$(grep -c '^PASS' "$f" 2>/dev/null); nf=$(grep -c '^FAIL' "$f" 2>/dev/null)
  case "$rc" in
    124) echo "FAIL vm: hard timeout" >> "$f"; nf=$((${nf:-0}+1)) ;;
    125) echo "FAIL vm: guest died without an exit status" >> "$f"; nf=$((${nf:-0}+1)) ;;
  esac
  [ -s "$f" ] || { echo "FAIL vm: no checks reported (rc $rc)" > "$f"; nf=1; }
  say ""; say "== $name: ${np:-0} passed, ${nf:-0} failed (${secs}s, at $(stamp)$(vm_cpu "$name"))"
  grep -E '^(PASS|FAIL|INFO)' "$f" | sed 's/^/   /' | tee -a "$SUMMARY" >/dev/null
  grep -E '^FAIL' "$f" | sed 's/^/   /' >&2
}

kernel_suites() {  # one VM per run: the kernel conversation, restarts, ABI, permissions
  if want single; then
    run1 single-ours 300 single -m 2048 -e iwpmd=$RS -e local=1 -e batched=1
    run1 single-udp-ours 300 single -m 2048 -e iwpmd=$RS -e iwpmd_args=$RS_UDP -e batched=1
    run1 single-c 300 single -m 2048 -e iwpmd=$C
  fi
  if want restart; then
    run1 restart-ours 180 restart -e iwpmd=$RS -e iwpmd_args=$RS_UDP
    [ $WITH_C = 1 ] && run1 restart-c 180 restart -e iwpmd=$C
  fi
  if want restart-load; then  # kill -9 under load (100 listeners, live rping, connects in flight):
    # ours checked, then C reported (INFO lines), one table (restart-load.txt)
    run1 restart-load-ours 180 restart-load -m 2048 -e iwpmd=$RS -e iwpmd_args=$RS_UDP
    run1 restart-load-c 180 restart-load -m 2048 -e iwpmd=$C -e reference=1
  fi
  if want zerogap; then  # restart through a stand-in FD store (tools/rigfdstore.c), 320 mappings:
    # ours checked; the control run (no FD store, no state file) reported as INFO lines
    run1 zerogap-ours 240 zerogap -m 2048 -e iwpmd=$RS
    run1 zerogap-control 240 zerogap -m 2048 -e iwpmd=$RS -e reference=1
    # the same in port-mapped mode: real reserved ports, so the probe tests the claim itself
    if [ -n "$(rig_patches)" ]; then
      run1 zerogap-pm-ours 240 zerogap -m 2048 -e iwpmd=$RS -e portmap=1
      run1 zerogap-pm-control 240 zerogap -m 2048 -e iwpmd=$RS -e portmap=1 -e reference=1
    fi
  fi
  if want negative; then
    run1 negative-ours 180 negative -e iwpmd=$RS -e iwpmd_args=$RS_UDP -e forged=ignored
    [ $WITH_C = 1 ] && run1 negative-c 180 negative -e iwpmd=$C -e forged=accepted
  fi
  if want abi; then
    run1 abi-before-ours 180 abi -e iwpmd=$RS -e iwpmd_args=$RS_UDP -e abi_order=before
    run1 abi-after-ours 180 abi -e iwpmd=$RS -e iwpmd_args=$RS_UDP -e abi_order=after
    if [ $WITH_C = 1 ]; then
      run1 abi-before-c 180 abi -e iwpmd=$C -e abi_order=before
      run1 abi-after-c 180 abi -e iwpmd=$C -e abi_order=after
    fi
  fi
  if want noipv6; then  # kernel booted with ipv6.disable=1: socket(AF_INET6) gives EAFNOSUPPORT
    run1 noipv6-ours 180 noipv6 -K ipv6.disable=1 -e iwpmd=$RS -e iwpmd_args=$RS_UDP
    [ $WITH_C = 1 ] && run1 noipv6-c 180 noipv6 -K ipv6.disable=1 -e iwpmd=$C
  fi
  if want nlperm; then  # what an unprivileged process can do on iwpm netlink (kernels differ)
    run1 nlperm-ours 180 nlperm -e iwpmd=$RS
    [ $WITH_C = 1 ] && run1 nlperm-c 180 nlperm -e iwpmd=$C
  fi
}
attack_suites() {  # one VM per run: timing, floods and attacks, ours and C in one boot
  if want perf; then  # cmtime interleaved ours / C / none in one boot (fair timing)
    run1 perf 300 perf -e daemons=$RS,$C,none -e rounds=5
  fi
  if want flood; then  # spoofed-REQUEST flood: ours, then C, in one boot (C reported, not checked)
    run1 flood 400 flood -m 2048 -e daemons=$RS,$C -e reference=$C
  fi
  if want flood6 && [ -n "$(rig_patches)" ]; then  # spoofed IPv6 port-mapped REQUESTs (specific and IPv4-wildcard listener), an IPv6 cookie sweep
    run1 flood6 300 flood6 -m 2048 -e daemons=$RS,$C -e reference=$C -e portmap=1
  fi
  if want pairs; then  # blind REQUEST + ACK pairs, identity and port-mapped: ours, then C, in one boot
    run1 pairs 300 pairs -m 2048 -e daemons=$RS,$C -e reference=$C
  fi
  if want privdrop; then  # ours only: CAP_NET_ADMIN kept, still serving (as root and as nobody)
    run1 privdrop-ours 300 privdrop -m 2048 -e iwpmd=$RS -e iwpmd_args=$RS_UDP
  fi
}
two_vm_suites() {  # two VMs per run (run2, one pair slot each)
  if want twovm; then
    # (the timing runs, daemons untraced, at the end of the traced boots: ours in ours-ours,
    # C and no daemon in C-C, or in ours-ours with --no-c)
    tn=ours,none; [ $WITH_C = 1 ] && tn=ours
    run2 twovm-ours-ours $RS $RS -e timing=$tn
    # (ours keyed against rdma-core's daemon, rig.keys=1: keys must change nothing there)
    run2 twovm-ours-c $RS $C -A keys=1
    run2 twovm-c-ours $C $RS -B keys=1
    [ $WITH_C = 1 ] && run2 twovm-c-c $C $C -e timing=c,none
  fi
  if want forge; then  # forged cp address: A runs ours then C, B (no daemon) is the attacker
    TEST2="$RIG_DIR/guest/suite-forge.sh" run2 forge "$RS" none -e daemons=$RS,$C -e reference=$C
  fi
  if want trickle; then  # a never-ACKed REQUEST trickle from the connecting host (IPv4 and IPv6):
    # A runs ours then C (rping servers), B runs the C iwpmd, times rping connects, trickles
    # (alone on the host: under a second pair rping's own race, a connect with no ping
  # data, came five times in eight and the check allows four)
  SOLO=1 TEST2="$RIG_DIR/guest/suite-trickle.sh" run2 trickle "$RS" "$C" -T 480 -e daemons=$RS,$C -e reference=$C
  fi
  if [ -z "$(rig_patches)" ] && { want pm || want pmops || want flood6 || want fleet; }; then
    say "RIG_PATCHES=0: unpatched kernels, the port-mapped suites (pm, pmops, zerogap-pm, flood6, fleet) do not run"
  fi
  if want pm && [ -n "$(rig_patches)" ]; then  # port-mapped mode: siw.port_map=1 on both VMs (patched kernel), every pairing
    # (server-client); figures per pairing in pm.txt
    t_pm=$(date +%s)
    for p in ours-ours c-c ours-c c-ours; do
      [ $p = c-c ] && [ $WITH_C = 0 ] && continue
      a=$RS; [ "${p%-*}" = c ] && a=$C; b=$RS; [ "${p#*-}" = c ] && b=$C
      # ours keyed (rig.keys=1) in the mixed pairings: a keyed daemon serves rdma-core's as
      # an unkeyed one does
      k=(); [ $p = ours-c ] && k=(-A keys=1); [ $p = c-ours ] && k=(-B keys=1)
      TEST2="$RIG_DIR/guest/suite-pm.sh" run2 "pm-$p" "$a" "$b" ${k[@]+"${k[@]}"}
    done
    # pm-hold (only when asked for): ours as the server with no REMOTE_INFO budget, every
    # REMOTE_INFO waiting for the peer's verified ACK (a spent budget's path), ours and C as
    # the client. Ours as the client holds its answer for the delivery notice, so the
    # REMOTE_INFO is first; C as the client races it (those peer-* are INFO lines).
    for p in ours-ours ours-c; do
      want pm-hold || continue
      b=$RS; [ $p = ours-c ] && b=$C
      TEST2="$RIG_DIR/guest/suite-pm.sh" run2 "pm-hold-$p" "$RS" "$b" -A ri_budget=0
    done
    PMT="$RES/pm.txt"
    pmv() { awk -v k="$2" '$1==k {print $2; exit}' "$SHARE/out/$1/pm-figures.txt" 2>/dev/null; }
    { echo "port-mapped mode (suite pm, siw.port_map=1, both daemons traced), Linux $RIG_KVER; block wall $(( $(date +%s) - t_pm ))s"
      printf '%-18s %-8s %-10s %-22s %-26s %-9s %s\n' "server-client" "checks" "rping s" "cmtime -c total/max ms" "rigcm connect ms spec/wild/v6" "suite s" "pair wall s"
      for p in ours-ours c-c ours-c c-ours hold-ours-ours hold-ours-c; do
        f="$SHARE/out/pm-$p-A/checks.txt"; [ -f "$f" ] || continue
        np=$(cat "$f" "$SHARE/out/pm-$p-B/checks.txt" | grep -c '^PASS'); nf=$(cat "$f" "$SHARE/out/pm-$p-B/checks.txt" | grep -c '^FAIL')
        w=$(sed -n "s/.*pm-$p-A status .* wall \([0-9.]*\)s.*/\1/p" "$RES/console-pm-$p.log")
        printf '%-18s %-8s %-10s %-22s %-26s %-9s %s\n' "$p" "$np/$((np+nf))" "$(pmv pm-$p-B rping_s)" \
          "$(pmv pm-$p-B cmtime_total_ms)/$(pmv pm-$p-B cmtime_max_ms)" \
          "$(pmv pm-$p-B connect_specific_ms)/$(pmv pm-$p-B connect_wildcard_ms)/$(pmv pm-$p-B connect_v6_ms)" \
          "$(pmv pm-$p-A suite_s)/$(pmv pm-$p-B suite_s)" "${w:--}"
      done; } > "$PMT"
    { echo; echo "== pm (target/rig/$RIG_KVER/pm.txt)"; sed 's/^/  /' "$PMT"; } | tee -a "$SUMMARY"
  fi
  if want pmops && [ -n "$(rig_patches)" ]; then  # port-mapped operations: kill -9 restarts with a live connection (zero gap
    # with the FD store stand-in), a 4-port ip_local_port_range, a NO_PORT_MAP client
    t_po=$(date +%s)
    TEST2="$RIG_DIR/guest/suite-pmops.sh" run2 pmops-ours-ours "$RS" "$RS" -e store=1
    TEST2="$RIG_DIR/guest/suite-pmops.sh" run2 pmops-ours-c "$RS" "$C"
    TEST2="$RIG_DIR/guest/suite-pmops.sh" run2 pmops-c-ours "$C" "$RS" -B store=1
    POT="$RES/pmops.txt"
    pov() { awk -v k="$2" '$1==k {$1=""; sub(/^ /, ""); print; exit}' "$SHARE/out/$1/pmops-figures.txt" 2>/dev/null; }
    { echo "port-mapped operations (suite pmops), Linux $RIG_KVER; block wall $(( $(date +%s) - t_po ))s"
      printf '%-12s %-8s %-22s %-22s %-12s %s
  ' "server-client" "checks" "restart s srv/cli" "gap binds srv/cli" "exhaust" "mixed ms plain->pm/pm->plain"
      for p in ours-ours ours-c c-ours; do
        f="$SHARE/out/pmops-$p-A/checks.txt"; [ -f "$f" ] || continue
        np=$(cat "$f" "$SHARE/out/pmops-$p-B/checks.txt" | grep -c '^PASS'); nf=$(cat "$f" "$SHARE/out/pmops-$p-B/checks.txt" | grep -c '^FAIL')
        printf '%-12s %-8s %-22s %-22s %-12s %s\n' "$p" "$np/$((np+nf))" \
          "$(pov pmops-$p-A restart_server_s)/$(pov pmops-$p-B restart_client_s)" \
          "$(pov pmops-$p-A probe_server_free_binds)/$(pov pmops-$p-B probe_client_free_binds)" \
          "$(pov pmops-$p-A exhaust_mapped_listeners)+$(pov pmops-$p-A exhaust_unmapped_listeners)" \
          "$(pov pmops-$p-B mixed_plain_to_pm_ms)/$(pov pmops-$p-A mixed_pm_to_plain_ms)"
      done; } > "$POT"
    { echo; echo "== pmops (target/rig/$RIG_KVER/pmops.txt)"; sed 's/^/  /' "$POT"; } | tee -a "$SUMMARY"
  fi
  if want fleet && [ -n "$(rig_patches)" ] && [ $FLEET_CTL = 1 ]; then  # fleet keys between two daemons of ours, port-mapped,
    # one boot: keyed <-> keyed, a keyless third host on the wire (tools/wire.py) replaying,
    # stripping and flipping the sealed datagrams it saw and cutting one in flight, a key
    # rotation under connects, keyed ours <-> C both ways (fleet.txt)
    t_fl=$(date +%s)
    TEST2="$RIG_DIR/guest/suite-fleet.sh" run2 fleet "$RS" "$RS" -T 420 -w
    FLT="$RES/fleet.txt"
    flv() { awk -v k="$2" '$1==k {print $2; exit}' "$SHARE/out/$1/fleet-figures.txt" 2>/dev/null; }
    { np=$(cat "$SHARE/out/fleet-A/checks.txt" "$SHARE/out/fleet-B/checks.txt" 2>/dev/null | grep -c '^PASS')
      nf=$(cat "$SHARE/out/fleet-A/checks.txt" "$SHARE/out/fleet-B/checks.txt" 2>/dev/null | grep -c '^FAIL')
      echo "fleet keys (suite fleet, siw.port_map=1, both daemons traced), Linux $RIG_KVER: $np/$((np+nf)) checks; block wall $(( $(date +%s) - t_fl ))s, suite $(flv fleet-A suite_s)/$(flv fleet-B suite_s) s (server/client)"
      echo "  1 keyed<->keyed: cmtime total/max ms $(flv fleet-B p1_cmtime_total_ms)/$(flv fleet-B p1_cmtime_max_ms), rigcm connect $(flv fleet-B p1_connect_ms) ms; sealed datagrams server $(flv fleet-A p1_sealed_server), client $(flv fleet-B p1_sealed_client); peer_auth_verified server/client $(flv fleet-A p1_verified_server)/$(flv fleet-B p1_verified_client)"
      echo "  2 attacker on the wire (IPv4 and IPv6): replay $(flv fleet-A p2_replay_counters), strip $(flv fleet-A p2_strip_counters), flip $(flv fleet-A p2_flip_counters); connect after each, ms: $(flv fleet-B p2_after_replay_ms)/$(flv fleet-B p2_after_strip_ms)/$(flv fleet-B p2_after_flip_ms); cut in flight $(flv fleet-A p2_instrip_counters), connect v4/v6 $(flv fleet-B p2_instrip_v4_ms)/$(flv fleet-B p2_instrip_v6_ms) ms"
      echo "  3 rotation: connects $(flv fleet-B p3_connects) (cmtime rounds, connect time summed $(flv fleet-B p3_connect_total_ms) ms), slowest $(flv fleet-B p3_connect_max_ms) ms (round $(flv fleet-B p3_round_max_s) s); sealed under key 1/key 2, server $(flv fleet-A p3_sent_key1_key2_server), client $(flv fleet-B p3_sent_key1_key2_client)"
      echo "  4 with C: cmtime total/max ms, ours-C $(flv fleet-B p4_ours-c_cmtime_total_ms)/$(flv fleet-B p4_ours-c_cmtime_max_ms), C-ours $(flv fleet-B p4_c-ours_cmtime_total_ms)/$(flv fleet-B p4_c-ours_cmtime_max_ms)"
    } > "$FLT"
    { echo; echo "== fleet (target/rig/$RIG_KVER/fleet.txt)"; sed 's/^/  /' "$FLT"; } | tee -a "$SUMMARY"
  fi
}
storage_lane() {  # RIG_STORAGE_LANE=1: the storage boots beside the other lanes (see below)
  exec 5> /tmp/iwpm-rig-storage-lane.lock
  flock -w 3600 5 || { say "FAIL setup: the storage lane waited an hour for the other kernel's"; return; }
  NO_PAIR_SLOT=1 VM_NICE=${RIG_STORAGE_NICE:-10} storage_suites
  # (RIG_SIDE_SLOT: the last kernel's storage lane to end touches that file, still under
  # the lane's lock: the host then has room for another job of the lane's size beside the
  # rest, which the cargo test gives the Debian system test)
  if [ -n "${RIG_SIDE_SLOT:-}" ]; then
    echo "$RIG_KVER $(date +%s)" >> "$RIG_SIDE_SLOT.lanes"
    [ "$(wc -l < "$RIG_SIDE_SLOT.lanes")" -ge "${RIG_KERNEL_COUNT:-1}" ] && touch "$RIG_SIDE_SLOT" &&
      echo "[run-all] storage lanes done at $(stamp): the side slot is free ($RIG_SIDE_SLOT)" >&2
  fi
  exec 5>&-
}
# storage_frames NAME: a check of the storage client NAME-B against the frames its VM sent
# and received (QEMU's eth0.pcap, tools/rdma-conns.py): the suite makes a connect or a
# mount a second time only when the kernel's log shows the first lost with the port mapper
# having answered, and each such retry must be matched by a connection whose first data the
# frames show lost (a Read Request or a first Send left unanswered on a connection already
# set up, which is the kernels' own; the port mapper's part ends before the TCP handshake).
# The flagged connections are listed in NAME-B/frames.txt and beneath the check.
storage_frames() {
  local out="$SHARE/out/$1-B" retries lost
  [ -d "$out" ] || return 0
  python3 "$RIG_DIR/tools/rdma-conns.py" "$out/eth0.pcap" > "$out/frames.txt" 2>&1
  retries=$(awk '$1 ~ /-retries$/ { n += $2 } END { print n + 0 }' "$out/storage-figures.txt" 2>/dev/null)
  lost=$(sed -n 's/^[0-9]* iWARP connections, \([0-9]*\) flagged$/\1/p' "$out/frames.txt")
  if [ -n "$lost" ] && [ "$retries" -le "$lost" ]; then
    echo "PASS frames-lost: $retries retries by the suite, $lost connections whose first data the frames show lost (tools/rdma-conns.py on eth0.pcap)" >> "$out/checks.txt"
  else
    echo "FAIL frames-lost: $retries retries by the suite, but ${lost:-no readable capture:} connections whose first data the frames show lost: a retry without that evidence (tools/rdma-conns.py on eth0.pcap; $(tail -1 "$out/frames.txt"))" >> "$out/checks.txt"
  fi
  grep '^connection ' "$out/frames.txt" | head -8 | sed 's/^/    /' >> "$out/checks.txt"
}
storage_suites() {  # two VMs per boot on a kernel of their own (one pair slot each)
  if want storage; then  # NVMe over Fabrics through the port mapper: the storage kernel
    # (kernel/storage.config, its own image and cache), one CPU per VM (RIG_STORAGE_CPUS=2
    # gives the controller 5 queues instead of 3, for 12% more host CPU), plain and (patched
    # kernels) port-mapped; every pairing of C and ours in one boot per mode
    local sk kvar old modes=0; kvar=$(rig_kernel_var); old=${!kvar}
    [ -n "$(rig_patches)" ] && modes=${RIG_STORAGE_MODES:-0 1}
    # (without the rig kernel's variable, which build-kernel.sh would take as it is; the
    # team folder's prebuilt storage image when kernel/prebuilt.txt pins it for this
    # configuration, else built into the storage cache)
    # (one kernel at a time: the kernels share the cache, and build-kernel.sh writes its
    # merged fragment there)
    local t_sk t_boot; t_sk=$(date +%s); rm -f "$RES/storage-walls.txt"
    mkdir -p "$STORAGE_CACHE"
    sk=$(flock -w 3600 "$STORAGE_CACHE/.build.lock" env -u "$kvar" RIG_EXTRA_CONFIG="$RIG_DIR/kernel/storage.config" \
      RIG_CACHE="$STORAGE_CACHE" "$RIG_DIR/build-kernel.sh" 2>> "$RES/storage-kernel.log" | tail -1)
    t_sk=$(( $(date +%s) - t_sk ))
    if [ -z "$sk" ] || [ ! -f "$sk" ]; then
      say "FAIL setup: no storage kernel for Linux $RIG_KVER ($(tail -1 "$RES/storage-kernel.log"))"
    else
      export "$kvar=$sk"
      flock -w 600 "$STORAGE_CACHE/.build.lock" "$RIG_DIR/storage-tools.sh" "$SHARE/nfs" 2>> "$RES/storage-kernel.log" ||
        say "FAIL setup: the NFS tools for the storage suite ($(tail -1 "$RES/storage-kernel.log"))"
      for pm in $modes; do
        # (port-mapped, a fifth round: ours holding its REMOTE_INFO for a C client's ACK,
        # which comes after the connection: what a queue does without one, reported)
        p=ours:ours,c:c,ours:c,c:ours; [ "$pm" = 1 ] && p=$p,ours-hold:c
        p=${RIG_STORAGE_PAIRS:-$p}
        t_boot=$(date +%s)
        RIG_NET_DUMP=1 RUN2_AFTER=storage_frames TEST2="$RIG_DIR/guest/suite-storage.sh" run2 "storage-pm$pm" "$RS" "$RS" -c "${RIG_STORAGE_CPUS:-1}" -T 1200 \
          ${RIG_STORAGE_WIRE:+-w} -e portmap=$pm -e pairs=$p
        echo "$pm $(( $(date +%s) - t_boot ))" >> "$RES/storage-walls.txt"
      done
      export "$kvar=$old"
      STT="$RES/storage.txt"
      stv() { awk -v k="$2" '$1==k {print $2; exit}' "$SHARE/out/$1/storage-figures.txt" 2>/dev/null; }
      { echo "NVMe-oF over RDMA through the port mapper (suite storage), Linux $RIG_KVER, storage kernel $sk ($( [ "${sk#"$SHARED_RIG"/}" != "$sk" ] && echo "prebuilt, pinned" || echo "built or cached"), ${t_sk}s)"
        echo "(one boot per mode, the pairings in turn; mappings: while connected / after both daemons' kill -9"
        echo " / after the reconnect of every queue (client; reset_controller);"
        echo " gap binds: a host socket's successful binds of this side's mapped ports during its daemon's"
        echo " restarts, NVMe server/client/NFS server, - when plain; peers: how the target's kernel"
        echo " reports the queues' host, real/mapped address, and the NFS client; IPv6: the NVMe connect"
        echo " over IPv6, the IPv6 NFS mount before/after the server daemon's restart, and which of nfsd's"
        echo " records, v4 and v6, the server's new daemon holds)"
        printf '%-9s %-14s %-10s %-7s %-16s %-16s %-15s %-13s %-12s %-10s %-9s %-8s %-13s %s\n' "port_map" "srv-cli" "connect s" "queues" \
          "client mappings" "server mappings" "writes/restart" "reset/disc s" "gap binds" "peers" "nfs peer" "v6 nvme" "v6 nfs s" "nfs records"
        for pm in $modes; do
          A="storage-pm$pm-A"; B="storage-pm$pm-B"
          np=$(cat "$SHARE/out/$A/checks.txt" "$SHARE/out/$B/checks.txt" 2>/dev/null | grep -c '^PASS')
          nf=$(cat "$SHARE/out/$A/checks.txt" "$SHARE/out/$B/checks.txt" 2>/dev/null | grep -c '^FAIL')
          echo "port_map=$pm: $np/$((np+nf)) checks, boot wall $(awk -v m="$pm" '$1==m {w=$2} END {print w}' "$RES/storage-walls.txt" 2>/dev/null)s"
          for p in ours-ours c-c ours-c c-ours ours-hold-c; do
            [ -n "$(stv $B $p-connect-s)" ] || continue
            printf '%-9s %-14s %-10s %-7s %-16s %-16s %-15s %-13s %-12s %-10s %-9s %-8s %-13s %s\n' "$pm" "$p" "$(stv $B $p-connect-s)" "$(stv $B $p-queues)" \
              "$(stv $B $p-client-mappings-connected)/$(stv $B $p-client-mappings-restarted)/$(stv $B $p-client-mappings-reset)" \
              "$(stv $A $p-server-mappings-connected)/$(stv $A $p-server-mappings-restarted)" \
              "$(stv $B $p-restart-writes)" "$(stv $B $p-reset-s)/$(stv $B $p-disconnect-s)" \
              "$(stv $A $p-restart-gap-binds)/$(stv $B $p-restart-gap-binds)/$(stv $A $p-nfs-restart-gap-binds)" \
              "$(stv $A $p-nvme-peers-real)/$(stv $A $p-nvme-peers-mapped)" "$(stv $B $p-nfs-peer-seen)" \
              "$(stv $B $p-v6-connect-s)" "$(stv $B $p-nfs6-mount-s)/$(stv $B $p-nfs6-remount-s)" "$(stv $A $p-server-nfs-restart-records)"
          done
        done; } > "$STT"
      { echo; echo "== storage (target/rig/$RIG_KVER/storage.txt)"; sed 's/^/  /' "$STT"; } | tee -a "$SUMMARY"
    fi
  fi
}
# RIG_LANES: the three groups of suites one after the other (1), the two-VM suites beside
# the one-VM ones (2), or all three groups side by side (3). A VM mostly waits (on the
# network, on its peer, on timeouts), so one run at a time left the cores idle. Each lane
# keeps its summary lines apart; they are appended in the order of the groups, so the
# summary reads the same whatever the lanes.
LANES=${RIG_LANES:-1}
case "$LANES" in
  1) GROUPS_OF_LANES=("kernel_suites attack_suites two_vm_suites") ;;
  2) GROUPS_OF_LANES=("kernel_suites attack_suites" "two_vm_suites") ;;
  *) GROUPS_OF_LANES=("kernel_suites" "attack_suites" "two_vm_suites") ;;
esac
# The storage boots: by default last in the last lane. RIG_STORAGE_LANE=1 (CI) runs them
# in a lane of their own, started first, beside the others: the other lanes leave part of
# the host idle (their VMs wait on the network, on each other, on timers), which the
# storage VMs take instead of adding their wall time at the end. The two kernels' storage
# lanes take turns (a host-wide lock), outside the pair slots, so one storage pair runs at a
# time. Their QEMUs run at nice RIG_STORAGE_NICE [10]; CI gives 0: at nice 10 the starved
# storage boots took 1.8 times as long and would have ended after the rest, at 0 the other
# lanes ran 8-12 % slower and the rig took 1 646 s instead of about 1 520 s (both kernels'
# storage done by 957 s). (Two kernels' storage boots at once, with two CPUs per VM, slowed
# the one-VM suites 2.5 times: a burst of 8 connects failed its 5 s.)
ORDER=("${!GROUPS_OF_LANES[@]}")
if [ "${RIG_STORAGE_LANE:-0}" = 1 ]; then
  GROUPS_OF_LANES+=("storage_lane"); ORDER=($(( ${#GROUPS_OF_LANES[@]} - 1 )) "${ORDER[@]}")
else
  GROUPS_OF_LANES[-1]+=" storage_suites"
fi
LANE_PIDS=()
for i in "${ORDER[@]}"; do
  ( SUMMARY="$RES/.lane-$i.txt"; : > "$SUMMARY"; RUNS=()
    for g in ${GROUPS_OF_LANES[$i]}; do "$g"; done
    [ ${#RUNS[@]} -eq 0 ] || printf '%s\n' "${RUNS[@]}" > "$RES/.lane-$i.runs" ) &
  LANE_PIDS+=($!)
  [ "$LANES" = 1 ] && [ "${GROUPS_OF_LANES[$i]}" != storage_lane ] && wait $!
done
wait "${LANE_PIDS[@]}"
for i in "${!GROUPS_OF_LANES[@]}"; do
  cat "$RES/.lane-$i.txt" >> "$SUMMARY" 2>/dev/null
  [ -s "$RES/.lane-$i.runs" ] && mapfile -t -O ${#RUNS[@]} RUNS < "$RES/.lane-$i.runs"
  rm -f "$RES/.lane-$i.txt" "$RES/.lane-$i.runs"
done

# ---- self-test: checks that must fail against broken daemons ------------------------------
expect_fail() {  # expect_fail RUN CHECK...: those checks of RUN must be FAIL
  local run=$1 c f="$SHARE/out/$1/checks.txt" out="$SHARE/out/$1-selftest/checks.txt"; shift
  mkdir -p "$(dirname "$out")"; : > "$out"
  for c in "$@"; do
    if grep -q "^FAIL $c:" "$f"; then echo "PASS $c fails as it must: $(grep "^FAIL $c:" "$f" | head -1 | cut -c6-)" >> "$out"
    else echo "FAIL $c should have failed against this daemon but did not" >> "$out"; fi
  done
  collect "$run-selftest" 0 0
}
if [ $SELFTEST = 1 ]; then
  MUTE=/usr/local/bin/rigtool
  "$RIG_DIR/run-vm.sh" -n selftest-mute -s "$SHARE" -T 300 -m 1024 -l "$RES/console-selftest-mute.log" \
    -e iwpmd=$MUTE -e iwpmd_args=mute-responder -e cmtime=5 -e ipv6=0 "$RIG_DIR/guest/suite-single.sh" > /dev/null 2>&1
  expect_fail selftest-mute rping ucmatose dump dmesg trace-peer trace-answered cmtime dmesg-cmtime
  "$RIG_DIR/run-vm.sh" -n selftest-forged-c -s "$SHARE" -T 180 -m 1024 -l "$RES/console-selftest-forged-c.log" \
    -e iwpmd=$C -e forged=ignored "$RIG_DIR/guest/suite-negative.sh" > /dev/null 2>&1
  expect_fail selftest-forged-c forge-no-reply forge-table
  # the forge checks must fail for a daemon that believes a forged REQUEST (the C iwpmd)
  "$RIG_DIR/run-2vm.sh" -s "$SHARE" -T 300 -n selftest-forge-A,selftest-forge-B -e daemons=$C -e reference=none \
    "$RIG_DIR/guest/suite-forge.sh" > "$RES/console-selftest-forge.log" 2>&1
  expect_fail selftest-forge-A forge-iwpmd no-forged-remote-info-iwpmd
  if want pm; then  # suite pm with siw left in NO_PORT_MAP mode: the port-mapping checks must fail
    "$RIG_DIR/run-2vm.sh" -s "$SHARE" -T 300 -n selftest-pm-plain-A,selftest-pm-plain-B -e portmap=0 \
      -A iwpmd=$RS -B iwpmd=$RS "$RIG_DIR/guest/suite-pm.sh" > "$RES/console-selftest-pm-plain.log" 2>&1
    expect_fail selftest-pm-plain-A portmap listen-mapped dump trace-flags0 trace-mapped trace-requests
    expect_fail selftest-pm-plain-B portmap dump ss-estab hostbind-live trace-flags0 trace-mapped
  fi
  if want fleet && [ -n "$(rig_patches)" ] && [ $FLEET_CTL = 1 ]; then  # suite fleet with the server's peer_auth_required
    # unset (parts 1-2): a stripped REQUEST is then served as a plain one, so p2-strip and
    # p2-instrip must fail
    "$RIG_DIR/run-2vm.sh" -s "$SHARE" -T 300 -w -n selftest-fleet-open-A,selftest-fleet-open-B -e parts=1,2 \
      -A required=0 "$RIG_DIR/guest/suite-fleet.sh" > "$RES/console-selftest-fleet-open.log" 2>&1
    expect_fail selftest-fleet-open-A p2-strip p2-instrip
  fi
fi

# ---- cmtime tables: ours vs C vs no daemon -----------------------------------------------
CMT="$RES/cmtime.txt"; : > "$CMT"
[ -s "$SHARE/out/perf/perf-table.txt" ] && { echo "one VM, cmtime -c 50, daemons untraced, interleaved in one boot (suite perf)"
  sed 's/^/  /' "$SHARE/out/perf/perf-table.txt"; echo; } | tee -a "$SUMMARY" >> "$CMT"
tbl() { [ -s "$1" ] && { echo "$2"; sed 's/^/  /' "$1"; echo; } >> "$CMT"; }
tbl "$SHARE/out/single-ours/cmtime-daemon.txt" "one VM, cmtime -c 50 through OUR iwpmd"
tbl "$SHARE/out/single-c/cmtime-daemon.txt" "one VM, cmtime -c 50 through the C iwpmd"
tbl "$SHARE/out/single-c/cmtime-nodaemon.txt" "one VM, cmtime -c 50 with no daemon (after the C run)"
tbl "$SHARE/out/single-ours/cmtime-nodaemon.txt" "one VM, cmtime -c 50 with no daemon (after our run)"
for p in ours c none; do
  for f in "$SHARE"/out/twovm-*-B/cmtime-perf-$p.txt; do
    tbl "$f" "two VMs, cmtime -c 50, daemons untraced: $p on both sides (timing at the end of $(basename "$(dirname "$f")"))"
  done
done
for p in ours-ours ours-c c-ours c-c; do
  tbl "$SHARE/out/twovm-$p-B/cmtime-across.txt" "two VMs, cmtime -c 50, both daemons under strace: server ${p%-*}, client ${p#*-}"
done
{ echo; echo "== cmtime connect rows (total ms, max ms, us/conn)"
  for f in "$SHARE"/out/*/cmtime-*.txt; do
    [ -s "$f" ] || continue
    r=$(basename "$(dirname "$f")"); k=$(basename "$f" .txt); k=${k#cmtime-}
    case "$r" in selftest-*) continue ;; esac
    awk -v n="$r/$k" '$1=="connect" { s=substr($0, index($0, ":") + 2)
      printf "   %-36s %10.2f %10.2f %12.2f\n", n, substr(s, 1, 11), substr(s, 12, 11), substr(s, 34, 11) }' "$f"
  done; } | tee -a "$SUMMARY" >> "$CMT"

# ---- flood / forge / pairs / trickle comparison tables ------------------------------------------------------
for t in flood:flood/flood-table.txt flood6:flood6/flood6-table.txt forge:forge-A/forge-table.txt pairs:pairs/pairs-table.txt trickle:trickle-B/trickle-table.txt; do
  f="$SHARE/out/${t#*:}"; rm -f "$RES/${t%%:*}.txt"
  [ -s "$f" ] || continue
  cp "$f" "$RES/${t%%:*}.txt"
  { echo; echo "== ${t%%:*} (target/rig/$RIG_KVER/${t%%:*}.txt)"; sed 's/^/  /' "$f"; } | tee -a "$SUMMARY"
done

# ---- restart-load table: ours vs C -------------------------------------------------------
RL="$RES/restart-load.txt"; rm -f "$RL"
rl_rows() {  # label|key, one per line
  cat <<'ROWS'
mappings in the SIGUSR1 dump before the kill|mappings_before
mappings in the SIGUSR1 dump after the restart|mappings_after
mappings lost (before, not after, same mapped port)|mappings_lost
mappings after that were not there before|mappings_extra
MAPINFO records replayed by the kernel|mapinfo_records
MAPINFO_NUM SEND_NUM/ACK_NUM|mapinfo_num
replay: HELLO sent -> MAPINFO_NUM answered, ms|replay_ms
kill -> restarted daemon up, s|kill_to_up_s
loop connects ok/total (kill window)|loop_connects
rigcm connects running at the kill (in flight)|inflight_at_kill
  their connect times, s|inflight_times_s
connects started while no daemon ran|down_connects
loop connects >= stall limit (5 s)|loop_stalls
slowest loop connect, s|loop_max_s
new connects to old listeners ok/total|new_connects
  their times (process start to exit), s|new_times_s
  slowest, s|new_max_s
  rdma_connect -> ESTABLISHED, ms|new_connect_ms
rping -C 3 to an old rping server, s|rping_old_s
REJECTs in the restarted daemon's trace|rejects
mappings left once everything is closed|mappings_end
iwpm kernel lines: kill window / after|dmesg
suite time (guest uptime at the end), s|suite_s
ROWS
}
rl_val() { awk -v k="$2" '$1==k {sub(/^[^ ]* /, ""); print; exit}' "$SHARE/out/$1/restart-load-results.txt" 2>/dev/null; }
if [ -s "$SHARE/out/restart-load-ours/restart-load-results.txt" ] || [ -s "$SHARE/out/restart-load-c/restart-load-results.txt" ]; then
  { echo "kill -9 under load, then restart (suite restart-load): $(rl_val restart-load-ours listener_count) listeners + live rping pairs + connect loops"
    printf '%-52s %-28s %s\n' "" ours C
    rl_rows | while IFS='|' read -r l k; do
      if [ "$k" = dmesg ]; then
        a="$(rl_val restart-load-ours dmesg_kill_window) / $(rl_val restart-load-ours dmesg_after)"
        b="$(rl_val restart-load-c dmesg_kill_window) / $(rl_val restart-load-c dmesg_after)"
      else a=$(rl_val restart-load-ours "$k"); b=$(rl_val restart-load-c "$k"); fi
      printf '%-52s %-28s %s\n' "$l" "${a:--}" "${b:--}"
    done; } > "$RL"
  { echo; echo "== restart-load (target/rig/$RIG_KVER/restart-load.txt)"; sed 's/^/  /' "$RL"; } | tee -a "$SUMMARY"
fi

# ---- verdict ---------------------------------------------------------------------------
NF=0; NP=0; BAD=()
for r in "${RUNS[@]}"; do
  f="$SHARE/out/$r/checks.txt"
  p=$(grep -c '^PASS' "$f"); q=$(grep -c '^FAIL' "$f"); NP=$((NP+p)); NF=$((NF+q))
  [ "$q" -gt 0 ] && BAD+=("$r($q)")
done
say ""
say "== rig total: $NP passed, $NF failed in ${#RUNS[@]} runs; wall $(stamp)"
[ $NF -gt 0 ] && say "== runs with failures: ${BAD[*]}"
# (what the runs cost the host, the rig's real budget under TCG: the sum of their QEMUs' CPU
# time, and the runs that took most)
say "== host CPU in QEMU: $(for r in "${RUNS[@]}"; do vm_cpu "$r" | tr -dc '0-9'; echo " $r"; done |
  sort -rn | awk '{ t += $1; if (NR <= 6) top = top (top ? ", " : "") $2 " " $1 "s" }
                  END { printf "%d s over the runs; most: %s", t, top }')"
say "== results: $RES (summary.txt, cmtime.txt, flood.txt, forge.txt, pairs.txt, trickle.txt, restart-load.txt, share/out/<run>/)"
echo "$NP passed, $NF failed"
[ $NF = 0 ]
