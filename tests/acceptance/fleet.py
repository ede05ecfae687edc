"""What the acceptance tests share: the node under test, its expectations, small parsers."""
import ipaddress
import json
import re
import shlex

import pytest


class Expect(dict):
    """A node's expectations (a dict) that also knows its inventory name and the other hosts' expectations."""

    def __init__(self, data, name, everyone):
        super().__init__(data)
        self.name = name
        self.everyone = everyone

    def addresses_of(self, hosts):
        """IP addresses the inventory gives each of HOSTS: {host: [address, ...]} (DNS names left out)."""
        out = {}
        for other in hosts:
            values = self.everyone.get(other, {}).get("own_addresses", [])
            out[other] = sorted({str(ip) for ip in (_ip(v) for v in values) if ip is not None})
        return out


def _ip(value):
    try:
        return ipaddress.ip_address(str(value).strip())
    except ValueError:
        return None


class Node:
    """The node under test: commands as root, and readings cached for the session."""

    def __init__(self, host, cache, name, through_ansible=False):
        self.host = host
        self.cache = cache
        self.name = name
        self.through_ansible = through_ansible

    def run(self, command, *args):
        """Run COMMAND, with ARGS shell-quoted into its %s, as root on the node."""
        if args:
            command = command % tuple(shlex.quote(str(arg)) for arg in args)
        if self.through_ansible:
            # The Ansible shell module templates its arguments: a raw block keeps docker's --format '{{json .}}'
            # and the like as written.
            command = "{%% raw %%}%s{%% endraw %%}" % command
        return self.host.run(command)

    def check(self, command, *args):
        """stdout of a command that must succeed."""
        result = self.run(command, *args)
        shown = command % tuple(shlex.quote(str(arg)) for arg in args) if args else command
        said = (result.stderr or result.stdout).strip()[-800:]
        assert result.rc == 0, "%s on %s: rc=%d %s" % (shown, self.name, result.rc, said)
        return result.stdout

    def read(self, path):
        """A file's text, or None when it does not exist."""
        result = self.run("cat -- %s", path)
        return result.stdout if result.rc == 0 else None

    def _cached(self, key, compute):
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    @property
    def gpus(self):
        """The node's NVIDIA GPUs as the PCI bus lists them: vendor 0x10de, display class 0x03xxxx."""
        def compute():
            out = self.run("for d in /sys/bus/pci/devices/*; do [ -r \"$d/vendor\" ] || continue; "
                           "printf '%s %s %s\\n' \"${d##*/}\" \"$(cat \"$d/vendor\")\" \"$(cat \"$d/class\")\"; "
                           "done").stdout
            return [line.split()[0] for line in out.splitlines()
                    if len(line.split()) == 3 and line.split()[1] == "0x10de" and line.split()[2].startswith("0x03")]
        return self._cached("gpus", compute)

    def require_gpu(self):
        if not self.gpus:
            pytest.skip("%s has no NVIDIA GPU (no PCI device of vendor 0x10de and class 03xx)" % self.name)

    @property
    def container(self):
        """The container technology the node runs in ('docker', 'lxc', ...), or '' on a VM or metal."""
        def compute():
            result = self.run("systemd-detect-virt --container")
            return result.stdout.strip() if result.rc == 0 else ""
        return self._cached("container", compute)

    @property
    def addresses(self):
        """The node's own IP addresses."""
        def compute():
            out = self.check("ip -o addr show")
            return [m.group(1) for m in re.finditer(r"\sinet6?\s+([0-9a-fA-F:.]+)/\d+", out)]
        return self._cached("addresses", compute)

    @property
    def docker_info(self):
        return self._cached("docker_info", lambda: json.loads(self.check("docker info --format '{{json .}}'")))


def key_value_lines(text, separator="="):
    """{KEY: VALUE} of KEY=VALUE (or 'key = value') lines, comments and blank lines left out."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or separator not in line:
            continue
        key, _sep, value = line.partition(separator)
        out[key.strip()] = value.strip()
    return out


def in_network(address, network):
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_network(network, strict=False)
    except ValueError:
        return False


def listen_address(node, expect):
    """Where the exporters must listen ('' for every address), the way gpu_monitoring picks it: the node's
    address in the monitoring network, else its cluster address, else its address in the cluster network."""
    monitoring = expect["monitoring"]
    if monitoring["listen_all"]:
        return ""
    if monitoring["network"]:
        found = [a for a in node.addresses if in_network(a, monitoring["network"])]
        assert found, "%s has no address in the monitoring network %s" % (node.name, monitoring["network"])
        return found[0]
    if monitoring["cluster_address"] in node.addresses:
        return monitoring["cluster_address"]
    network = monitoring["cluster_network"]
    found = [a for a in node.addresses if network and in_network(a, network)]
    assert found, "%s: neither its cluster address %s nor an address in %s" % (
        node.name, monitoring["cluster_address"], monitoring["cluster_network"])
    return found[0]


def _bound(line):
    local = line.split()[3]
    address = local.rsplit(":", 1)[0].strip("[]").split("%")[0]
    return "" if address in ("0.0.0.0", "*", "::") else address


def scrape(node, expect, port):
    """Check what listens on PORT and fetch /metrics from the node itself; returns the body.

    With basic auth set (gpu_monitoring_web_basic_auth_users) the tests hold no scrape password: the exporter
    must then refuse an anonymous request (401), and the test that wanted the body is skipped saying so."""
    monitoring = expect["monitoring"]
    wanted = listen_address(node, expect)
    sockets = [line for line in node.check("ss -Hltn 'sport = :%d'" % port).splitlines() if line.strip()]
    assert sockets, "%s: nothing listens on port %d" % (node.name, port)
    bound = sorted({_bound(line) for line in sockets})
    if wanted:
        assert bound == [wanted], "%s: port %d is bound to %s, gpu_monitoring wants %s only" % (
            node.name, port, [b or "every address" for b in bound], wanted)
    else:
        assert "" in bound, "%s: port %d is bound to %s, gpu_monitoring_listen_all wants every address" % (
            node.name, port, bound)
    target = wanted or "127.0.0.1"
    if ":" in target:
        target = "[%s]" % ipaddress.ip_address(target)
    url = "%s://%s:%d/metrics" % ("https" if monitoring["tls"] else "http", target, port)
    # On the node itself: this proves the exporter serves; Prometheus checks the certificate with its CA.
    result = node.host.ansible("ansible.builtin.uri", "url=%s return_content=true validate_certs=false timeout=15 "
                                                      "status_code=200,401" % url, check=False)
    if monitoring["basic_auth"]:
        assert result["status"] == 401, "%s: %s answers %s without credentials" % (node.name, url, result["status"])
        pytest.skip("%s: %s refuses an anonymous scrape (401) as it should; the metrics were not read (no scrape "
                    "password is given to the tests)" % (node.name, url))
    assert result["status"] == 200, "%s: %s answered %s" % (node.name, url, result["status"])
    return result["content"]
