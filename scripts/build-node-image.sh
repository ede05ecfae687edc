#!/usr/bin/env bash
# Build the Debian 13 (trixie) systemd node image used by the lab and the molecule scenarios.
#
#   GPUFLEET_NODE_IMAGE      image name to build/use          (default gpufleet-node:trixie)
#   GPUFLEET_IMAGE_METHOD    auto | debootstrap | dockerfile  (default auto)
#                            auto: FROM debian:trixie when that image is already present locally,
#                            otherwise a debootstrap rootfs imported with `docker import` (no registry needed).
#                            dockerfile: FROM debian:trixie, pulled from your registry.
#   GPUFLEET_DEBIAN_MIRROR   Debian mirror for debootstrap    (default: the host's own apt sources)
#   GPUFLEET_SKIP_IMAGE_BUILD=1  use GPUFLEET_NODE_IMAGE as it is (your own image), build nothing.
#
# scripts/build-debian-image.sh does the work (its header lists the other settings). The image is labelled
# with a hash of its recipe (this script, that builder and images/node/) and rebuilt only when it changes.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
exec "$here/scripts/build-debian-image.sh" --hash-file "$here/scripts/build-node-image.sh" \
  "$here/images/node" "${GPUFLEET_NODE_IMAGE:-gpufleet-node:trixie}" trixie
