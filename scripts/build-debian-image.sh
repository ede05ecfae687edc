#!/usr/bin/env bash
# Build a Debian-based image from a recipe directory; used by build-node-image.sh and build-training-image.sh.
#
#   scripts/build-debian-image.sh [--build-arg NAME=VALUE]... [--hash-file FILE]... RECIPE_DIR IMAGE [SUITE]
#
# RECIPE_DIR holds a Dockerfile taking `ARG BASE`, a packages.txt (one Debian package a line) and, optionally,
# a dpkg-excludes file (a dpkg.cfg fragment of path-exclude/path-include lines, e.g. to leave out the docs).
# SUITE is the Debian release of the base (default trixie).
#
#   GPUFLEET_IMAGE_METHOD    auto | debootstrap | dockerfile  (default auto)
#                            auto: FROM debian:SUITE when that image is already present locally, otherwise a
#                            debootstrap rootfs imported with `docker import` (no registry needed).
#                            dockerfile: FROM debian:SUITE, pulled from your registry.
#   GPUFLEET_DEBIAN_MIRROR   Debian mirror for the rootfs; default: the first Debian entry of this host's apt
#                            sources (/etc/apt/sources.list, sources.list.d/*.list and *.sources).
#   GPUFLEET_DEBIAN_SECURITY_MIRROR  security archive; default: the host's security entry when the mirror came
#                            from the host's sources, otherwise the debian-security sibling of the mirror.
#   GPUFLEET_APT_CACHE=0     never fetch through the test apt cache. Otherwise, when apt-cacher-ng answers on
#                            127.0.0.1:3142 (scripts/ensure-apt-cache.sh) and the mirror is plain http, debootstrap
#                            and apt fetch through it by URL (no proxy variables; signatures are still checked),
#                            so each package is downloaded once for every image and test node.
#   GPUFLEET_SKIP_IMAGE_BUILD=1  use IMAGE as it is (your own image), build nothing.
#   GPUFLEET_APT_ETC         where the host's apt sources are read (default /etc/apt).
#
# The rootfs is debootstrap's minbase plus packages.txt installed by apt inside it (--no-install-recommends,
# updates and security fixes applied), with the mirror's real address in its sources and no package lists.
# It is tagged IMAGE-REPO-rootfs:HASH (this script, suite, mirrors, packages.txt, dpkg-excludes); a new one
# replaces the older tags of that repository.
# IMAGE is labelled gpufleet.recipe=HASH of its recipe (this script, the --hash-file files, every file of
# RECIPE_DIR, the build args and the suite) and rebuilt only when that hash changes.
set -euo pipefail

builder=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
apt_etc=${GPUFLEET_APT_ETC:-/etc/apt}
cache_host=127.0.0.1
cache_port=3142

log() { printf 'build-debian-image: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# Print "debian URI" and "security URI" for every enabled binary Debian entry of the host's apt sources, in the
# order apt reads them. An entry is Debian's when it has the main component and either its suite is a Debian
# release name (bookworm, trixie-updates, stable, ...) or its path ends in /debian; -security suites and paths
# ending in /debian-security are the security archive. Other repositories (Docker's, NodeSource, ...) are skipped.
host_debian_uris() {
  local files=() f
  if [ -f "$apt_etc/sources.list" ]; then files+=("$apt_etc/sources.list"); fi
  while IFS= read -r f; do files+=("$f"); done < <(
    find "$apt_etc/sources.list.d" -maxdepth 1 -type f \( -name '*.list' -o -name '*.sources' \) 2>/dev/null | LC_ALL=C sort)
  [ "${#files[@]}" -gt 0 ] || return 0
  awk '
    function kind_of(uri, suite,   path, base) {
      if (uri !~ /^(https?|file):/) return ""
      path = uri; sub(/\/+$/, "", path)
      base = suite; sub(/-(updates|backports|backports-sloppy|proposed-updates)$/, "", base)
      if (suite ~ /-security$/ || path ~ /\/debian-security$/) return "security"
      if (base ~ /^(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable|experimental)$/ \
          || path ~ /\/debian$/) return "debian"
      return ""
    }
    function entry(types, uris, suites, comps,   u, s, n, m, i, j, kind) {
      if (types !~ /(^| )deb( |$)/ || comps !~ /(^| )main( |$)/) return
      n = split(uris, u, " "); m = split(suites, s, " ")
      for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) { kind = kind_of(u[i], s[j]); if (kind != "") print kind, u[i] }
    }
    function stanza_end() { if (enabled) entry(types, uris, suites, comps); types = uris = suites = comps = last = ""; enabled = 1 }
    FNR == 1 { if (deb822) stanza_end(); deb822 = (FILENAME ~ /\.sources$/); enabled = 1 }
    !deb822 {
      line = $0; sub(/#.*/, "", line); gsub(/\[[^]]*\]/, " ", line)
      n = split(line, w, " ")
      if (n < 4) next
      comps = ""; for (j = 4; j <= n; j++) comps = comps " " w[j]
      entry(w[1], w[2], w[3], comps); comps = ""
      next
    }
    /^[ \t]*#/ { next }
    /^[ \t]*$/ { stanza_end(); next }
    /^[ \t]/ {
      if (last == "uris") uris = uris " " $0; else if (last == "suites") suites = suites " " $0
      else if (last == "components") comps = comps " " $0
      next
    }
    {
      key = tolower($0); sub(/:.*/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val); last = key
      if (key == "types") types = val; else if (key == "uris") uris = val; else if (key == "suites") suites = val
      else if (key == "components") comps = val; else if (key == "enabled") enabled = (tolower(val) !~ /^no/)
    }
    END { if (deb822) stanza_end() }
  ' "${files[@]}"
}

# The security archive next to a Debian mirror: .../debian -> .../debian-security, and for snapshot-style
# addresses .../debian/STAMP -> .../debian-security/STAMP.
security_sibling() {
  case "$1" in
    */debian) printf '%s/debian-security\n' "${1%/debian}" ;;
    */debian/*) printf '%s\n' "$1" | sed 's#\(.*\)/debian/#\1/debian-security/#' ;;
    *) return 1 ;;
  esac
}

# Set mirror and security (without a trailing slash) or fail saying what to do.
resolve_mirrors() {
  local found="" from=GPUFLEET_DEBIAN_MIRROR
  if [ -n "${GPUFLEET_DEBIAN_MIRROR:-}" ]; then
    mirror=${GPUFLEET_DEBIAN_MIRROR%/}
  else
    from="the host's apt sources"
    found=$(host_debian_uris)
    mirror=$(awk '$1 == "debian" { print $2; exit }' <<<"$found")
    mirror=${mirror%/}
    [ -n "$mirror" ] || die "no Debian mirror: $apt_etc/sources.list and $apt_etc/sources.list.d/*.list|*.sources have no Debian entry (component main, a Debian suite or a path ending in /debian); set GPUFLEET_DEBIAN_MIRROR=http://your-mirror/debian"
  fi
  security=${GPUFLEET_DEBIAN_SECURITY_MIRROR:-$(awk '$1 == "security" { print $2; exit }' <<<"$found")}
  if [ -z "$security" ]; then
    security=$(security_sibling "$mirror") \
      || die "no security archive for the mirror $mirror (from $from): set GPUFLEET_DEBIAN_SECURITY_MIRROR=http://your-mirror/debian-security"
  fi
  security=${security%/}
}

cache_answers() { timeout 1 bash -c "exec 3<>/dev/tcp/$cache_host/$cache_port" 2>/dev/null; }

# The address to fetch from: through apt-cacher-ng's URL form (http://cache:3142/host/path) when it answers.
via_cache() {
  if [ "$use_cache" = 1 ] && [ "${1#http://}" != "$1" ]; then
    printf 'http://%s:%s/%s\n' "$cache_host" "$cache_port" "${1#http://}"
  else
    printf '%s\n' "$1"
  fi
}

sources_list() {  # MIRROR SECURITY: the sources of a Debian install of $suite
  printf 'deb %s %s main\n' "$1" "$suite"
  case "$suite" in
    sid | unstable | experimental) ;;
    *) printf 'deb %s %s-updates main\ndeb %s %s-security main\n' "$1" "$suite" "$2" "$suite" ;;
  esac
}

# Delete what a dpkg path-exclude fragment leaves out from files already in the rootfs (debootstrap's packages
# were unpacked before the fragment was there).
apply_dpkg_excludes() {  # ROOTFS FRAGMENT
  local root=$1 line excludes=() keep=()
  while IFS= read -r line; do
    case "$line" in
      path-exclude=*) excludes+=("${line#path-exclude=}") ;;
      path-include=*) keep+=(! -path "$root${line#path-include=}") ;;
    esac
  done <"$2"
  local pattern
  for pattern in "${excludes[@]}"; do
    find "$root" -path "$root$pattern" ! -type d "${keep[@]}" -delete
  done
}

rootfs=""
cleanup() {
  if [ -n "$rootfs" ]; then
    if mountpoint -q "$rootfs/proc" 2>/dev/null; then umount "$rootfs/proc" || umount -l "$rootfs/proc"; fi
    if ! mountpoint -q "$rootfs/proc" 2>/dev/null; then rm -rf "$rootfs" "$rootfs.log"; fi
  fi
}

in_rootfs() {
  chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C DEBIAN_FRONTEND=noninteractive "$@"
}

build_rootfs() {  # TAG
  if ! command -v debootstrap >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "debootstrap is missing; install it or use GPUFLEET_IMAGE_METHOD=dockerfile"
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  fi
  local fetch fetch_security packages
  fetch=$(via_cache "$mirror")
  fetch_security=$(via_cache "$security")
  rootfs=$(mktemp -d /tmp/gpufleet-rootfs.XXXXXX)
  trap cleanup EXIT
  if [ "$fetch" != "$mirror" ]; then log "fetching through the apt cache on $cache_host:$cache_port"; fi
  log "debootstrap $suite (minbase) from $mirror"
  debootstrap --variant=minbase "$suite" "$rootfs" "$fetch" >"$rootfs.log" 2>&1 \
    || { tail -20 "$rootfs.log" >&2; die "debootstrap failed"; }
  if [ -f "$recipe_dir/dpkg-excludes" ]; then
    install -m 0644 "$recipe_dir/dpkg-excludes" "$rootfs/etc/dpkg/dpkg.cfg.d/gpufleet-excludes"
    apply_dpkg_excludes "$rootfs" "$recipe_dir/dpkg-excludes"
  fi
  sources_list "$fetch" "$fetch_security" >"$rootfs/etc/apt/sources.list"
  printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
  chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
  mount -t proc proc "$rootfs/proc"
  mapfile -t packages < <(grep -v '^[[:space:]]*\(#\|$\)' "$recipe_dir/packages.txt")
  log "installing ${#packages[@]} packages of $(basename "$recipe_dir")/packages.txt with their dependencies"
  {
    in_rootfs apt-get -o Acquire::Retries=3 update \
      && in_rootfs apt-get -o Acquire::Retries=3 -y dist-upgrade \
      && in_rootfs apt-get -o Acquire::Retries=3 -y --no-install-recommends install "${packages[@]}" \
      && in_rootfs apt-get clean
  } >>"$rootfs.log" 2>&1 || { tail -20 "$rootfs.log" >&2; die "apt-get in the rootfs failed"; }
  umount "$rootfs/proc"
  # What the image keeps: the mirror's real address, no lists, caches, logs or host files.
  sources_list "$mirror" "$security" >"$rootfs/etc/apt/sources.list"
  rm -f "$rootfs/usr/sbin/policy-rc.d"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
    "$rootfs"/var/log/apt/* "$rootfs"/tmp/* "$rootfs"/var/tmp/*
  : >"$rootfs/var/log/dpkg.log"
  : >"$rootfs/etc/resolv.conf"
  : >"$rootfs/etc/hostname"
  tar -C "$rootfs" --numeric-owner -c . | docker import - "$1" >/dev/null
  cleanup
  rootfs=""
  trap - EXIT
}

build_args=()
hash_files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-arg) [ $# -ge 2 ] || die "--build-arg needs NAME=VALUE"; build_args+=("$2"); shift 2 ;;
    --hash-file) [ $# -ge 2 ] || die "--hash-file needs a file"; hash_files+=("$2"); shift 2 ;;
    --) shift; break ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ] || [ $# -gt 3 ]; then die "usage: $0 [--build-arg NAME=VALUE]... [--hash-file FILE]... RECIPE_DIR IMAGE [SUITE]"; fi
recipe_dir=$(cd "$1" && pwd)
image=$2
suite=${3:-trixie}
method=${GPUFLEET_IMAGE_METHOD:-auto}
if [ ! -f "$recipe_dir/Dockerfile" ] || [ ! -f "$recipe_dir/packages.txt" ]; then
  die "$recipe_dir needs a Dockerfile and a packages.txt"
fi

if [ "${GPUFLEET_SKIP_IMAGE_BUILD:-0}" = "1" ]; then
  docker image inspect "$image" >/dev/null 2>&1 || die "GPUFLEET_SKIP_IMAGE_BUILD=1 but $image is not present"
  log "using $image as it is"
  exit 0
fi

recipe_hash=$(
  {
    cat "$builder"
    for f in "${hash_files[@]}"; do cat "$f"; done
    (cd "$recipe_dir" && find . -type f | LC_ALL=C sort | while IFS= read -r f; do printf '%s\n' "$f"; cat "$f"; done)
    printf 'suite=%s\n' "$suite"
    for a in "${build_args[@]}"; do printf 'build-arg=%s\n' "$a"; done
  } | sha256sum | cut -c1-16
)
current=$(docker image inspect -f '{{ index .Config.Labels "gpufleet.recipe" }}' "$image" 2>/dev/null || true)
if [ "$current" = "$recipe_hash" ]; then
  log "$image is up to date (recipe $recipe_hash)"
  exit 0
fi

if [ "$method" = "auto" ]; then
  if docker image inspect "debian:$suite" >/dev/null 2>&1; then method=dockerfile; else method=debootstrap; fi
fi

case "$method" in
  dockerfile)
    base=debian:$suite
    ;;
  debootstrap)
    resolve_mirrors
    use_cache=0
    if [ "${GPUFLEET_APT_CACHE:-1}" != "0" ] && cache_answers; then use_cache=1; fi
    repo=$image
    case "${image##*/}" in *:*) repo=${image%:*} ;; esac
    rootfs_hash=$(
      {
        cat "$builder"
        printf 'suite=%s\nmirror=%s\nsecurity=%s\n' "$suite" "$mirror" "$security"
        cat "$recipe_dir/packages.txt"
        if [ -f "$recipe_dir/dpkg-excludes" ]; then cat "$recipe_dir/dpkg-excludes"; fi
      } | sha256sum | cut -c1-16
    )
    base="$repo-rootfs:$rootfs_hash"
    if ! docker image inspect "$base" >/dev/null 2>&1; then
      build_rootfs "$base"
      # Older rootfs tags of this image are superseded (images built from them keep their layers).
      docker image ls --format '{{.Repository}}:{{.Tag}}' "$repo-rootfs" | grep -vxF "$base" \
        | xargs -r docker image rm >/dev/null 2>&1 || true
    fi
    ;;
  *)
    die "unknown GPUFLEET_IMAGE_METHOD=$method (auto, debootstrap or dockerfile)"
    ;;
esac

log "building $image from $base"
args=(--build-arg "BASE=$base")
for a in "${build_args[@]}"; do args+=(--build-arg "$a"); done
build_log=$(mktemp /tmp/gpufleet-build.XXXXXX)
if ! docker build --force-rm "${args[@]}" --label "gpufleet.recipe=$recipe_hash" -t "$image" "$recipe_dir" >"$build_log" 2>&1; then
  tail -30 "$build_log" >&2
  rm -f "$build_log"
  die "docker build of $image failed"
fi
rm -f "$build_log"
log "built $image (recipe $recipe_hash)"
