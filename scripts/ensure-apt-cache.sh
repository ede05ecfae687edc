#!/usr/bin/env bash
# Run the shared apt cache for test nodes: apt-cacher-ng in a container on the host network, port 3142, its
# cache in the volume gpufleet-apt-cache. Node containers (images/node/apt-proxy-detect) find it through their
# default gateway, so each Debian package is downloaded once for the lab and every molecule scenario, and
# nodes never contend for one another's apt locks. GPUFLEET_APT_CACHE=0 turns it off (nodes go direct).
set -euo pipefail
name=gpufleet-apt-cache
image=${GPUFLEET_NODE_IMAGE:-gpufleet-node:trixie}

log() { printf 'ensure-apt-cache: %s\n' "$*" >&2; }

if [ "${GPUFLEET_APT_CACHE:-1}" = "0" ]; then
  exit 0
fi
answers() { timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/3142' 2>/dev/null; }

if [ -n "$(docker ps -q --filter "name=^/${name}$" --filter status=running)" ] && answers; then
  exit 0
fi
docker rm -f "$name" >/dev/null 2>&1 || true
log "starting apt-cacher-ng ($name, port 3142)"
docker run -d --name "$name" --label gpufleet.apt-cache=1 --network host --restart unless-stopped \
  -v gpufleet-apt-cache:/var/cache/apt-cacher-ng "$image" /bin/sh -c '
    command -v apt-cacher-ng >/dev/null 2>&1 || {
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends apt-cacher-ng >/dev/null; }
    mkdir -p /var/cache/apt-cacher-ng /var/log/apt-cacher-ng /run/apt-cacher-ng
    exec /usr/sbin/apt-cacher-ng -c /etc/apt-cacher-ng ForeGround=1 Port=3142 CacheDir=/var/cache/apt-cacher-ng' >/dev/null
for _ in $(seq 1 120); do
  if answers; then
    exit 0
  fi
  sleep 1
done
log "apt-cacher-ng did not answer within 120 s; docker logs $name:"
docker logs --tail 20 "$name" >&2
exit 1
