#!/usr/bin/env bash
# Make sure a Docker engine answers: install docker.io on Debian/Ubuntu hosts when it is missing,
# and start dockerd by hand on hosts without systemd (containers, CI runners).
set -euo pipefail

log() { printf 'ensure-docker: %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io >/dev/null
  else
    log "no Docker engine and no apt-get: install Docker, then run this again"
    exit 1
  fi
fi

if docker info >/dev/null 2>&1; then
  exit 0
fi

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  log "starting docker.service"
  systemctl start docker
else
  log "starting dockerd (no systemd on this host)"
  mkdir -p /var/log
  nohup dockerd >/var/log/dockerd.log 2>&1 &
fi

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within 60 s; see /var/log/dockerd.log"
exit 1
