#!/bin/bash
# Build (or find in the cache) the root disk of one system-test guest: a Debian release
# made with mmdebstrap from Debian's own packages, with systemd as PID 1, udev, rdma-core,
# rping and iproute2, and a unit that runs the guest test from the 9p share at boot. Our
# package is NOT in the image: the guest test installs it as an operator would.
#
# Usage: tests/system/mkrootfs.sh bookworm|trixie   (prints the image path as its last line)
# Cache: $SYSTEM_CACHE (default /var/cache/iwpm-system)/rootfs-<suite>-<key>.img, where the
# key hashes the suite, the package list and this script with its guest files: a change of
# any of them builds a new image; an older one is removed.
# Mirror: the first deb.debian.org-style URI of the host's apt sources (override with
# SYSTEM_MIRROR=http://.../debian); the security archive is the mirror's host + debian-security.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${SYSTEM_CACHE:-/var/cache/iwpm-system}"
SUITE="${1:?usage: mkrootfs.sh bookworm|trixie}"
case "$SUITE" in bookworm | trixie) ;; *) echo "[mkrootfs] unknown suite $SUITE" >&2; exit 2 ;; esac

PACKAGES=(systemd systemd-sysv udev rdma-core ibverbs-providers rdmacm-utils iproute2 procps
    kmod)

# The Debian mirror apt already uses on this host (DEB822 or one-line sources).
mirror() {
    if [ -n "${SYSTEM_MIRROR:-}" ]; then echo "$SYSTEM_MIRROR"; return; fi
    local m
    m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
        grep -v '^\s*#' | grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ')
    echo "${m:-http://deb.debian.org/debian}"
}
MIRROR="$(mirror)"; MIRROR="${MIRROR%/}"
SECURITY="${MIRROR%/debian}/debian-security"

key=$( { echo "$SUITE"; printf '%s\n' "${PACKAGES[@]}"; cat "$0" "$HERE"/guest/system-test.service; } |
    sha256sum | cut -c1-16)
IMG="$CACHE/rootfs-$SUITE-$key.img"
if [ -f "$IMG" ]; then
    echo "[mkrootfs] $SUITE: cached $IMG" >&2
    echo "$IMG"
    exit 0
fi
command -v mmdebstrap >/dev/null || { echo "[mkrootfs] needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }
command -v mke2fs >/dev/null || { echo "[mkrootfs] needs mke2fs (e2fsprogs)" >&2; exit 2; }
mkdir -p "$CACHE"
tree="$CACHE/tree-$SUITE.$$"
rm -rf "$tree"
trap 'rm -rf "$tree" "$IMG.tmp"' EXIT
t0=$(date +%s)
echo "[mkrootfs] $SUITE from $MIRROR: ${PACKAGES[*]}" >&2
includes=$(IFS=,; echo "${PACKAGES[*]}")
# Hooks, each for a reason met when booting this image under the suite's kernel:
# - fstab: the root is the whole virtio disk; the share carries the test and its results.
# - the tiny kernel caps pid_max at 32768; systemd's sysctl.d raises it and fails: emptied.
# - no virtual consoles: getty@tty1 and getty-static would wait for them.
# - timers and time sync only cost boot time in a throwaway guest.
# - the linker and journal catalog caches are built here, not by every first boot
#   (ldconfig.service and friends run when /usr is newer than /etc/.updated).
mmdebstrap --mode=root --variant=apt --aptopt='APT::Install-Recommends "false"' \
    --include="$includes" \
    --customize-hook='echo system-test > "$1/etc/hostname"' \
    --customize-hook='printf "/dev/vda / ext4 rw,noatime 0 1\nshare /mnt/share 9p trans=virtio,version=9p2000.L,msize=262144 0 0\n" > "$1/etc/fstab"' \
    --customize-hook='mkdir -p "$1/mnt/share"' \
    --customize-hook='echo "# emptied: the test kernel caps pid_max lower" > "$1/etc/sysctl.d/50-pid-max.conf"' \
    --customize-hook="copy-in $HERE/guest/system-test.service /etc/systemd/system/" \
    --customize-hook='chroot "$1" systemctl enable system-test.service' \
    --customize-hook='chroot "$1" systemctl mask getty@tty1.service getty-static.service serial-getty@ttyS0.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer dpkg-db-backup.timer systemd-timesyncd.service 2>/dev/null || true' \
    --customize-hook='chroot "$1" ldconfig; chroot "$1" journalctl --update-catalog; touch "$1/etc/.updated" "$1/var/.updated"' \
    "$SUITE" "$tree" \
    "deb $MIRROR $SUITE main" \
    "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY $SUITE-security main" >&2
t1=$(date +%s)
rm -f "$IMG.tmp"
mke2fs -q -t ext4 -L sysroot -d "$tree" "$IMG.tmp" 2G
mv "$IMG.tmp" "$IMG"
# only the current image of this suite is kept
for old in "$CACHE"/rootfs-"$SUITE"-*.img; do [ "$old" = "$IMG" ] || rm -f "$old"; done
echo "[mkrootfs] $SUITE: mmdebstrap $((t1 - t0)) s, mke2fs $(($(date +%s) - t1)) s -> $IMG" >&2
echo "$IMG"
