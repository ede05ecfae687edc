#!/usr/bin/env bash
# Build the collection with ansible-galaxy, install the tarball into a scratch collections path (not this
# checkout), and use it from there: ansible-doc renders the modules and the shared-settings role, and a playbook runs
# a module and a role and reads the shared settings.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/gpufleet-collection.XXXXXX)
trap 'rm -rf "$work"' EXIT

ansible-galaxy collection build --force --output-path "$work/dist" . >/dev/null
tarball=$(ls "$work"/dist/gpufleet-cluster-*.tar.gz)
echo "built $(basename "$tarball") ($(du -h "$tarball" | cut -f1))"
# Dependencies come from the `ansible` package already on the Python path; install only this collection.
ANSIBLE_COLLECTIONS_PATH="$work/collections" ansible-galaxy collection install --force --no-deps -p "$work/collections" "$tarball" >/dev/null

# Nothing of the checkout may leak in: run from an empty directory with only the installed copy on the path.
mkdir -p "$work/run"
cat >"$work/run/smoke.yml" <<'PLAY'
---
- name: Use the installed collection
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run the node_facts module from the installed collection
      gpufleet.cluster.node_facts:
    - name: Run the preflight role from the installed collection
      ansible.builtin.include_role:
        name: gpufleet.cluster.preflight
      vars:
        preflight_allow_unsupported_os: true
    - name: The facts came back
      ansible.builtin.assert:
        that:
          - gpufleet_node.os.id | length > 0
          - gpufleet_node.gpu_count is number

- name: Read the shared settings from the installed collection
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.cluster.gpufleet_defaults
  tasks:
    - name: The shared defaults are there (from the installed role)
      ansible.builtin.assert:
        that:
          - gpufleet_launcher_path is match('/')
          - gpufleet_ssh_port | int > 0
PLAY
(
  cd "$work/run"
  printf "[defaults]\n" >ansible.cfg
  export ANSIBLE_COLLECTIONS_PATH="$work/collections" ANSIBLE_CONFIG="$work/run/ansible.cfg"
  for module in $(find "$work/collections/ansible_collections/gpufleet/cluster/plugins/modules" -maxdepth 1 -name '*.py' -printf '%f\n' | sed 's/\.py$//' | sort); do
    ansible-doc "gpufleet.cluster.$module" >/dev/null
    echo "ansible-doc ok: gpufleet.cluster.$module"
  done
  ansible-doc -t role gpufleet.cluster.gpufleet_defaults >/dev/null
  echo "ansible-doc ok: role gpufleet.cluster.gpufleet_defaults"
  ansible-playbook -i localhost, -c local -e 'ansible_python_interpreter={{ ansible_playbook_python }}' smoke.yml >"$work/smoke.log" 2>&1 || { cat "$work/smoke.log"; exit 1; }
  # Read the whole listing first: grep -q in a pipefail pipeline can end ansible-galaxy with SIGPIPE.
  listing=$(ansible-galaxy collection list gpufleet.cluster 2>/dev/null || true)
  grep -q "^# $work/collections/ansible_collections" <<<"$listing" \
    || { echo "installed collection not found on the scratch path"; echo "$listing"; exit 1; }
)
echo "collection ok: built, installed and used from $work/collections"
