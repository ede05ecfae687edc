#!/usr/bin/env bash
# Build the Debian 13 (trixie) systemd node image used by the lab and the molecule scenarios.
#
#   GPUFLEET_NODE_IMAGE      image name to build/use          (default gpufleet-node:trixie)
#   GPUFLEET_IMAGE_METHOD    auto | debootstrap | dockerfile  (default auto)
#                            auto: FROM debian:trixie when that image is already present locally,
#                            otherwise a debootstrap rootfs imported with `docker import` (no registry needed).
#                            dockerfile: FROM debian:trixie, pulled from your registry.
#   GPUFLEET_DEBIAN_MIRROR   Debian mirror for debootstrap   (default http://deb.debian.org/debian)
#   GPUFLEET_SKIP_IMAGE_BUILD=1  use GPUFLEET_NODE_IMAGE as it is (your own image), build nothing.
#
# The image is labelled with a hash of its recipe (this script and images/node/) and rebuilt only when
# that hash changes.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
image=${GPUFLEET_NODE_IMAGE:-gpufleet-node:trixie}
method=${GPUFLEET_IMAGE_METHOD:-auto}
mirror=${GPUFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
recipe_dir="$here/images/node"

log() { printf 'build-node-image: %s\n' "$*" >&2; }

if [ "${GPUFLEET_SKIP_IMAGE_BUILD:-0}" = "1" ]; then
  docker image inspect "$image" >/dev/null 2>&1 || { log "GPUFLEET_SKIP_IMAGE_BUILD=1 but $image is not present"; exit 1; }
  log "using $image as it is"
  exit 0
fi

recipe_hash=$(cat "$0" "$recipe_dir"/* | sha256sum | cut -c1-16)
current=$(docker image inspect -f '{{ index .Config.Labels "gpufleet.recipe" }}' "$image" 2>/dev/null || true)
if [ "$current" = "$recipe_hash" ]; then
  log "$image is up to date (recipe $recipe_hash)"
  exit 0
fi

if [ "$method" = "auto" ]; then
  if docker image inspect debian:trixie >/dev/null 2>&1; then method=dockerfile; else method=debootstrap; fi
fi

case "$method" in
  dockerfile)
    base=debian:trixie
    ;;
  debootstrap)
    if ! command -v debootstrap >/dev/null 2>&1; then
      if command -v apt-get >/dev/null 2>&1; then
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
          || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
      else
        log "debootstrap is missing; install it or use GPUFLEET_IMAGE_METHOD=dockerfile"
        exit 1
      fi
    fi
    # The rootfs depends only on the package list and the mirror.
    base="gpufleet-node-rootfs:$(printf '%s\n' "$mirror" | cat - "$recipe_dir/packages.txt" | sha256sum | cut -c1-16)"
    if ! docker image inspect "$base" >/dev/null 2>&1; then
      rootfs=$(mktemp -d /tmp/gpufleet-rootfs.XXXXXX)
      trap 'rm -rf "$rootfs"' EXIT
      include=$(paste -sd, "$recipe_dir/packages.txt")
      log "debootstrap trixie from $mirror (about a minute)"
      debootstrap --variant=minbase --include="$include" trixie "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
        || { tail -20 "$rootfs.log" >&2; exit 1; }
      rm -f "$rootfs.log"
      # The rootfs keeps debootstrap's sources.list; add updates and security like a real install.
      cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror trixie main
deb $mirror trixie-updates main
deb ${mirror%/debian}/debian-security trixie-security main
SOURCES
      rm -rf "$rootfs"/var/cache/apt/archives/*.deb
      tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
      rm -rf "$rootfs"
      trap - EXIT
    fi
    ;;
  *)
    log "unknown GPUFLEET_IMAGE_METHOD=$method (auto, debootstrap or dockerfile)"
    exit 1
    ;;
esac

log "building $image from $base"
docker build -q --build-arg BASE="$base" --label "gpufleet.recipe=$recipe_hash" -t "$image" "$recipe_dir" >/dev/null
log "built $image (recipe $recipe_hash)"
