#!/usr/bin/env bash
# Build the execution environment image from execution-environment.yml for real and run a job in it the way AWX
# does: ansible-runner over a private data directory, as the image's user (1000).
#
# No registry is reachable here, so the build differs from a production one (docs/awx.md) in these points only:
#  - the base image is made locally: the node image ($GPUFLEET_NODE_IMAGE, Debian with Python 3) with python3-pip,
#    this host's CA bundle (the build's pip goes out through the same network), and the dependency collections
#    copied from the venv's `ansible` package (Galaxy is out of reach);
#  - --build-arg PKGMGR=/usr/bin/apt-get and ANSIBLE_GALAXY_CLI_COLLECTION_OPTS=--offline;
#  - the ensurepip step is left out of the Containerfile (what options.skip_pip_install does): Debian's system
#    Python refuses ensurepip, and the base already has pip;
#  - a stand-in `cosign` (a shell script printing a version) and its SHA256SUMS line go into the context's binary
#    drop, so that the checksum-and-install path of ee/finalize.sh runs; real cosign/trivy binaries were not used.
# The job runs playbooks from a project copy without collections/, so gpufleet.cluster comes from the image.
set -euo pipefail
cd "$(dirname "$0")/.."
node_image=${GPUFLEET_NODE_IMAGE:-gpufleet-node:trixie}
base=gpufleet-ee-check-base:local
image=gpufleet-ee:check
started=$SECONDS
log() { printf 'ee-image-check: %s\n' "$*"; }

docker image inspect "$node_image" >/dev/null
work=$(mktemp -d /tmp/gpufleet-ee-check.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The local base image.
site=$(python -c 'import importlib.util, os
spec = importlib.util.find_spec("ansible_collections.community.general")
print(os.path.dirname(os.path.dirname(list(spec.submodule_search_locations)[0])))')
mkdir -p "$work/base/collections/ansible_collections"
for collection in ansible/posix community/crypto community/docker community/general community/library_inventory_filtering_v1; do
  mkdir -p "$work/base/collections/ansible_collections/$(dirname "$collection")"
  cp -a "$site/$collection" "$work/base/collections/ansible_collections/$collection"
done
cp /etc/ssl/certs/ca-certificates.crt "$work/base/ca-certificates.crt"
cat >"$work/base/Containerfile" <<EOF
FROM $node_image
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
COPY collections/ /usr/share/ansible/collections/
EOF
docker build -q -f "$work/base/Containerfile" -t "$base" "$work/base" >/dev/null
log "base image $base ready ($((SECONDS - started)) s)"

# The build context, as `make ee` makes it, with the changes listed above.
scripts/ee-context.sh "$work/context" >/dev/null
# shellcheck disable=SC2016  # the Containerfile line names $PYCMD literally; nothing is to expand here
sed -i '/^RUN \/output\/scripts\/pip_install \$PYCMD$/d' "$work/context/Containerfile"
printf '#!/bin/sh\necho "stand-in cosign for the build check v0.0.0"\n' >"$work/context/_build/bin/cosign"
(cd "$work/context/_build/bin" && sha256sum cosign >SHA256SUMS)
if ! docker build -f "$work/context/Containerfile" -t "$image" --build-arg EE_BASE_IMAGE="$base" \
     --build-arg PKGMGR=/usr/bin/apt-get --build-arg ANSIBLE_GALAXY_CLI_COLLECTION_OPTS=--offline \
     "$work/context" >"$work/build.log" 2>&1; then
  tail -40 "$work/build.log"
  exit 1
fi
grep -E '^finalize: ' "$work/build.log"
log "image $image built ($((SECONDS - started)) s)"

# What the image holds.
docker run --rm "$image" sh -c '
  set -e
  ansible-galaxy collection list gpufleet.cluster 2>/dev/null | grep -E "^# |^gpufleet.cluster "
  python3 -c "import sys; print(\"python\", sys.version.split()[0])"
  ansible-playbook --version | head -1
  bindir=$(dirname "$(sed -n "1s/^#!//p" "$(command -v ansible-playbook)")")
  for tool in ansible-playbook ssh-audit; do echo "$bindir/$tool -> $(readlink "$bindir/$tool")"; done
  for tool in ssh ssh-keygen cosign; do command -v "$tool"; done
  cosign version
  test ! -e /usr/local/bin/trivy && echo "trivy: not provided (none in ee/bin)"
' | tee "$work/inspect.txt"
grep -q '^# /usr/share/ansible/collections/ansible_collections$' "$work/inspect.txt"
grep -Eq "^gpufleet\.cluster +$(sed -n 's/^version: //p' galaxy.yml) *\$" "$work/inspect.txt"
grep -q '^/usr/bin/ssh-audit -> ' "$work/inspect.txt"
grep -q '^/usr/local/bin/cosign$' "$work/inspect.txt"

# A job as AWX runs it: private data directory with project/, inventory/hosts (a script printing JSON), env/.
pdd="$work/job"
mkdir -p "$pdd/project" "$pdd/inventory" "$pdd/env"
git ls-files -z | grep -zv '^collections/' | xargs -0 cp --parents -P -t "$pdd/project"
cat >"$pdd/inventory/hosts" <<'EOF'
#! /usr/bin/env python3
import json
print(json.dumps({
    "all": {"children": ["gpu_nodes", "login_nodes"]},
    "gpu_nodes": {"hosts": ["gpu-local-01"]},
    "login_nodes": {"hosts": []},
    "_meta": {"hostvars": {"gpu-local-01": {"ansible_connection": "local",
                                            "ansible_python_interpreter": "/usr/bin/python3"}}},
}))
EOF
chmod 0755 "$pdd/inventory/hosts"
# The node is the image itself, run as uid 1000 without become.
printf -- '--check --tags preflight\n' >"$pdd/env/cmdline"
chmod -R a+rwX "$pdd"
docker run --rm --user 1000 -v "$pdd:/runner" "$image" \
  ansible-runner run /runner -p site.yml --ident check >"$work/job.log" 2>&1 || { tail -40 "$work/job.log"; exit 1; }
status=$(cat "$pdd/artifacts/check/status")
recap=$(grep -E '^gpu-local-01 +:' "$work/job.log" || true)
log "job site.yml --check --tags preflight in the image as uid 1000: $status; $recap"
[ "$status" = successful ]
grep -Eq 'ok=[1-9][0-9]* +changed=0 +unreachable=0 +failed=0' <<<"$recap"
# The node_facts event came from the image's collection.
grep -l '"resolved_action": "gpufleet.cluster.node_facts"' "$pdd"/artifacts/check/job_events/*.json >/dev/null
log "passed ($((SECONDS - started)) s)"
