#!/bin/bash
# Provide the rig kernel: a small x86_64 bzImage with Soft-iWARP (siw), rdma_cm, uverbs,
# virtio-net and 9p built in (fragment: kernel/siw-rig.config on top of tinyconfig, plus
# kernel/siw-rig-$RIG_KVER.config for series other than 6.1), with the port-mapped-mode
# patches kernel/siw-port-map-$RIG_KVER.patch + kernel/net-force-reuse.patch applied
# when RIG_PATCHES=1 (siw.port_map=0, the default, is plain siw; without RIG_PATCHES=1 the
# kernels are built and taken without them).
#
# Usage: [RIG_KVER=6.1|6.12] tests/rig/build-kernel.sh [-f|--check]   (-f: build from source
#        even if a kernel exists; --check: install and build nothing, print the kernel that
#        is ready and exit 0, or say why none is and exit 3; RIG_BUILD=0 does the same for
#        a normal call, so `cargo test` boots only kernels already there unless
#        IWPM_RIG_SETUP=1)
# Order: the explicit image ($RIG_KERNEL for 6.1, $RIG_KERNEL_6_12 for 6.12) if set; else
# (RIG_PATCHES=1) the prebuilt ../shared/rig/bzImage-pm (bzImage-6.12-pm) when built from the same configuration
# and pinned for the current patches in kernel/prebuilt.txt (RIG_NO_SHARED=1 skips it); else
# $RIG_CACHE/bzImage (bzImage-6.12), built from Debian's linux-source-$RIG_KVER, patched, if
# missing or stale. (Without RIG_PATCHES=1: ../shared/rig/bzImage, $RIG_CACHE/bzImage.plain.) Prints the path of the kernel as its last line.
# Env: RIG_KVER (default 6.1), RIG_CACHE (default /var/cache/iwpm-rig-project), JOBS (default 3),
# RIG_EXTRA_CONFIG (a further fragment kernel/NAME.config after the overlay, e.g. the storage
# suite's or tests/system's; use it with a RIG_CACHE of its own: the image is then not the
# rig's. Instead of the rig's prebuilt image, ../shared/rig/bzImage[-6.12]-NAME-pm is taken
# when kernel/prebuilt.txt pins it for this configuration; RIG_NO_SHARED=1 skips it).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
rig_kver_ok || { echo "[build-kernel] unknown RIG_KVER=$RIG_KVER (known: $RIG_KVERS)" >&2; exit 2; }
JOBS="${JOBS:-3}"
FRAG="$RIG_DIR/kernel/siw-rig.config"
OVERLAY="$(rig_overlay)"
if [ -n "${RIG_EXTRA_CONFIG:-}" ]; then
  mkdir -p "$CACHE"
  cat $OVERLAY "$RIG_EXTRA_CONFIG" > "$CACHE/overlay+extra.config"
  OVERLAY="$CACHE/overlay+extra.config"
fi
IMG="$(rig_cache_image)"
PATCHES="$(rig_patches)"; PKEY="$(rig_patch_key)"
FORCE=0; [ "${1:-}" = "-f" ] && FORCE=1
CHECK=0; { [ "${1:-}" = "--check" ] || [ "${RIG_BUILD:-1}" = 0 ]; } && CHECK=1

if [ $FORCE = 0 ]; then
  k="$(rig_kernel || true)"
  if [ -n "$k" ] && [ "$k" != "$IMG" ]; then
    echo "[build-kernel] using $k" >&2; echo "$k"; exit 0
  fi
fi

# The version of linux-source the image must come from: the installed package, else the
# one apt would install (so a cached image is found up to date without installing it).
srcver() {
  dpkg-query -W -f='${Status} ${Version}\n' "linux-source-$RIG_KVER" 2>/dev/null | sed -n 's/^install ok installed //p' | grep . ||
    apt-cache show --no-all-versions "linux-source-$RIG_KVER" 2>/dev/null | sed -n 's/^Version: //p' | head -1
}
# source version, configuration key (common.sh; the key a prebuilt image is pinned by in
# kernel/prebuilt.txt) and, with the patches, their key
stamp_for() { echo "$1 $(rig_config_key "${RIG_EXTRA_CONFIG:-}")${PKEY:+ patches $PKEY}"; }
STAMP="$IMG.stamp"
if [ $FORCE = 0 ] && [ -f "$IMG" ]; then
  v="$(srcver || true)"
  if [ -n "$v" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$(stamp_for "$v")" ]; then
    echo "[build-kernel] $IMG up to date" >&2; echo "$IMG"; exit 0
  fi
fi
if [ $CHECK = 1 ]; then
  if [ -f "$IMG" ]; then why="$IMG is stale (built from another configuration or linux-source-$RIG_KVER)"
  else why="no prebuilt image and none in $CACHE"; fi
  echo "[build-kernel] no Linux $RIG_KVER rig kernel ready: $why; building one installs linux-source-$RIG_KVER and the kernel build tools with apt-get and takes tens of minutes" >&2
  exit 3
fi

need_pkgs=(linux-source-$RIG_KVER build-essential flex bison bc libelf-dev libssl-dev xz-utils cpio)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[build-kernel] installing: ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2 || {
    apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2; }
fi

TARBALL="$(ls /usr/src/linux-source-$RIG_KVER.tar.xz)"
SRCVER="$(dpkg-query -W -f='${Version}' linux-source-$RIG_KVER)"
SRC="$CACHE/linux-source-$RIG_KVER"
if [ "$RIG_KVER" = 6.1 ]; then OBJ="$CACHE/kbuild"; FULLCFG="$CACHE/kernel.config.full"
else OBJ="$CACHE/kbuild-$RIG_KVER"; FULLCFG="$CACHE/kernel.config.full-$RIG_KVER"; fi
mkdir -p "$CACHE"
want_stamp="$(stamp_for "$SRCVER")"
if [ $FORCE = 0 ] && [ -f "$IMG" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want_stamp" ]; then
  echo "[build-kernel] $IMG up to date" >&2; echo "$IMG"; exit 0
fi

# the source tree as extracted (+ the patches: its stamp names them), else extracted again
want_src="$SRCVER${PKEY:+ patches $PKEY}"
if [ ! -f "$SRC/.rig-srcver" ] || [ "$(cat "$SRC/.rig-srcver")" != "$want_src" ]; then
  echo "[build-kernel] extracting $TARBALL ($SRCVER)" >&2
  rm -rf "$SRC" "$OBJ"
  tar -C "$CACHE" -xf "$TARBALL"
  for p in $PATCHES; do
    echo "[build-kernel] applying $(basename "$p")" >&2
    patch -d "$SRC" -p1 -s --forward < "$p" || { echo "[build-kernel] $p does not apply to $SRCVER" >&2; rm -rf "$SRC"; exit 1; }
  done
  echo "$want_src" > "$SRC/.rig-srcver"
fi

mkdir -p "$OBJ"
cd "$SRC"
export ARCH=x86_64
make O="$OBJ" -s tinyconfig >&2
scripts/kconfig/merge_config.sh -m -O "$OBJ" "$OBJ/.config" "$FRAG" $OVERLAY >/dev/null
make O="$OBJ" -s olddefconfig >&2

# Every =y of the fragment must survive dependency resolution.
bad=0
while IFS= read -r line; do
  case "$line" in CONFIG_*=y)
    grep -qx "$line" "$OBJ/.config" || { echo "[build-kernel] NOT SET: $line" >&2; bad=1; } ;;
  esac
done < <(cat "$FRAG" $OVERLAY)
grep -q '^CONFIG_MODULES=y' "$OBJ/.config" && { echo "[build-kernel] CONFIG_MODULES unexpectedly on" >&2; bad=1; }
[ $bad = 0 ] || { echo "[build-kernel] config check failed" >&2; exit 1; }
cp "$OBJ/.config" "$FULLCFG"

echo "[build-kernel] building bzImage with -j$JOBS ..." >&2
t0=$(date +%s)
make O="$OBJ" -j"$JOBS" bzImage >&2
cp "$OBJ/arch/x86/boot/bzImage" "$IMG"
echo "$want_stamp" > "$STAMP"
echo "[build-kernel] built in $(( $(date +%s) - t0 )) s: $IMG" >&2
echo "$IMG"
