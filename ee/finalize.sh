#!/bin/sh
# Last step of the execution environment build (execution-environment.yml, append_final, run as root).
# Hand-written because no packaged tool does these three things for an ansible-builder image:
#  1. installs the cosign/trivy binaries an operator put in ee/bin/ (no base image packages them and the build
#     reaches no vendor download), after checking them against ee/bin/SHA256SUMS;
#  2. puts ansible-playbook and ssh-audit next to the Python that ansible-playbook runs under: playbooks/onboard.yml
#     runs "{{ ansible_playbook_python | dirname }}/ansible-playbook" and the validate role looks for
#     "{{ ansible_playbook_python | dirname }}/ssh-audit", while pip may have put both in another bin directory;
#  3. proves the image can run what the jobs need, so a broken image fails here and not in the first job.
#     finalize.sh BIN_DROP_DIR
set -eu
drop=${1:?usage: finalize.sh BIN_DROP_DIR}

# 1. Operator-provided binaries: only cosign and trivy, only with a matching SHA256SUMS line each.
tools=""
for file in "$drop"/*; do
  name=$(basename "$file")
  case "$name" in
    README.md | SHA256SUMS | '*') ;;
    cosign | trivy) tools="$tools $name" ;;
    *)
      echo "finalize: ee/bin/$name is not cosign or trivy; remove it" >&2
      exit 1
      ;;
  esac
done
for tool in $tools; do
  if ! grep -Eq "^[0-9a-f]{64}  $tool\$" "$drop/SHA256SUMS" 2>/dev/null; then
    echo "finalize: ee/bin/$tool has no line in ee/bin/SHA256SUMS (sha256sum $tool > SHA256SUMS)" >&2
    exit 1
  fi
  (cd "$drop" && grep -E "  $tool\$" SHA256SUMS | sha256sum -c -)
  install -m 0755 "$drop/$tool" "/usr/local/bin/$tool"
done
for tool in $tools; do
  case "$tool" in
    cosign) /usr/local/bin/cosign version >/dev/null ;;
    trivy) /usr/local/bin/trivy --version >/dev/null ;;
  esac
  echo "finalize: installed $tool"
done

# 2. ansible_playbook_python is the interpreter on ansible-playbook's first line.
playbook=$(command -v ansible-playbook)
interpreter=$(sed -n '1s/^#![[:space:]]*//p' "$playbook" | cut -d' ' -f1)
bindir=$(dirname "$interpreter")
for tool in ansible-playbook ssh-audit; do
  found=$(command -v "$tool") || { echo "finalize: $tool is not installed" >&2; exit 1; }
  if [ ! -e "$bindir/$tool" ]; then
    ln -s "$found" "$bindir/$tool"
    echo "finalize: linked $bindir/$tool -> $found"
  fi
done

# 3. What the jobs run.
"$bindir/ansible-playbook" --version >/dev/null
"$bindir/ssh-audit" -h >/dev/null
command -v ssh-keygen >/dev/null || { echo "finalize: ssh-keygen is missing (openssh client)" >&2; exit 1; }
ansible-doc gpufleet.cluster.node_facts >/dev/null
echo "finalize: ansible-playbook and ssh-audit in $bindir, gpufleet.cluster installed"
