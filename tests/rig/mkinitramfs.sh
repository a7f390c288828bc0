#!/bin/bash
# Build the rig's initramfs: busybox-static + C iwpmd + rdmacm-utils + ibverbs-utils
# + rdma (iproute2) + strace + siw userspace provider + all shared libraries
# (resolved with the packaged glibc loader) + the rig's own tools (tools/*.c: rigtool,
# rigflood static; rigcm against the packaged librdmacm), plus an /init that mounts the
# host 9p share and runs a guest test script non-interactively.
#
# Usage: tests/rig/mkinitramfs.sh [-f] [-o OUT.cpio] [-a SRC[:DEST]]...
#   -f  repack even if nothing changed
#   -o  output (default: $RIG_CACHE/initramfs.cpio)
#   -a  extra file to include at DEST (default /usr/local/bin/BASENAME); ELF
#       files get their shared libraries added too (e.g. a Rust iwpmd).
# Guest test scripts are NOT baked in: run-vm.sh passes them through the 9p share.
# The image is not compressed: under TCG the kernel took 3 s of each boot to gunzip it
# (8 MB gzip, 19 MB plain), about 1.9 s of CPU per boot more than reading it plain, and
# the rig boots some 120 VMs per run.
# Idempotent: the .debs, the unpacked tree and the packed image are cached under
# $RIG_CACHE and reused while package versions and inputs are unchanged.
# Env: RIG_CACHE (default /var/cache/iwpm-rig-project)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
HERE="$RIG_DIR"
OUT="$INITRD_DEFAULT"
FORCE=0
EXTRA=()
while getopts "fo:a:h" o; do
  case $o in
    f) FORCE=1 ;; o) OUT="$OPTARG" ;; a) EXTRA+=("$OPTARG") ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
  esac
done

MA=x86_64-linux-gnu
# Packages whose files we need, plus their library dependencies (closure computed below).
TOP=(busybox-static rdma-core rdmacm-utils ibverbs-utils ibverbs-providers iproute2 strace)
DEBS="$CACHE/debs"; PKG="$CACHE/pkgroot"; ROOT="$CACHE/initramfs-root"
mkdir -p "$DEBS"

# ---- 1. download + extract Debian packages (cached) -------------------------
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances --no-pre-depends "${TOP[@]}" 2>/dev/null \
      | grep -v '^ ' | grep -v '^<' | sort -u \
      | grep -E '^(lib|zlib1g$|busybox-static$|rdma-core$|rdmacm-utils$|ibverbs-|iproute2$|strace$)' \
      | grep -vE '^(libelogind0|libpam|libdebian-installer|libnewt|libslang|libtextwrap|libsemanage|libaudit|libcap-ng|libreadline|libacl1|libblkid1|libkmod2|libcrypt1|libbz2)' || true)
if [ -z "$pkgs" ]; then   # fresh machine: package lists not there yet
  echo "[mkinitramfs] apt-cache knows no packages; running apt-get update" >&2
  apt-get update >&2
  pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
          --no-breaks --no-replaces --no-enhances --no-pre-depends "${TOP[@]}" 2>/dev/null \
        | grep -v '^ ' | grep -v '^<' | sort -u \
        | grep -E '^(lib|zlib1g$|busybox-static$|rdma-core$|rdmacm-utils$|ibverbs-|iproute2$|strace$)' \
        | grep -vE '^(libelogind0|libpam|libdebian-installer|libnewt|libslang|libtextwrap|libsemanage|libaudit|libcap-ng|libreadline|libacl1|libblkid1|libkmod2|libcrypt1|libbz2)' || true)
fi
[ -n "$pkgs" ] || { echo "[mkinitramfs] apt-cache gave no packages" >&2; exit 1; }
# one apt-cache call: "pkg_candidateversion" for every package (cache key)
want=$(apt-cache policy $pkgs | awk '/^[^ ].*:$/{p=substr($0,1,length($0)-1)} /Candidate:/{printf "%s_%s ", p, $2}')
if [ "$(cat "$PKG/.rig-pkgs" 2>/dev/null)" != "$want" ]; then
  echo "[mkinitramfs] downloading $(echo $pkgs | wc -w) packages into $DEBS"
  rm -f "$DEBS"/*.deb
  (cd "$DEBS" && apt-get download $pkgs 2>&1 | grep -v '^W: Download is performed unsandboxed' | tail -2)
  rm -rf "$PKG"; mkdir -p "$PKG"
  for d in "$DEBS"/*.deb; do dpkg-deb -x "$d" "$PKG"; done
  echo "$want" > "$PKG/.rig-pkgs"
fi

# ---- 1b. host-built helpers: static tools/rigtool.c, rigflood.c and rigfdstore.c ------
command -v gcc >/dev/null || { echo "[mkinitramfs] gcc needed for tools/*.c" >&2; exit 1; }
TOOL="$CACHE/rigtool"; FLOOD="$CACHE/rigflood"; CM="$CACHE/rigcm"
for t in rigtool rigflood rigfdstore; do
  if [ ! -x "$CACHE/$t" ] || [ "$CACHE/$t" -ot "$HERE/tools/$t.c" ]; then
    gcc -static -O2 -Wall -o "$CACHE/$t.tmp" "$HERE/tools/$t.c" && mv "$CACHE/$t.tmp" "$CACHE/$t"
  fi
done
# ---- 1c. tools/rigcm.c (librdmacm client/server), linked to the packaged librdmacm -------
# Headers from Debian's librdmacm-dev + libibverbs-dev (downloaded, not installed; same
# version as the runtime packages above); the libraries are the packaged ones in $PKG,
# so the binary runs in the guest as the rdma-core tools do.
DEV="$CACHE/devroot"
dwant=$(apt-cache policy librdmacm-dev libibverbs-dev | awk '/^[^ ].*:$/{p=substr($0,1,length($0)-1)} /Candidate:/{printf "%s_%s ", p, $2}')
if [ "$(cat "$DEV/.rig-pkgs" 2>/dev/null)" != "$dwant" ]; then
  echo "[mkinitramfs] downloading librdmacm-dev libibverbs-dev (headers for tools/rigcm.c)"
  rm -rf "$DEV"; mkdir -p "$DEV/debs"
  (cd "$DEV/debs" && apt-get download librdmacm-dev libibverbs-dev 2>&1 | grep -v '^W: Download is performed unsandboxed' | tail -2)
  for d in "$DEV"/debs/*.deb; do dpkg-deb -x "$d" "$DEV"; done
  echo "$dwant" > "$DEV/.rig-pkgs"
fi
if [ ! -x "$CM" ] || [ "$CM" -ot "$HERE/tools/rigcm.c" ] || [ "$CM" -ot "$DEV/.rig-pkgs" ]; then
  gcc -O2 -Wall -I"$DEV/usr/include" -o "$CM.tmp" "$HERE/tools/rigcm.c" \
    "$PKG/usr/lib/$MA/librdmacm.so.1" "$PKG/usr/lib/$MA/libibverbs.so.1" \
    -Wl,-rpath-link,"$PKG/usr/lib/$MA:$PKG/lib/$MA" && mv "$CM.tmp" "$CM"
fi

# Nothing to do when the packages and every input are as they were for the last image.
key=$( { echo "$want"; sha256sum "$HERE/guest/init" "$HERE/mkinitramfs.sh" "$TOOL" "$FLOOD" "$CACHE/rigfdstore" "$CM";
         for e in "${EXTRA[@]}"; do echo "$e"; sha256sum "${e%%:*}"; done; } | sha256sum | cut -d' ' -f1)
if [ $FORCE = 0 ] && [ -f "$OUT" ] && [ "$(cat "$OUT.key" 2>/dev/null)" = "$key" ]; then
  echo "[mkinitramfs] $OUT up to date"; exit 0
fi

# ---- 2. stage the root -------------------------------------------------------
rm -rf "$ROOT"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,lib64,lib/$MA,usr/lib/$MA,etc,proc,sys,dev,tmp,run,var/log,mnt/rig,rig,root}
ln -s ../run "$ROOT/var/run"
LIBPATH="$PKG/lib/$MA:$PKG/usr/lib/$MA"
LOADER="$PKG/lib64/ld-linux-x86-64.so.2"

copy_file() {  # copy_file SRC DESTPATH (dest path relative to root, absolute form)
  local src="$1" dst="$ROOT$2"
  mkdir -p "$(dirname "$dst")"
  cp -L --preserve=mode "$src" "$dst"
}
copy_libs() {  # copy the shared libraries an ELF file needs (no-op for static/non-ELF)
  local f="$1" out line name path rel dest
  [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || return 0
  out=$("$LOADER" --library-path "$LIBPATH" --list "$f" 2>/dev/null) || return 0
  while read -r line; do
    case "$line" in
      *"=> not found"*) echo "[mkinitramfs] missing library for $f: $line" >&2; return 1 ;;
      *"=>"*) name=${line%% =>*}; name=${name//[[:space:]]/}
              path=${line#*=> }; path=${path%% (*}
              case "$path" in
                "$PKG"/*) rel=${path#"$PKG"} ;;
                /*) echo "[mkinitramfs] note: $name for $f taken from host ($path)" >&2
                    rel="/lib/$MA/$name" ;;
                *) continue ;;
              esac
              dest="$(dirname "$rel")/$name"   # install under the SONAME asked for
              [ -e "$ROOT$dest" ] || copy_file "$path" "$dest" ;;
    esac
  done <<< "$out"
}
add_pkg_file() {  # add_pkg_file /path/in/package  (with libs)
  copy_file "$PKG$1" "$1"; copy_libs "$PKG$1"
}

# busybox + applet links
cp "$PKG/bin/busybox" "$ROOT/bin/busybox"
for a in $("$ROOT/bin/busybox" --list-full); do
  [ -e "$ROOT/$a" ] || ln -s /bin/busybox "$ROOT/$a"
done
# glibc loader (both the PT_INTERP path and the multiarch path)
copy_file "$PKG/lib/$MA/ld-linux-x86-64.so.2" "/lib/$MA/ld-linux-x86-64.so.2"
ln -sf "/lib/$MA/ld-linux-x86-64.so.2" "$ROOT/lib64/ld-linux-x86-64.so.2"

# RDMA + network tools (real binaries override busybox applets of the same name)
for f in /usr/sbin/iwpmd \
         /usr/bin/rping /usr/bin/ucmatose /usr/bin/cmtime /usr/bin/udaddy /usr/bin/mckey \
         /usr/bin/riostream /usr/bin/rstream /usr/bin/rdma_server /usr/bin/rdma_client \
         /usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong \
         /usr/bin/rdma /bin/ip /bin/ss /usr/bin/strace; do
  [ -e "$PKG$f" ] || { echo "[mkinitramfs] (not in packages: $f)"; continue; }
  # drop busybox applet links of the same name anywhere in PATH so the real tool wins
  for d in /bin /sbin /usr/bin /usr/sbin; do
    [ -L "$ROOT$d/$(basename "$f")" ] && rm -f "$ROOT$d/$(basename "$f")"
  done
  add_pkg_file "$f"
done
# glibc dlopen()s libgcc_s at pthread_exit/cancel time (not visible to ldd); libm and the
# glibc compat stubs let binaries dropped into the 9p share (e.g. a Rust iwpmd) run as-is.
for l in libgcc_s.so.1 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2; do
  [ -e "$PKG/lib/$MA/$l" ] && add_pkg_file "/lib/$MA/$l"
done
# siw userspace provider for libibverbs
add_pkg_file "/usr/lib/$MA/libibverbs/libsiw-rdmav34.so"
copy_file "$PKG/etc/libibverbs.d/siw.driver" /etc/libibverbs.d/siw.driver
copy_file "$PKG/etc/iwpmd.conf" /etc/iwpmd.conf

# extra files (e.g. the Rust iwpmd)
for e in "${EXTRA[@]}"; do
  src="${e%%:*}"; dst="${e#*:}"; [ "$dst" = "$e" ] && dst="/usr/local/bin/$(basename "$src")"
  copy_file "$src" "$dst"; copy_libs "$src"
done
copy_file "$TOOL" /usr/local/bin/rigtool
copy_file "$FLOOD" /usr/local/bin/rigflood
copy_file "$CACHE/rigfdstore" /usr/local/bin/rigfdstore
copy_file "$CM" /usr/local/bin/rigcm; copy_libs "$CM"

# minimal /etc
cat > "$ROOT/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
P
printf 'root:x:0:\nnogroup:x:65534:\n' > "$ROOT/etc/group"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' > "$ROOT/etc/hosts"
printf 'hosts: files\n' > "$ROOT/etc/nsswitch.conf"
printf '/lib/%s\n/usr/lib/%s\n' $MA $MA > "$ROOT/etc/ld.so.conf"
/sbin/ldconfig -r "$ROOT" 2>/dev/null || true
cp "$HERE/guest/init" "$ROOT/init"; chmod +x "$ROOT/init"

# ---- 3. pack -------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner=0:0 --quiet) > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "$key" > "$OUT.key"
echo "[mkinitramfs] $OUT ($(stat -c %s "$OUT") bytes, $(find "$ROOT" -type f | wc -l) files)"
