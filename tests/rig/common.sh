# Host-side settings shared by the rig scripts (sourced, not run).
# RIG_DIR: this folder; REPO: the project root; CACHE: big artefacts (kernel build,
# .debs, initramfs) that never go into git.
RIG_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$RIG_DIR/../.." && pwd)"
CACHE="${RIG_CACHE:-/var/cache/iwpm-rig-project}"
INITRD_DEFAULT="$CACHE/initramfs.cpio.gz"

# The shared team folder beside the repository may carry a prebuilt kernel; it is
# only a shortcut, used when its config fragment is the same as ours.
SHARED_RIG="$REPO/../shared/rig"

# Print the CONFIG_ lines of a fragment, sorted, so comments do not matter.
rig_frag_key() { grep -E '^(CONFIG_|# CONFIG_.* is not set)' "$1" | LC_ALL=C sort; }

# rig_kernel: print the kernel image to boot ($RIG_KERNEL, the shared prebuilt one unless
# RIG_NO_SHARED=1, or the one build-kernel.sh left in the cache); empty if none yet.
rig_kernel() {
  if [ -n "${RIG_KERNEL:-}" ]; then echo "$RIG_KERNEL"; return; fi
  if [ "${RIG_NO_SHARED:-0}" != 1 ] && [ -f "$SHARED_RIG/bzImage" ] && [ -f "$SHARED_RIG/siw-rig.config" ] &&
     [ "$(rig_frag_key "$SHARED_RIG/siw-rig.config")" = "$(rig_frag_key "$RIG_DIR/kernel/siw-rig.config")" ]; then
    echo "$SHARED_RIG/bzImage"; return
  fi
  [ -f "$CACHE/bzImage" ] && echo "$CACHE/bzImage"
}
