#!/bin/bash
# The NFS tools the storage suite's guests need and the rig's initramfs lacks: rpc.nfsd,
# rpc.mountd and exportfs (nfs-kernel-server), mount.nfs (nfs-common), from Debian's
# packages (downloaded with apt-get download into $RIG_STORAGE_CACHE/nfs-debs, cached),
# with the shared libraries the initramfs does not already hold. They go into the share,
# DIR/bin and DIR/lib, so the initramfs of every other suite stays as it is.
# Usage: tests/rig/storage-tools.sh DIR
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${1:?usage: storage-tools.sh DIR}
SC=${RIG_STORAGE_CACHE:-/var/cache/iwpm-rig-storage}
DEBS=$SC/nfs-debs; ROOT=$SC/nfs-root; IR=$CACHE/initramfs-root; MA=x86_64-linux-gnu
PKGS=(nfs-kernel-server nfs-common libtirpc3 libnfsidmap1 libevent-core-2.1-7 libwrap0 libblkid1 libuuid1 libmount1 libkeyutils1 libnsl2)
want=$(apt-cache policy "${PKGS[@]}" | awk '/^[^ ].*:$/{p=substr($0,1,length($0)-1)} /Candidate:/{printf "%s_%s ", p, $2}')
if [ "$(cat "$ROOT/.pkgs" 2>/dev/null)" != "$want" ]; then
  rm -rf "$DEBS" "$ROOT"; mkdir -p "$DEBS" "$ROOT"
  (cd "$DEBS" && apt-get download "${PKGS[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' | tail -1) >&2
  for d in "$DEBS"/*.deb; do dpkg-deb -x "$d" "$ROOT"; done
  echo "$want" > "$ROOT/.pkgs"
fi
[ -d "$IR" ] || { echo "[storage-tools] no initramfs tree in $IR (run tests/rig/mkinitramfs.sh)" >&2; exit 1; }
rm -rf "$OUT"; mkdir -p "$OUT/bin" "$OUT/lib"
for b in usr/sbin/rpc.nfsd usr/sbin/rpc.mountd usr/sbin/exportfs sbin/mount.nfs; do
  cp "$ROOT/$b" "$OUT/bin/"
  LD_LIBRARY_PATH=$ROOT/lib/$MA:$ROOT/usr/lib/$MA ldd "$ROOT/$b" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [ -e "$IR/lib/$MA/$name" ] || [ -e "$IR/usr/lib/$MA/$name" ] || cp -L "$path" "$OUT/lib/"
done
for f in rpc.nfsd rpc.mountd exportfs mount.nfs; do [ -x "$OUT/bin/$f" ] || { echo "[storage-tools] $f missing" >&2; exit 1; }; done
echo "[storage-tools] $OUT: $(ls "$OUT/bin" | tr '\n' ' ')+ $(ls "$OUT/lib" | wc -l) libraries" >&2
