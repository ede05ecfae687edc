#!/usr/bin/env bash
# ansible-playbook --syntax-check of site.yml and every playbook under playbooks/.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for playbook in site.yml playbooks/*.yml; do
  [ -e "$playbook" ] || continue
  if ansible-playbook -i inventories/prod --syntax-check "$playbook" >/tmp/gpufleet-syntax.log 2>&1; then
    echo "syntax ok: $playbook"
  else
    echo "syntax FAILED: $playbook"; cat /tmp/gpufleet-syntax.log; status=1
  fi
done
exit $status
