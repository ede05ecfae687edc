#!/usr/bin/env bash
# Build the systemd node images used by the lab and the molecule scenarios, one per Debian release.
#
#   scripts/build-node-image.sh [CODENAME...]   trixie and/or bookworm (default: trixie; `make image` builds both)
#
#   GPUFLEET_NODE_IMAGE           the Debian 13 (trixie) image       (default gpufleet-node:trixie)
#   GPUFLEET_NODE_IMAGE_BOOKWORM  the Debian 12 (bookworm) image     (default gpufleet-node:bookworm)
#   GPUFLEET_IMAGE_METHOD    auto | debootstrap | dockerfile  (default auto)
#                            auto: FROM debian:CODENAME when that image is already present locally,
#                            otherwise a debootstrap rootfs imported with `docker import` (no registry needed).
#                            dockerfile: FROM debian:CODENAME, pulled from your registry.
#   GPUFLEET_DEBIAN_MIRROR   Debian mirror for debootstrap    (default: the host's own apt sources)
#   GPUFLEET_SKIP_IMAGE_BUILD=1  use the images as they are (your own), build nothing.
#
# scripts/build-debian-image.sh does the work (its header lists the other settings). Both releases use the same
# recipe (images/node/); each image is labelled with a hash of its recipe and its codename and is rebuilt only
# when that changes, so a second call returns at once.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)

log() { printf 'build-node-image: %s\n' "$*" >&2; }

image_of() {
  case "$1" in
    trixie) printf '%s\n' "${GPUFLEET_NODE_IMAGE:-gpufleet-node:trixie}" ;;
    bookworm) printf '%s\n' "${GPUFLEET_NODE_IMAGE_BOOKWORM:-gpufleet-node:bookworm}" ;;
    *) log "unknown codename $1 (trixie or bookworm)"; return 1 ;;
  esac
}

# The builder keeps one debootstrap rootfs per image repository (REPO-rootfs:HASH) and, when it makes a new one,
# removes the other tags of that repository as superseded. Both releases share the repository, so the rootfs of
# the other release is kept here: it is aliased before the build and its tag put back afterwards.
rootfs_tags() { docker image ls --format '{{.Tag}}' "$1" 2>/dev/null | grep -vx '<none>' || true; }

codename_of() {  # IMAGE: the Debian codename inside it
  docker run --rm --network none --entrypoint /bin/sh "$1" -c '. /etc/os-release && echo "$VERSION_CODENAME"' 2>/dev/null
}

build() {  # CODENAME
  local codename=$1 image repo tags tag
  image=$(image_of "$codename")
  repo=$image
  case "${image##*/}" in *:*) repo=${image%:*} ;; esac
  tags=$(rootfs_tags "$repo-rootfs")
  for tag in $tags; do docker tag "$repo-rootfs:$tag" "$repo-rootfs-keep:$tag"; done
  local rc=0
  "$here/scripts/build-debian-image.sh" --hash-file "$here/scripts/build-node-image.sh" \
    "$here/images/node" "$image" "$codename" || rc=$?
  for tag in $tags; do
    if ! docker image inspect "$repo-rootfs:$tag" >/dev/null 2>&1 \
        && [ "$(codename_of "$repo-rootfs-keep:$tag")" != "$codename" ]; then
      docker tag "$repo-rootfs-keep:$tag" "$repo-rootfs:$tag"
    fi
    docker image rm "$repo-rootfs-keep:$tag" >/dev/null 2>&1 || true
  done
  return "$rc"
}

if [ $# -eq 0 ]; then set -- trixie; fi
for codename in "$@"; do
  image_of "$codename" >/dev/null
done
for codename in "$@"; do
  build "$codename"
done
