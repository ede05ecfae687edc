#!/usr/bin/env bash
# Build context of the execution environment (execution-environment.yml): build the collection tarball into
# build/ee/collection/ (only the current one), then `ansible-builder create` into build/ee/context (or $1).
# Building the image needs the base image from your registry: see docs/awx.md.
set -euo pipefail
cd "$(dirname "$0")/.."
context=${1:-build/ee/context}
# Replace only an earlier build context (or an empty directory), never anything else the path may name.
if [ -e "$context" ] && [ -n "$(ls -A "$context")" ] && ! { [ -f "$context/Containerfile" ] && [ -d "$context/_build" ]; }; then
  echo "ee: $context exists and is not a build context; give another path" >&2
  exit 1
fi
rm -rf build/ee/collection "$context"
mkdir -p build/ee/collection
ansible-galaxy collection build --force --output-path build/ee/collection . >/dev/null
ansible-builder create --file execution-environment.yml --context "$context" --output-filename Containerfile >/dev/null
echo "ee: $(basename build/ee/collection/gpufleet-cluster-*.tar.gz) and the build context in $context"
echo "ee: docker build -t <your registry>/gpufleet-ee:<version> --build-arg EE_BASE_IMAGE=<your registry>/<ee-minimal image>:<tag> $context"
