#!/usr/bin/env bash
# ansible-test sanity on this collection. ansible-test wants the collection at a real
# .../ansible_collections/gpufleet/cluster path (collections/ here is a symlink, which it resolves back to the
# checkout), so the checkout's files (tracked, and new ones git does not ignore) are copied to
# $GPUFLEET_SANITY_DIR/ansible_collections/gpufleet/cluster and the tests run there. GPUFLEET_SANITY_DIR defaults
# to ~/.cache/gpufleet-sanity, outside the checkout, so that a fresh clone on the same machine (CI) reuses the
# tool environments instead of installing them again (about 6 minutes).
#
# --venv: ansible-test builds its own virtual environments (one under the copy's tests/output/.tmp, one per test
# with tool requirements under ~/.ansible/test/venv) and installs its pinned tool versions there, leaving .venv
# alone. HOME points into $GPUFLEET_SANITY_DIR for it, so those environments and its caches stay there too; both are
# kept between runs, so only the first run installs anything.
#
#   scripts/sanity.sh                   every sanity test
#   scripts/sanity.sh --test pylint     one test (any ansible-test sanity option passes through)
#
# What is skipped or ignored, each entry with its reason, is in tests/sanity/ignore-<ansible-core X.Y>.txt
# (ansible-test reads the file named after the ansible-core it comes with).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sanity_dir=${GPUFLEET_SANITY_DIR:-$HOME/.cache/gpufleet-sanity}
dest=$sanity_dir/ansible_collections/gpufleet/cluster

[[ -x $root/.venv/bin/ansible-test ]] && export PATH=$root/.venv/bin:$PATH
command -v ansible-test >/dev/null || { echo "ansible-test not found: run make venv first"; exit 1; }
# The shell script check needs the shellcheck program (a Debian package, not a Python one); without it
# ansible-test would skip that check.
if ! command -v shellcheck >/dev/null; then
  echo "installing shellcheck"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
fi
python_version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# ansible-test runs pip with a bare environment (PATH, HOME, locale), so pip settings given as PIP_* variables (an
# index, a CA bundle) would not reach it; they go, with the user's own pip.conf, into the pip.conf of that HOME.
sanity_home=$sanity_dir/home
mkdir -p "$sanity_home/.config/pip"
python3 - "$HOME/.config/pip/pip.conf" "$sanity_home/.config/pip/pip.conf" <<'PY'
import configparser, os, sys
config = configparser.RawConfigParser()
config.read(sys.argv[1])
if not config.has_section("global"):
    config.add_section("global")
for name, value in sorted(os.environ.items()):
    if name.startswith("PIP_") and len(name) > 4:
        config.set("global", name[4:].lower().replace("_", "-"), value)
os.umask(0o077)  # an index URL may carry a token
with open(sys.argv[2], "w") as handle:
    config.write(handle)
PY
export HOME=$sanity_home
# ansible-test bootstraps pip in its empty environments with a get-pip.py it downloads from outside the package
# index; scripts/sanity-get-pip.py does the same from the standard library (see there), from ansible-test's cache.
pip_version=$(python3 -c 'import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$python_version"'"))["pip"])')
mkdir -p "$HOME/.ansible/test/cache"
cp "$root/scripts/sanity-get-pip.py" "$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"

# Fresh copy of the checkout, keeping tests/output (ansible-test's venv and results) from the last run.
# collections/ is left out: it only links back to the root and is not part of the built collection.
mkdir -p "$dest"
find "$dest" -mindepth 1 -maxdepth 1 ! -name tests -exec rm -rf {} +  # .git too: the copy gets a fresh one
if [[ -d $dest/tests ]]; then
  find "$dest/tests" -mindepth 1 -maxdepth 1 ! -name output -exec rm -rf {} +
fi
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' path; do
      [[ $path == collections/* ]] && continue
      [[ -e $path || -L $path ]] && printf '%s\0' "$path"
    done \
  | tar -C "$root" --null -T - -cf - | tar -C "$dest" -xf -

cd "$dest"
# ansible-test lists content with git when it finds a .git above it, and the checkout's .gitignore hides .cache/;
# a repository of its own (nothing committed) makes it list the copy's files instead.
git init -q .
echo /tests/output/ >.git/info/exclude
started=$SECONDS
status=0
ansible-test sanity --venv --requirements --python "$python_version" --color no "$@" || status=$?
echo "ansible-test sanity: $([[ $status == 0 ]] && echo passed || echo FAILED) in $((SECONDS - started))s (copy in $dest)"
exit "$status"
