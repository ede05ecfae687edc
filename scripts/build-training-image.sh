#!/usr/bin/env bash
# Build the CPU training image (images/training/cpu: Debian 13 PyTorch, torchrun, OpenMPI, mpi4py, non-root
# training user) and keep a `docker save` archive of it for nodes that load it without a registry.
#
#   GPUFLEET_TRAINING_IMAGE  image name to build/use           (default gpufleet-training:cpu)
#   GPUFLEET_TRAINING_USER   training user in the image         (default aiuser, as cluster_ssh_user)
#   GPUFLEET_TRAINING_UID    its uid                            (default 1000, as cluster_ssh_uid)
#   GPUFLEET_IMAGE_METHOD, GPUFLEET_DEBIAN_MIRROR, GPUFLEET_SKIP_IMAGE_BUILD: as for build-node-image.sh
#                            (scripts/build-debian-image.sh lists them all).
#
# The image is labelled with a hash of its recipe (this script, the builder, images/training/cpu and the user
# and uid) and rebuilt only when it changes. The archive, .cache/images/gpufleet-training-cpu.tar, is written
# again only when the image ID differs from the one it holds. Prints the image ID and the archive path.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
image=${GPUFLEET_TRAINING_IMAGE:-gpufleet-training:cpu}
user=${GPUFLEET_TRAINING_USER:-aiuser}
uid=${GPUFLEET_TRAINING_UID:-1000}
archive="$here/.cache/images/gpufleet-training-cpu.tar"

log() { printf 'build-training-image: %s\n' "$*" >&2; }

case "$user" in
  '' | root | [!a-z_]* | *[!a-z0-9_-]*)
    log "GPUFLEET_TRAINING_USER='$user' is not a user name for the training user (lower case, not root)"
    exit 1 ;;
esac
case "$uid" in
  '' | 0 | *[!0-9]*) log "GPUFLEET_TRAINING_UID='$uid' must be a non-zero number"; exit 1 ;;
esac

"$here/scripts/build-debian-image.sh" --hash-file "$here/scripts/build-training-image.sh" \
  --build-arg "TRAINING_USER=$user" --build-arg "TRAINING_UID=$uid" \
  "$here/images/training/cpu" "$image" trixie

id=$(docker image inspect -f '{{ .Id }}' "$image")

# The image ID an archive holds: its manifest's Config (<hex>.json, or blobs/sha256/<hex> in OCI layouts).
archived_id() {
  [ -f "$archive" ] || return 0
  tar -xOf "$archive" manifest.json 2>/dev/null | grep -oE '"Config":"[^"]*"' | grep -oE '[0-9a-f]{64}' | head -1
}

if [ "$(archived_id)" = "${id#sha256:}" ]; then
  log "$archive holds $image already"
else
  mkdir -p "$(dirname "$archive")"
  tmp=$(mktemp "$archive.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  log "saving $image to $archive"
  docker save -o "$tmp" "$image"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$archive"
  trap - EXIT
fi

printf 'image %s %s\n' "$image" "$id"
printf 'archive %s\n' "$archive"
