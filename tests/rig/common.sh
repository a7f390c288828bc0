# Host-side settings shared by the rig scripts (sourced, not run).
# RIG_DIR: this folder; REPO: the project root; CACHE: big artefacts (kernel build,
# .debs, initramfs) that never go into git.
RIG_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$RIG_DIR/../.." && pwd)"
CACHE="${RIG_CACHE:-/var/cache/iwpm-rig-project}"
INITRD_DEFAULT="$CACHE/initramfs.cpio.gz"

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
rig_cache_image() { if [ "$RIG_KVER" = 6.1 ]; then echo "$CACHE/bzImage"; else echo "$CACHE/bzImage-$RIG_KVER"; fi; }
rig_kernel_var() { if [ "$RIG_KVER" = 6.1 ]; then echo RIG_KERNEL; else echo "RIG_KERNEL_${RIG_KVER//./_}"; fi; }

# rig_shared_ok: the shared prebuilt image for $RIG_KVER was built from our base fragment,
# and (6.12) its full .config satisfies every line of our overlay.
rig_shared_ok() {
  local img=bzImage full=kernel.config.full ov line sym
  [ "$RIG_KVER" = 6.1 ] || { img="bzImage-$RIG_KVER"; full="kernel.config.full-$RIG_KVER"; }
  [ "${RIG_NO_SHARED:-0}" != 1 ] && [ -f "$SHARED_RIG/$img" ] && [ -f "$SHARED_RIG/siw-rig.config" ] &&
    [ "$(rig_frag_key "$SHARED_RIG/siw-rig.config")" = "$(rig_frag_key "$RIG_DIR/kernel/siw-rig.config")" ] || return 1
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

# rig_kernel: print the kernel image to boot for $RIG_KVER (the explicit one, the shared
# prebuilt one unless RIG_NO_SHARED=1, or the one build-kernel.sh left in the cache);
# empty if none yet.
rig_kernel() {
  local var; var="$(rig_kernel_var)"
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  if rig_shared_ok; then
    if [ "$RIG_KVER" = 6.1 ]; then echo "$SHARED_RIG/bzImage"; else echo "$SHARED_RIG/bzImage-$RIG_KVER"; fi
    return
  fi
  [ -f "$(rig_cache_image)" ] && rig_cache_image
}
