#!/usr/bin/env bash
# The controller-side tests on the newest ansible-core. ansible-core after 2.19 needs Python 3.12 or newer, so they
# run in a Debian 13 container (Python 3.13) whose virtual environment holds requirements-core-latest.txt, on a copy
# of this checkout; .venv keeps ansible-core 2.19 for the other stages.
#
#   scripts/core-latest.sh [STAGE...]   unit, integration, collection, sanity (default: all four, in that order)
#
#   GPUFLEET_CORE_LATEST_IMAGE   the image (default gpufleet-core-latest:trixie), built from images/core-latest/ and
#                                requirements-core-latest.txt by scripts/build-debian-image.sh, labelled with the hash
#                                of its recipe and rebuilt only when that changes (a second call builds nothing).
#   GPUFLEET_IMAGE_METHOD, GPUFLEET_DEBIAN_MIRROR, GPUFLEET_SKIP_IMAGE_BUILD: as for build-node-image.sh
#                                (scripts/build-debian-image.sh lists them all).
#
# The copy holds what sanity.sh copies (tracked files and new ones git does not ignore) and is made a git
# repository of its own, with every file added, for the tests that list files with git. Each stage is the command of
# its make target: pytest -q tests/unit, pytest -q tests/integration, scripts/collection-check.sh,
# scripts/sanity.sh. ansible-test's tool environments are kept in a Docker volume named after the image and its
# recipe (IMAGE-REPO-sanity-HASH), so only the first run of a recipe installs them; the volumes of older recipes are
# removed. The stages go on after a failure; the exit status is 0 only when all of them passed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
image=${GPUFLEET_CORE_LATEST_IMAGE:-gpufleet-core-latest:trixie}
repo=$image
case "${image##*/}" in *:*) repo=${image%:*} ;; esac
started=$SECONDS

log() { printf 'core-latest: %s\n' "$*" >&2; }

all_stages=(unit integration collection sanity)
if [ $# -eq 0 ]; then set -- "${all_stages[@]}"; fi
for stage in "$@"; do
  case " ${all_stages[*]} " in
    *" $stage "*) ;;
    *) log "unknown stage $stage (known: ${all_stages[*]})"; exit 2 ;;
  esac
done

# The CA bundle the host's pip trusts: the image's pip install and ansible-test's tool installs in the container
# go out through the same network.
ca_bundle=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
[ -r "$ca_bundle" ] || { log "no CA bundle at $ca_bundle (set PIP_CERT)"; exit 1; }

# The image. build-debian-image.sh takes its build context from the recipe directory and hashes every file in it, so
# the recipe, the requirements file and the CA bundle are put together in one.
work=$(mktemp -d /tmp/gpufleet-core-latest.XXXXXX)
trap 'rm -rf "$work"' EXIT
recipe=$work/core-latest
mkdir "$recipe"
cp images/core-latest/* requirements-core-latest.txt "$recipe/"
cp "$ca_bundle" "$recipe/ca-certificates.crt"
scripts/build-debian-image.sh --hash-file scripts/core-latest.sh "$recipe" "$image" trixie
recipe_hash=$(docker image inspect -f '{{ index .Config.Labels "gpufleet.recipe" }}' "$image")
if [ -z "$recipe_hash" ]; then recipe_hash=$(docker image inspect -f '{{ .Id }}' "$image" | cut -d: -f2 | cut -c1-16); fi

# ansible-test's tool environments, per recipe.
volume=${repo##*/}-sanity-$recipe_hash
docker volume ls -q | grep -E "^${repo##*/}-sanity-[0-9a-f]+\$" | grep -vxF "$volume" \
  | xargs -r docker volume rm >/dev/null 2>&1 || true
docker volume create "$volume" >/dev/null

# The tests, in one container that the copy of the checkout is streamed into.
# shellcheck disable=SC2016  # expanded in the container
inner='
set -uo pipefail
mkdir -p /work/gpufleet && cd /work/gpufleet
tar -xf - || exit 1
git init -q . && git add -A
printf "core-latest: %s on Python %s in %s\n" "$(ansible --version 2>/dev/null | head -1)" \
  "$(python3 -c "import platform; print(platform.python_version())")" "$(. /etc/os-release && echo "$PRETTY_NAME")"
results=()
for stage in "$@"; do
  printf "\n---- core-latest: %s ----\n" "$stage"
  begun=$SECONDS
  case "$stage" in
    unit) pytest -q -p no:cacheprovider tests/unit ;;
    integration) pytest -q -p no:cacheprovider tests/integration ;;
    collection) scripts/collection-check.sh ;;
    sanity) scripts/sanity.sh ;;
  esac
  rc=$?
  results+=("$(printf "%-12s %-6s %5ss" "$stage" "$([ "$rc" = 0 ] && echo passed || echo FAILED)" "$((SECONDS - begun))")")
  [ "$rc" = 0 ] || failed=1
done
printf "\n---- core-latest: summary ----\n"
printf "%s\n" "${results[@]}"
exit "${failed:-0}"
'
name=${repo##*/}-run-$$
status=0
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' path; do
      [[ -e $path || -L $path ]] && printf '%s\0' "$path"
    done \
  | tar -C "$root" --null -T - -cf - \
  | docker run --rm -i --name "$name" \
      -v "$ca_bundle:/etc/ssl/certs/gpufleet-host-ca.crt:ro" -v "$volume:/var/cache/gpufleet-sanity" \
      -e PIP_CERT=/etc/ssl/certs/gpufleet-host-ca.crt -e PIP_DISABLE_PIP_VERSION_CHECK=1 \
      -e PIP_INDEX_URL -e PIP_EXTRA_INDEX_URL -e PIP_TRUSTED_HOST -e PIP_DEFAULT_TIMEOUT \
      -e GPUFLEET_SANITY_DIR=/var/cache/gpufleet-sanity -e ANSIBLE_CONFIG=/work/gpufleet/ansible.cfg \
      "$image" bash -c "$inner" core-latest "$@" \
  || status=$?
log "$([ "$status" = 0 ] && echo passed || echo FAILED) in $((SECONDS - started)) s ($image, recipe $recipe_hash)"
exit "$status"
