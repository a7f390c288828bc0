# Host-side settings shared by the rig scripts (sourced, not run).
# RIG_DIR: this folder; REPO: the project root; CACHE: big artefacts (kernel build,
# .debs, initramfs) that never go into git.
RIG_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$RIG_DIR/../.." && pwd)"
CACHE="${RIG_CACHE:-/var/cache/iwpm-rig-project}"
INITRD_DEFAULT="$CACHE/initramfs.cpio"

# Which kernel series the rig boots: 6.1 (Debian 12, the default) or 6.12 (Debian 13).
RIG_KVER="${RIG_KVER:-6.1}"
RIG_KVERS="6.1 6.12"   # every series the rig knows, in run order

# The shared team folder beside the repository may carry prebuilt kernels; they are
# only a shortcut, used when built from the same configuration as ours.
SHARED_RIG="$REPO/../shared/rig"

# Print the CONFIG_ lines of a fragment, sorted, so comments do not matter.
rig_frag_key() { grep -E '^(CONFIG_|# CONFIG_.* is not set)' "$1" | LC_ALL=C sort; }

# rig_kver_ok: is $RIG_KVER one we know?
rig_kver_ok() { case " $RIG_KVERS " in *" $RIG_KVER "*) return 0 ;; esac; return 1; }

# Per-series names: the overlay fragment (none for 6.1), the cached image, the shared
# prebuilt image and the variable that names an explicit image (RIG_KERNEL for 6.1,
# RIG_KERNEL_6_12 for 6.12).
rig_overlay() { [ "$RIG_KVER" = 6.1 ] || echo "$RIG_DIR/kernel/siw-rig-$RIG_KVER.config"; }
rig_cache_image() {  # (unpatched, RIG_PATCHES=0: bzImage.plain, bzImage-6.12.plain)
  local n=bzImage; [ "$RIG_KVER" = 6.1 ] || n="bzImage-$RIG_KVER"
  [ -n "$(rig_patches)" ] || n="$n.plain"
  echo "$CACHE/$n"
}
rig_kernel_var() { if [ "$RIG_KVER" = 6.1 ]; then echo RIG_KERNEL; else echo "RIG_KERNEL_${RIG_KVER//./_}"; fi; }

# ---- kernel patches (port-mapped mode, kernel/*.patch) ----------------------------------
# The rig's kernels carry kernel/siw-port-map-$RIG_KVER.patch and kernel/net-force-reuse.patch:
# siw gains a port_map parameter (default 0: plain siw, IW_F_NO_PORT_MAP); with 1 written to
# /sys/module/siw/parameters/port_map before `rdma link add` the device runs iw_cm's
# port-mapped path like a hardware RNIC (suites pm, pmops, zerogap-pm). One image serves
# both modes: with port_map 0 the patched siw is plain siw, so every suite boots the patched
# kernels (RIG_PATCHES=1, the default); RIG_PATCHES=0 boots and builds the unpatched ones
# (cache names bzImage.plain*), where the port-mapped suites cannot run.
rig_patches() {
  [ "${RIG_PATCHES:-1}" = 1 ] || return 0
  echo "$RIG_DIR/kernel/siw-port-map-$RIG_KVER.patch $RIG_DIR/kernel/net-force-reuse.patch"
}
# rig_patch_key: one hash over the patches' contents, in order ("" without patches)
rig_patch_key() {
  local p; p="$(rig_patches)"; [ -n "$p" ] || return 0
  # shellcheck disable=SC2086
  cat $p | sha256sum | cut -c1-16
}
# Prebuilt patched images of the team folder that were checked to be the rig's configuration
# with patches of the same effect as ours (kernel/prebuilt.txt: series, image sha256, the
# rig_patch_key they stand for). A changed patch changes the key: the image is then no
# longer taken and build-kernel.sh builds from source.
rig_shared_name() {
  local n=bzImage; [ "$RIG_KVER" = 6.1 ] || n="bzImage-$RIG_KVER"
  if [ -n "$(rig_patches)" ]; then echo "$n-pm"; else echo "$n"; fi
}
rig_shared_pinned() {  # the shared image of $RIG_KVER is listed with the current patch key
  local img="$SHARED_RIG/$(rig_shared_name)" h
  [ -z "$(rig_patches)" ] && return 0
  h=$(sha256sum "$img" | cut -d' ' -f1)
  grep -qx "$RIG_KVER $h $(rig_patch_key)" <(grep -v '^#' "$RIG_DIR/kernel/prebuilt.txt" 2>/dev/null)
}

# rig_shared_ok: the shared prebuilt image for $RIG_KVER was built from our base fragment,
# and (6.12) its full .config satisfies every line of our overlay, and (patched, the default)
# it is pinned in kernel/prebuilt.txt for the current patches.
rig_shared_ok() {
  local img full=kernel.config.full ov line sym
  img="$(rig_shared_name)"
  [ "$RIG_KVER" = 6.1 ] || full="kernel.config.full-$RIG_KVER"
  [ "${RIG_NO_SHARED:-0}" != 1 ] && [ -f "$SHARED_RIG/$img" ] && [ -f "$SHARED_RIG/siw-rig.config" ] &&
    [ "$(rig_frag_key "$SHARED_RIG/siw-rig.config")" = "$(rig_frag_key "$RIG_DIR/kernel/siw-rig.config")" ] || return 1
  rig_shared_pinned || return 1
  ov="$(rig_overlay)"; [ -n "$ov" ] || return 0
  [ -f "$SHARED_RIG/$full" ] || return 1
  while IFS= read -r line; do
    case "$line" in
      CONFIG_*=*) grep -qx "$line" "$SHARED_RIG/$full" || return 1 ;;
      "# CONFIG_"*" is not set") sym=${line#\# }; sym=${sym%% *}; grep -q "^$sym=" "$SHARED_RIG/$full" && return 1 ;;
    esac
  done < "$ov"
  return 0
}

# rig_config_key [EXTRA]: the configuration's key in a build stamp (build-kernel.sh): the
# base fragment's lines, then (when there are any) the series overlay's and EXTRA's
# (RIG_EXTRA_CONFIG) together, each sorted, hashed.
rig_config_key() {
  local ov; ov="$(rig_overlay) ${1:-}"
  { rig_frag_key "$RIG_DIR/kernel/siw-rig.config"
    # shellcheck disable=SC2086
    [ -z "${ov// /}" ] || { echo "--"; cat $ov | rig_frag_key /dev/stdin; }
  } | sha256sum | cut -d' ' -f1
}

# rig_shared_extra: print the team folder's prebuilt image for $RIG_KVER built with the
# fragment RIG_EXTRA_CONFIG=kernel/NAME.config (bzImage-NAME-pm, bzImage-6.12-NAME-pm), when
# kernel/prebuilt.txt pins it by its sha256, the current patch key and the key of our
# configuration with that fragment (rig_config_key): an edit of the base fragment, the
# overlay, NAME.config or a patch changes a key and the image is no longer taken (the
# caller builds instead). Nothing without the patches or with RIG_NO_SHARED=1.
rig_shared_extra() {
  local x n img h
  [ "${RIG_NO_SHARED:-0}" != 1 ] && [ -n "${RIG_EXTRA_CONFIG:-}" ] && [ -n "$(rig_patches)" ] || return 1
  x=$(basename "$RIG_EXTRA_CONFIG" .config)
  n=bzImage; [ "$RIG_KVER" = 6.1 ] || n="bzImage-$RIG_KVER"
  img="$SHARED_RIG/$n-$x-pm"
  [ -f "$img" ] || return 1
  h=$(sha256sum "$img" | cut -d' ' -f1)
  grep -qx "$RIG_KVER $h $(rig_patch_key) $x $(rig_config_key "$RIG_EXTRA_CONFIG")" \
    <(grep -v '^#' "$RIG_DIR/kernel/prebuilt.txt" 2>/dev/null) || return 1
  echo "$img"
}

# rig_kernel: print the kernel image to boot for $RIG_KVER (the explicit one, the shared
# prebuilt one unless RIG_NO_SHARED=1 — with RIG_EXTRA_CONFIG the one pinned for that
# fragment —, or the one build-kernel.sh left in the cache); empty if none yet.
rig_kernel() {
  local var; var="$(rig_kernel_var)"
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  if [ -n "${RIG_EXTRA_CONFIG:-}" ]; then rig_shared_extra && return
  elif rig_shared_ok; then echo "$SHARED_RIG/$(rig_shared_name)"; return; fi
  [ -f "$(rig_cache_image)" ] && rig_cache_image
}
