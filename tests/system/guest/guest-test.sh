#!/bin/bash
# The system test inside the guest (Debian with systemd as PID 1), started at boot by
# system-test.service from the 9p share (/mnt/share). Two phases, one per boot; the phase
# file on the guest's disk says which, and each phase powers the guest off at its end.
#   phase 1: install our .deb over rdma-core (diversions); udev starts the service on
#            `rdma link add`; the sandbox; the netns guard; rping and the SIGUSR1 dump;
#            port-mapped mappings stay bound through `systemctl restart` and kill -9 (the
#            FD store); the watchdog; status line and iwpmctl agree; the netns guard
#            refuses a foreign namespace under the unit; security exposure; the service
#            stops when unneeded; iwpmd-always.target enabled
#   phase 2: the target starts the service at boot; `apt remove` hands over to rdma-core's
#            daemon at once (it serves rping); purge leaves nothing behind
# Results: /mnt/share/out/results.txt, one "PASS name: detail" or "FAIL name: detail"
# line per check, "DONE phase N" at the end of each phase; the log in phaseN.log.
# Share: guest-test.sh, iwpmd-rs.deb, bindprobe, optionally unit-override.service (the
# self-test: an older unit put in /etc/systemd/system in place of the packaged one).
set -u
SHARE=/mnt/share; OUT=$SHARE/out; mkdir -p "$OUT"
PHASE_FILE=/var/lib/system-test-phase; PHASE=$(cat $PHASE_FILE 2>/dev/null || echo 1)
exec > >(tee -a "$OUT/phase$PHASE.log") 2>&1
export SYSTEMD_PAGER='' SYSTEMD_COLORS=0 PAGER=cat DEBIAN_FRONTEND=noninteractive
PATH=$SHARE:$PATH
IP=10.88.0.1; PEER_IP=10.88.0.2
BOOT_MARK=$(date '+%Y-%m-%d %H:%M:%S')

say() { echo "== $* [uptime $(cut -d' ' -f1 /proc/uptime)]"; }
# check NAME DETAIL CMD...: PASS if CMD succeeds
check() {
    local name=$1 detail=$2; shift 2
    if "$@"; then echo "PASS $name: $detail" | tee -a "$OUT/results.txt"
    else echo "FAIL $name: $detail" | tee -a "$OUT/results.txt"; fi
}
finish() {
    echo "$1" > $PHASE_FILE
    journalctl -b --no-pager -o short-monotonic > "$OUT/journal-phase$PHASE.txt" 2>&1
    echo "DONE phase $PHASE" | tee -a "$OUT/results.txt"
    # (a reboot ends the QEMU run: -no-reboot; the kernel has no ACPI to power off)
    sync; systemctl reboot; exit 0
}
main_pid() { systemctl show -p MainPID --value iwpmd.service; }
# wait_for SECS CMD...: until CMD succeeds, for at most SECS seconds (0.2 s pauses)
wait_for() {
    local end=$((SECONDS + $1)); shift
    while true; do
        "$@" && return 0
        [ $SECONDS -lt "$end" ] || return 1
        sleep 0.2
    done
}
is_active() { [ "$(systemctl is-active iwpmd.service)" = active ]; }
pid_changed_and_active() { local p; p=$(main_pid); [ "$p" != 0 ] && [ "$p" != "$1" ] && is_active; }
journal_since() { journalctl --since "$1" --no-pager -o cat "${@:2}"; }
net_up() {
    echo 1 > /sys/module/siw/parameters/port_map 2>/dev/null
    ip link add veth0 type veth peer name veth1
    ip addr add $IP/24 dev veth0; ip addr add $PEER_IP/24 dev veth1
    ip link set veth0 up; ip link set veth1 up
    rdma link add siw0 type siw netdev veth0
}
rping_once() {  # rping_once TAG PORT: a 10-ping exchange through whatever daemon runs
    rping -s -a $IP -p "$2" -C 10 > "$OUT/rping-$1-s.log" 2>&1 & local sp=$!
    sleep 1
    timeout 60 rping -c -a $IP -p "$2" -C 10 -v > "$OUT/rping-$1-c.log" 2>&1; local rc=$?
    [ $rc = 0 ] || kill $sp 2>/dev/null
    wait $sp; local src=$?
    [ $rc = 0 ] && [ $src = 0 ] && [ "$(grep -c 'ping data' "$OUT/rping-$1-c.log")" = 10 ]
}
# the rows of `iwpmctl list` (LOCAL MAPPED ...), and their mapped ports
list_rows() { iwpmctl list 2>/dev/null | awk '$2 ~ /:[0-9]+$/'; }
mapped_ports() { list_rows | awk '{ sub(/.*:/, "", $2); print $2 }' | sort -n | tr '\n' ' '; }
status_count() { iwpmctl --json status | grep -o '"mappings": *[0-9]*' | head -1 | grep -o '[0-9]*$'; }
status_text() { systemctl show -p StatusText --value iwpmd.service; }
# the status line names the count iwpmctl reports (both read after the 1 s status interval)
status_agrees() { sleep 1.5; [ "$(status_text)" = "serving $(status_count) mappings" ]; }

say "phase $PHASE: $(systemctl --version | head -1), kernel $(uname -r)"
wait_for 60 sh -c '[ "$(systemctl is-system-running)" != starting ]'
systemd-analyze || true
SYSTEMD_VERSION=$(systemctl --version | awk 'NR == 1 { print $2 }')

if [ "$PHASE" = 1 ]; then
    say "install"
    cp $SHARE/iwpmd-rs.deb /root/iwpmd-rs.deb
    apt-get install -y /root/iwpmd-rs.deb > "$OUT/apt-install.log" 2>&1
    check install "apt-get install ./iwpmd-rs.deb" sh -c "dpkg-query -W -f='\${Status}' iwpmd-rs | grep -q 'install ok installed'"
    dpkg-divert --list 'iwpmd*' | sort | tee "$OUT/diversions.txt"
    ours=$(grep -c 'by iwpmd-rs' "$OUT/diversions.txt")
    check divert "$ours diversions by iwpmd-rs; rdma-core's daemon, unit and rule put aside" \
        sh -c "[ $ours -ge 5 ] && [ -x /usr/sbin/iwpmd.rdma-core ] && /usr/sbin/iwpmd --version | grep -q '^iwpmd ' \
            && grep -q 'Rust iwpmd' /usr/lib/systemd/system/iwpmd.service \
            && ls /usr/lib/systemd/system/iwpmd.service.rdma-core* /usr/lib/udev/rules.d/90-iwpmd.rules.rdma-core* >/dev/null"
    # rdma-core's files are intact where dpkg now keeps them (on a merged-/usr system a
    # diversion of only the /lib name would leave the /usr/lib one, rdma-core's, ours)
    dpkg --verify rdma-core > "$OUT/verify-rdma-core.txt" 2>&1
    check divert-verify "dpkg --verify rdma-core while diverted: '$(tr '\n' ';' < "$OUT/verify-rdma-core.txt")'" \
        test ! -s "$OUT/verify-rdma-core.txt"
    if [ -f $SHARE/unit-override.service ]; then
        cp $SHARE/unit-override.service /etc/systemd/system/iwpmd.service
        systemctl daemon-reload
        echo "NOTE unit replaced by unit-override.service (self-test)" | tee -a "$OUT/results.txt"
    fi
    check idle "not running before an iWARP device exists" sh -c '! systemctl is-active --quiet iwpmd.service'

    say "udev start"
    net_up
    check portmap "siw in port-mapped mode: port_map=$(cat /sys/module/siw/parameters/port_map 2>&1)" \
        grep -qx Y /sys/module/siw/parameters/port_map
    check udev-start "rdma link add siw0 starts iwpmd.service (udev)" wait_for 30 is_active
    P=$(main_pid)
    grep -E 'Cap(Eff|Prm|Bnd)|NoNewPrivs|Seccomp:' /proc/$P/status | tee "$OUT/sandbox.txt"
    check sandbox "CapEff 0x1000 (CAP_NET_ADMIN), NoNewPrivs 1, Seccomp 2" \
        sh -c "grep -q 'CapEff:.*0000000000001000' $OUT/sandbox.txt && grep -q 'NoNewPrivs:.*1' $OUT/sandbox.txt && grep -q 'Seccomp:.*2' $OUT/sandbox.txt"
    check netns-initial "the netns guard decided (no 'cannot tell the network namespace')" \
        sh -c "! journalctl -b -u iwpmd --no-pager -o cat | grep -q 'cannot tell the network namespace'"
    systemctl show iwpmd -p FileDescriptorStoreMax -p WatchdogUSec -p ExecStart | tee "$OUT/unit-show.txt"

    say "rping, live port-mapped mappings, dump"
    check rping "rping -C 10 through our daemon" rping_once ours 7700
    rping -s -P -a $IP -p 7701 > "$OUT/rping-live-s1.log" 2>&1 &
    rping -s -P -a $IP -p 7702 > "$OUT/rping-live-s2.log" 2>&1 &
    rping -s -P -a $IP -p 7703 > "$OUT/rping-live-s3.log" 2>&1 &
    sleep 1
    # a connection that lives through the restarts (rping has no pause option: a long count)
    rping -c -a $IP -p 7701 -C 100000000 > "$OUT/rping-live-c1.log" 2>&1 &
    LIVE_CLIENT=$!
    wait_for 20 sh -c "[ \$(iwpmctl list 2>/dev/null | awk '\$2 ~ /:[0-9]+\$/' | wc -l) -ge 4 ]"
    list_rows | tee "$OUT/list-before.txt"
    PORTS=$(mapped_ports)
    check mapped "port-mapped mappings live (3 listeners, a connection): mapped ports $PORTS" \
        sh -c "[ \$(echo $PORTS | wc -w) -ge 4 ] && awk '{ a = \$1; b = \$2; sub(/.*:/, \"\", a); sub(/.*:/, \"\", b); if (a == b) bad = 1 } END { exit bad }' $OUT/list-before.txt"
    check hostbind "a host bind of each mapped port fails while the daemon runs" bindprobe $PORTS
    since=$(date '+%Y-%m-%d %H:%M:%S'); kill -USR1 "$(main_pid)"; sleep 2
    dumped=$(journal_since "$since" -u iwpmd | grep -c 'Mapping #')
    listed=$(wc -l < "$OUT/list-before.txt")
    check dump "SIGUSR1 dump lists $dumped mappings, iwpmctl list $listed" test "$dumped" = "$listed"
    check status-live "StatusText '$(status_text)', iwpmctl status $(status_count)" status_agrees

    say "restart and kill -9 with live mappings (FD store)"
    rm -f /tmp/probe.stop
    bindprobe -u /tmp/probe.stop $PORTS > "$OUT/bindprobe-restart.txt" 2>&1 & PROBE=$!
    sleep 0.5
    since=$(date '+%Y-%m-%d %H:%M:%S'); OLD=$(main_pid)
    systemctl restart iwpmd.service
    wait_for 30 pid_changed_and_active "$OLD"; sleep 1
    MID=$(main_pid); stored_restart=$(systemctl show -p NFileDescriptorStore --value iwpmd.service)
    kill -9 "$MID"
    wait_for 30 pid_changed_and_active "$MID"; sleep 1
    NEW=$(main_pid); stored=$(systemctl show -p NFileDescriptorStore --value iwpmd.service)
    touch /tmp/probe.stop; wait $PROBE; probe_rc=$?
    cat "$OUT/bindprobe-restart.txt"
    journal_since "$since" -u iwpmd > "$OUT/journal-restart.txt"
    inherited=$(grep -o 'inherited_ports=[0-9]*' "$OUT/journal-restart.txt" | tr '\n' ' ')
    check fdstore-restart "systemd $SYSTEMD_VERSION: MainPID $OLD -> $MID (restart) -> $NEW (kill -9); \
every mapped port stayed bound ($(tail -1 "$OUT/bindprobe-restart.txt")); FD store held $stored_restart then $stored; $inherited" \
        sh -c "[ $probe_rc = 0 ] && [ '${stored:-0}' -ge 4 ] && [ '$NEW' != '$MID' ]"
    iwpmctl list > "$OUT/list-after.txt"
    check mappings-kept "the same mapped ports after both restarts" test "$(mapped_ports)" = "$PORTS"
    check live-client "the live rping client survived both restarts" kill -0 $LIVE_CLIENT

    say "watchdog; mappings that end while no daemon runs"
    wd=$(systemctl show -p WatchdogUSec --value iwpmd.service)
    # the two listeners that stay: their mapped ports must survive the recovery
    KEEP=$(awk '$1 ~ /:770[12]$/ { sub(/.*:/, "", $2); print $2 }' "$OUT/list-before.txt" | sort -n | tr '\n' ' ')
    since=$(date '+%Y-%m-%d %H:%M:%S'); OLD=$(main_pid); t0=$(date +%s)
    kill -STOP "$OLD"
    # the connection and the third listener end while the daemon is stopped: the next one
    # restores them from the FD store and the state file, and frees them once the
    # kernel's replay does not list them
    # (not waited for: a process that ends an iWARP connection may sit in the kernel
    # until a daemon answers)
    sleep 1; kill -9 $LIVE_CLIENT "$(pgrep -f 'rping -s -P -a .* -p 7703')"
    echo "killed the client and the third listener while the daemon is stopped"
    wait_for 60 pid_changed_and_active "$OLD"
    t1=$(date +%s)
    check watchdog "WatchdogUSec=$wd: SIGSTOP'd daemon $OLD replaced by $(main_pid) after $((t1 - t0)) s" \
        sh -c "journalctl --since '$since' --no-pager -o cat | grep -qi 'watchdog timeout' && [ '$(main_pid)' != '$OLD' ]"
    check mappings-after-watchdog "after the watchdog restart only the live listeners' mapped ports remain: $KEEP" \
        wait_for 20 sh -c "[ \"\$(iwpmctl list 2>/dev/null | awk '\$2 ~ /:[0-9]+\$/ { sub(/.*:/, \"\", \$2); print \$2 }' | sort -n | tr '\n' ' ')\" = '$KEEP' ]"
    check status-recovered "after the recovery: StatusText '$(status_text)', iwpmctl status $(status_count)" status_agrees
    journal_since "$since" -u iwpmd > "$OUT/journal-watchdog.txt"

    say "mappings end"
    pkill -x rping; sleep 2
    wait_for 10 sh -c '[ -z "$(iwpmctl list 2>/dev/null | awk "\$2 ~ /:[0-9]+\$/")" ]'
    check status-idle "after the mappings ended: StatusText '$(status_text)', iwpmctl status $(status_count)" status_agrees

    say "netns guard under the unit"
    ip netns add other
    mkdir -p /run/systemd/system/iwpmd.service.d
    printf '[Service]\nNetworkNamespacePath=/run/netns/other\nRestart=no\n' > /run/systemd/system/iwpmd.service.d/netns.conf
    systemctl daemon-reload; since=$(date '+%Y-%m-%d %H:%M:%S')
    systemctl restart iwpmd.service; sleep 3
    journal_since "$since" -u iwpmd > "$OUT/journal-netns.txt"
    check netns-refused "started in another network namespace, the daemon refuses: $(grep -o 'not in the initial network namespace[^:]*' "$OUT/journal-netns.txt" | head -1)" \
        sh -c "grep -q 'not in the initial network namespace' $OUT/journal-netns.txt && ! systemctl is-active --quiet iwpmd.service"
    rm -rf /run/systemd/system/iwpmd.service.d; systemctl daemon-reload
    systemctl reset-failed iwpmd.service; systemctl start iwpmd.service
    check netns-back "started again in the initial namespace" wait_for 20 is_active

    say "sandbox log, security"
    # the daemon's own lines, and systemd's about the unit (a seccomp kill is status=31/SYS)
    journalctl -b -u iwpmd --no-pager -o cat > "$OUT/journal-iwpmd.txt"
    journalctl -k -b --no-pager -o cat > "$OUT/dmesg.txt"
    check no-eperm "no EPERM/SIGSYS lines from or about the daemon, no seccomp audit record" \
        sh -c "! grep -Ei 'operation not permitted|EPERM|SIGSYS|31/SYS|bad system call' $OUT/journal-iwpmd.txt && ! grep -E 'audit: type=1326' $OUT/dmesg.txt"
    systemd-analyze security iwpmd.service --no-pager > "$OUT/security.txt" 2>&1
    exposure=$(sed -n 's/.*Overall exposure level for iwpmd.service: \([0-9.]*\).*/\1/p' "$OUT/security.txt")
    check security "systemd-analyze security: exposure ${exposure:-none} (limit 2.5)" \
        awk -v e="${exposure:-99}" 'BEGIN { exit !(e <= 2.5) }'

    say "stop when unneeded; always-on target"
    rdma link delete siw0
    check stop-unneeded "iwpmd.service stops once siw0 is gone" wait_for 20 sh -c '! systemctl is-active --quiet iwpmd.service'
    systemctl enable --now iwpmd-always.target
    check always-now "enable --now iwpmd-always.target starts it without a device" wait_for 20 is_active
    finish 2
fi

if [ "$PHASE" = 2 ]; then
    check always-boot "after the reboot iwpmd-always.target started iwpmd at boot" wait_for 20 is_active
    check netns-initial-boot "at boot too the netns guard decided" \
        sh -c "! journalctl -b -u iwpmd --no-pager -o cat | grep -q 'cannot tell the network namespace'"
    net_up; sleep 2
    check rping-boot "rping through our daemon started at boot" rping_once boot 7710

    say "apt remove"
    apt-get remove -y iwpmd-rs > "$OUT/apt-remove.log" 2>&1
    P=$(main_pid); exe=$(readlink /proc/"$P"/exe 2>&1)
    echo "after remove: $(systemctl is-active iwpmd.service), MainPID $P, exe $exe"
    check handover "at once after apt remove: iwpmd.service active, MainPID $P runs $exe (rdma-core's)" \
        sh -c "systemctl is-active --quiet iwpmd.service && [ '$exe' = /usr/sbin/iwpmd ] && cmp -s /proc/$P/exe /usr/sbin/iwpmd && dpkg -S /usr/sbin/iwpmd | grep -q '^rdma-core:'"
    check undivert "no diversions left; rdma-core's unit and rule back" \
        sh -c "[ -z \"\$(dpkg-divert --list 'iwpmd*')\" ] && ! grep -q 'Rust iwpmd' /usr/lib/systemd/system/iwpmd.service && dpkg --verify rdma-core"
    check rping-rdma-core "rping through rdma-core's daemon" rping_once c 7720

    say "purge"
    apt-get purge -y iwpmd-rs > "$OUT/apt-purge.log" 2>&1
    left=$(ls -d /var/lib/iwpmd /var/lib/iwpmd-rs /run/iwpmd/state /etc/systemd/system/sysinit.target.wants/iwpmd-always.target \
        /etc/systemd/system/*/iwpmd-always.target 2>/dev/null | tr '\n' ' ')
    check purge "nothing left after purge: '${left}'" \
        sh -c "[ -z '$left' ] && ! dpkg -l iwpmd-rs 2>/dev/null | grep -q '^[ir]' && dpkg --verify rdma-core"
    finish 3
fi
echo "phase $PHASE: nothing to do"
systemctl reboot
