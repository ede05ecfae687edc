#!/usr/bin/env python3
"""The local lab: systemd node containers reached by Ansible over real SSH.

    python scripts/lab.py up [--nodes N]   start N nodes (default 2) and the lab registry, publish the signed CPU
                                            training image, run site.yml twice, validate.yml and the acceptance
                                            tests
    python scripts/lab.py nodes [--nodes N] only start the nodes and write the inventory
    python scripts/lab.py run [ARGS...]    run site.yml against the lab (extra ansible-playbook ARGS)
    python scripts/lab.py acceptance [ARGS...]  the acceptance tests (tests/acceptance) against the lab's nodes
    python scripts/lab.py down              remove every container, network, volume and key the lab made

Playbooks run through ansible-runner (its event stream gives the recap and the timings; the output streams to
the terminal as ansible-playbook prints it), with the ansible-playbook installed beside this Python (.venv/bin)
first on PATH, as make gives it.

Environment: GPUFLEET_NODE_IMAGE (node image), LAB_SUBNET (default 172.30.240.0/24), LAB_NETWORK
(default gpufleet-lab). Everything the lab creates carries the label gpufleet.lab=1.
"""
import argparse
import ipaddress
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB_DIR = os.path.join(ROOT, ".lab")
KEY = os.path.join(LAB_DIR, "id_ed25519")
KNOWN_HOSTS = os.path.join(LAB_DIR, "known_hosts")
INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
IMAGE = os.environ.get("GPUFLEET_NODE_IMAGE", "gpufleet-node:trixie")
NETWORK = os.environ.get("LAB_NETWORK", "gpufleet-lab")
SUBNET = ipaddress.ip_network(os.environ.get("LAB_SUBNET", "172.30.240.0/24"))
LABEL = "gpufleet.lab=1"
REGISTRY = "gpufleet-lab-registry"
REGISTRY_NAME = "registry.lab.gpufleet.test"
REGISTRY_DIR = os.path.join(LAB_DIR, "registry")
IMAGES_DIR = os.path.join(ROOT, ".cache", "images")
# Where the node container is defined once, for molecule's scenarios and this lab alike.
MOLECULE_BASE = os.path.join(ROOT, ".config", "molecule", "config.yml")
# The account Ansible logs in as and becomes root from, as a cloud image's default user: sshd refuses root.
ADMIN = "gpufleet-admin"


def sh(cmd, check=True, capture=False, **kwargs):
    result = subprocess.run(cmd, check=False, text=True,
                            stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.STDOUT if capture else None, **kwargs)
    if check and result.returncode != 0:
        if capture:
            sys.stderr.write(result.stdout or "")
        raise SystemExit("lab: command failed (%d): %s" % (result.returncode, " ".join(cmd)))
    return result


def log(message):
    print("lab: %s" % message, flush=True)


def node_name(index):
    return "lab-node%d" % index


def container_name(index):
    return "gpufleet-lab-node%d" % index


def node_address(index):
    # .1 is the bridge gateway, .5 the registry; nodes start at .11
    return str(SUBNET.network_address + 10 + index)


def registry_address():
    return str(SUBNET.network_address + 5)


# Keys of gpufleet_molecule_node that only molecule's docker driver reads (the lab names its image itself).
MOLECULE_ONLY_KEYS = ("image", "pre_build_image", "override_command", "keep_volumes")


def node_container_options(path=MOLECULE_BASE):
    """(docker run options, command) of a node container, from gpufleet_molecule_node in the molecule base config:
    the lab's nodes are the containers molecule's scenarios create."""
    with open(path) as stream:
        node = yaml.safe_load(stream)["provisioner"]["inventory"]["group_vars"]["all"]["gpufleet_molecule_node"]
    unknown = sorted(set(node) - set(MOLECULE_ONLY_KEYS) - {
        "capabilities", "security_opts", "cgroupns_mode", "volumes", "tmpfs", "command"})
    if unknown:
        raise SystemExit("lab: %s sets %s for node containers, which scripts/lab.py does not pass to docker run yet"
                         % (path, ", ".join(unknown)))
    options = []
    for flag, values in (("--cap-add", node.get("capabilities", [])), ("--security-opt", node.get("security_opts", [])),
                         ("-v", node.get("volumes", [])), ("--tmpfs", node.get("tmpfs", []))):
        for value in values:
            options += [flag, value]
    if node.get("cgroupns_mode"):
        options += ["--cgroupns", node["cgroupns_mode"]]
    return options, shlex.split(node["command"])


def container_args(name, hostname, address, *extra):
    """docker run arguments of a systemd node container on the lab network (no --privileged)."""
    options, command = node_container_options()
    return (["docker", "run", "-d", "--name", name, "--hostname", hostname, "--label", LABEL,
             "--network", NETWORK, "--ip", address, "--network-alias", hostname]
            + options + list(extra) + [IMAGE] + command)


def ensure_prerequisites():
    sh([os.path.join(ROOT, "scripts", "ensure-docker.sh")])
    sh([os.path.join(ROOT, "scripts", "build-node-image.sh")])
    sh([os.path.join(ROOT, "scripts", "build-training-image.sh")])
    sh([os.path.join(ROOT, "scripts", "ensure-apt-cache.sh")])
    os.makedirs(LAB_DIR, exist_ok=True)
    os.makedirs(REGISTRY_DIR, exist_ok=True)
    secret = os.path.join(REGISTRY_DIR, "password")
    if not os.path.exists(secret):
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
            handle.write(secrets.token_urlsafe(24) + "\n")
    if not os.path.exists(KEY):
        log("making the lab SSH key %s" % os.path.relpath(KEY, ROOT))
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-lab", "-f", KEY])


def ensure_network():
    if sh(["docker", "network", "inspect", NETWORK], check=False, capture=True).returncode == 0:
        return
    log("creating network %s (%s)" % (NETWORK, SUBNET))
    sh(["docker", "network", "create", "--label", LABEL, "--subnet", str(SUBNET), NETWORK], capture=True)


def start_node(index):
    name = container_name(index)
    if sh(["docker", "container", "inspect", name], check=False, capture=True).returncode == 0:
        return False
    log("starting %s at %s" % (node_name(index), node_address(index)))
    sh(container_args(name, node_name(index), node_address(index)), capture=True)
    return True


def start_registry():
    """The lab registry: a node container that also publishes the training image archive it is given."""
    if sh(["docker", "container", "inspect", REGISTRY], check=False, capture=True).returncode == 0:
        return
    log("starting the lab registry %s at %s" % (REGISTRY_NAME, registry_address()))
    sh(container_args(REGISTRY, "lab-registry", registry_address(), "--network-alias", REGISTRY_NAME,
                      "-v", "%s:/srv/gpufleet-images:ro" % IMAGES_DIR), capture=True)


def wait_for_boot(name):
    for _attempt in range(120):
        state = sh(["docker", "exec", name, "systemctl", "is-system-running"], check=False, capture=True)
        if state.stdout.strip() in ("running", "degraded"):
            return
        time.sleep(1)
    raise SystemExit("lab: %s did not finish booting" % name)


def authorize(index):
    """The node's admin account with the lab key and sudo, made the way a provider's image or cloud-init makes it
    (uid 2000: the training user keeps 1000, the uid its image runs as)."""
    authorize_container(container_name(index))


def authorize_container(name):
    """authorize() for any lab container by its name (scripts/benchmark.py's peer node has no index)."""
    with open(KEY + ".pub") as handle:
        pub = handle.read().strip()
    home = "/home/" + ADMIN
    script = (
        "id -u {admin} >/dev/null 2>&1 || useradd -m -u 2000 -s /bin/bash -G sudo {admin}; "
        "echo '{admin} ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/90-{admin} && chmod 0440 /etc/sudoers.d/90-{admin}; "
        "install -d -m 0700 -o {admin} -g {admin} {home}/.ssh && touch {home}/.ssh/authorized_keys && "
        "chown {admin}: {home}/.ssh/authorized_keys && chmod 0600 {home}/.ssh/authorized_keys && "
        "(grep -qxF '{pub}' {home}/.ssh/authorized_keys || echo '{pub}' >> {home}/.ssh/authorized_keys)"
    ).format(admin=ADMIN, home=home, pub=pub)
    sh(["docker", "exec", name, "sh", "-c", script])


def host_key_line(index):
    """The node's own ed25519 host key, read from inside it (trusted path), for the controller's known_hosts."""
    return container_host_key_line(container_name(index), node_name(index), node_address(index))


def container_host_key_line(name, hostname, address):
    """host_key_line() for any lab container by its name, host name and address."""
    key = sh(["docker", "exec", name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub"], capture=True).stdout.split()
    return "%s,%s %s %s" % (hostname, address, key[0], key[1])


def lab_indexes():
    out = sh(["docker", "ps", "-a", "--filter", "label=" + LABEL, "--format", "{{.Names}}"], capture=True).stdout
    found = sorted(int(m.group(1)) for m in re.finditer(r"gpufleet-lab-node(\d+)", out))
    return found


def write_inventory(indexes):
    lines = [
        "---",
        "# Written by scripts/lab.py for the running lab; removed by `make lab-down`.",
        "all:",
        "  vars:",
        "    gpufleet_cluster_network: %s" % SUBNET,
        "  children:",
        "    gpu_nodes:",
        "      hosts:",
    ]
    for index in indexes:
        lines += ["        %s:" % node_name(index), "          ansible_host: %s" % node_address(index)]
    lines += ["    login_nodes:", "      hosts: {}",
              "    registries:", "      hosts:",
              "        lab-registry:",
              "          ansible_connection: community.docker.docker",
              "          ansible_host: %s" % REGISTRY,
              "          registry_address: %s" % registry_address(),
              "    image_builders:", "      hosts:", "        lab-registry: {}"]
    if indexes:
        # The first node also runs Prometheus (site.yml's play for the monitoring_servers group).
        lines += ["    monitoring_servers:", "      hosts:", "        %s: {}" % node_name(indexes[0])]
    os.makedirs(os.path.dirname(INVENTORY), exist_ok=True)
    with open(INVENTORY, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    with open(KNOWN_HOSTS, "w") as handle:
        handle.write("\n".join(host_key_line(i) for i in indexes) + "\n")


def wait_for_ssh(indexes):
    for index in indexes:
        for _attempt in range(60):
            probe = sh(["ssh", "-i", KEY, "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + KNOWN_HOSTS,
                        "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=3",
                        "%s@%s" % (ADMIN, node_address(index)), "sudo", "-n", "true"], check=False, capture=True)
            if probe.returncode == 0:
                break
            time.sleep(1)
        else:
            raise SystemExit("lab: cannot reach %s over SSH: %s" % (node_name(index), probe.stdout))


def nodes(count):
    ensure_prerequisites()
    ensure_network()
    wanted = list(range(1, count + 1))
    for index in wanted:
        start_node(index)
    start_registry()
    for index in wanted:
        wait_for_boot(container_name(index))
        authorize(index)
    wait_for_boot(REGISTRY)
    indexes = lab_indexes()
    write_inventory(indexes)
    wait_for_ssh(indexes)
    log("%d node(s) up: %s" % (len(indexes), ", ".join(node_name(i) for i in indexes)))
    return indexes


def tool_path():
    """PATH with the directory of this Python's own tools first (.venv/bin when run with .venv/bin/python), as
    make sets it: ansible-playbook, ansible-runner and the collections' Python come from one install."""
    return os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])


def run_playbook(path, *extra, quiet=False, on_event=None, inventory=None, env=None):
    """Run one playbook against the lab with ansible-runner; return (rc, stats).

    stats is the PLAY RECAP as numbers ({'changed': {host: n}, 'failures': ...}). The output streams to the
    terminal unless quiet; on_event, when given, gets every runner event (task results with their timings); env
    adds environment variables for this run only (a strategy, a collections path, a fact cache)."""
    try:
        import ansible_runner
    except ImportError:
        raise SystemExit("lab: ansible-runner is not installed for %s. Run `make lab` (it makes .venv), or use "
                         ".venv/bin/python scripts/lab.py ..." % sys.executable)
    search = tool_path()
    if not shutil.which("ansible-playbook", path=search):
        raise SystemExit("lab: ansible-playbook was not found beside %s nor on PATH. Run `make lab` (it makes "
                         ".venv with the pinned Ansible), or put the virtual environment first on PATH: "
                         "export PATH=$PWD/.venv/bin:$PATH" % sys.executable)
    inventory = inventory or os.path.join(ROOT, "inventories", "lab")
    if inventory == os.path.join(ROOT, "inventories", "lab") and not os.path.exists(INVENTORY):
        raise SystemExit("lab: no lab is running (%s is missing): start it with `make lab`"
                         % os.path.relpath(INVENTORY, ROOT))
    stats = {}

    def handler(event):
        if event.get("event") == "playbook_on_stats":
            stats.update(event.get("event_data", {}))
        if on_event is not None:
            on_event(event)
        return False  # nothing is kept on disk: the handlers have what they need

    envvars = {
        "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"),
        "PATH": search,
        # ansible-runner turns host key checking off unless told otherwise; the lab checks every node's key.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }
    envvars.update(env or {})
    with tempfile.TemporaryDirectory(prefix="gpufleet-runner-") as private:
        result = ansible_runner.run(
            private_data_dir=private, project_dir=ROOT, playbook=os.path.join(ROOT, path),
            inventory=[inventory], cmdline=shlex.join(extra) if extra else None, envvars=envvars,
            suppress_env_files=True, quiet=quiet, event_handler=handler,
            # ansible.cfg's fact cache (.cache/facts) stays: ansible-runner would point it at its own artifacts.
            fact_cache_type=None)
    if not quiet:
        print(flush=True)  # ansible-playbook's last line has no newline under ansible-runner
    return result.rc, stats


def recap_changed(stats):
    """Sum of changed= over the PLAY RECAP of one run."""
    return sum((stats.get("changed") or {}).values())


def publish_image(quiet=False):
    """The lab registry (TLS from a lab CA, htpasswd), then the CPU training image pushed, signed and verified."""
    log("setting up the lab registry (TLS, htpasswd, cosign key)")
    rc, _unused = run_playbook(os.path.join("molecule", "_shared", "registry.yml"), quiet=quiet)
    if rc != 0:
        raise SystemExit("lab: the registry set-up failed (rc=%d)" % rc)
    log("publishing the training image: push, scan gate, cosign sign")
    rc, _unused = run_playbook(os.path.join("playbooks", "build_image.yml"), quiet=quiet)
    if rc != 0:
        raise SystemExit("lab: playbooks/build_image.yml failed (rc=%d)" % rc)


def acceptance(*extra):
    """The acceptance tests against the lab's nodes: the same command `make acceptance` runs."""
    cmd = [sys.executable, "-m", "pytest", "-v", "-rs", os.path.join("tests", "acceptance"),
           "--hosts=ansible://gpu_nodes", "--ansible-inventory=" + os.path.join("inventories", "lab")] + list(extra)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), PATH=tool_path())
    return subprocess.call(cmd, cwd=ROOT, env=env)


# What systemd (PID 1) logs when it reloads its units, or starts, stops or reloads a service site.yml manages: a
# run that changes nothing must log none of it (a daemon-reload takes running GPU containers' devices away under
# Docker's systemd cgroup driver where the /dev/char links are missing). Login sessions and timers' own runs are
# not the run's doing. The same list and rules as molecule/cluster/drift.yml.
MANAGED_SERVICES = (r"(ssh|sshd|docker|containerd|fail2ban|nftables|gpufleet-[a-z-]+|prometheus-node-exporter|node_exporter"
                    r"|dcgm-exporter|nvidia-[a-z-]+|unattended-upgrades|chkrootkit|aide|dailyaidecheck)\.(service|timer)")
SYSTEMD_NOISE = re.compile(r"^(Reloading|Reloaded|Reload requested)|^(Starting|Started|Stopping|Stopped|Restarting|Reloading) "
                           + MANAGED_SERVICES)
# systemd names the unit of the process that asked for a daemon-reload. One in a service unit is the node's own doing
# (the hourly apt-listchanges job disables its own timer), not the run's: the run's commands belong to no service.
NODE_RELOAD = re.compile(r"^Reload requested from client PID [0-9]+ .*\(unit [^)]+\.service\)")
RELOAD_LINE = re.compile(r"^Reloading(\.*| finished .*)$")


def journal_cursor(index):
    """The cursor of the node's journal now."""
    out = sh(["docker", "exec", container_name(index), "journalctl", "-n", "0", "--show-cursor", "--quiet"],
             capture=True).stdout
    return out.strip().splitlines()[-1].replace("-- cursor: ", "")


def systemd_noise(index, cursor):
    """What systemd logged on the node after the cursor about reloads, starts and stops."""
    out = sh(["docker", "exec", container_name(index), "journalctl", "--after-cursor", cursor, "_PID=1", "-o", "cat",
              "--no-pager"], capture=True).stdout
    lines = out.splitlines()
    own = sum(1 for line in lines if NODE_RELOAD.search(line))
    noise = [line for line in lines
             if SYSTEMD_NOISE.search(line) and not NODE_RELOAD.search(line) and not RELOAD_LINE.match(line)]
    # Each reload the node asked for itself accounts for its "Reloading..." and "Reloading finished" lines.
    return noise + [line for line in lines if RELOAD_LINE.match(line)][2 * own:]


WRONG_USER = "gpufleet-no-such-user"
IGNORED = re.compile(r"\[sshd\] Ignore (\S+) by ")
BANNED = re.compile(r"\[sshd\] Ban (\S+)")


def wrong_user_logins(index, attempts=8):
    """Log in to the node as a user it does not have, with the lab key, as an inventory with a wrong ansible_user
    does: more failures than fail2ban's maxretry. Returns (addresses fail2ban logged as ignored, as banned) after."""
    start = sh(["docker", "exec", container_name(index), "sh", "-c", "wc -l < /var/log/fail2ban.log"],
               capture=True).stdout.strip() or "0"
    for _attempt in range(attempts):
        sh(["ssh", "-i", KEY, "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + KNOWN_HOSTS,
            "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
            "%s@%s" % (WRONG_USER, node_address(index)), "true"], check=False, capture=True)
    time.sleep(3)
    out = sh(["docker", "exec", container_name(index), "tail", "-n", "+%d" % (int(start) + 1),
              "/var/log/fail2ban.log"], capture=True).stdout
    return sorted(set(IGNORED.findall(out))), sorted(set(BANNED.findall(out)))


def up(count):
    indexes = nodes(count)
    publish_image()
    log("converging site.yml")
    rc, _unused = run_playbook("site.yml")
    if rc != 0:
        raise SystemExit("lab: site.yml failed (rc=%d)" % rc)
    log("second run of site.yml: must change nothing, and make systemd reload, start or stop nothing")
    cursors = dict((index, journal_cursor(index)) for index in indexes)
    rc, stats = run_playbook("site.yml")
    changed = recap_changed(stats)
    if rc != 0 or changed:
        raise SystemExit("lab: second site.yml run rc=%d changed=%d (expected 0 and 0)" % (rc, changed))
    noise = dict((node_name(index), systemd_noise(index, cursor)) for index, cursor in cursors.items())
    noise = dict((name, lines) for name, lines in noise.items() if lines)
    if noise:
        raise SystemExit("lab: the second site.yml run made systemd act: %s" % noise)
    log("second run: changed=0, and systemd's journal shows no reload, start or stop on %d node(s)" % len(indexes))
    log("logins as a user the nodes do not have, from the controller: fail2ban must see them and ban nobody")
    for index in indexes:
        ignored, banned = wrong_user_logins(index)
        if banned or not ignored:
            raise SystemExit("lab: after failed logins from the controller, fail2ban on %s logged ignored %s and "
                             "banned %s (expected the controller's address ignored, nobody banned)"
                             % (node_name(index), ignored or "none", banned or "none"))
        # At once, no retry: neither fail2ban nor sshd's PerSourcePenalties may hold the controller back.
        probe = sh(["ssh", "-i", KEY, "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + KNOWN_HOSTS,
                    "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
                    "%s@%s" % (ADMIN, node_address(index)), "true"], check=False, capture=True)
        if probe.returncode != 0:
            raise SystemExit("lab: right after the failed logins the controller cannot log in to %s: %s"
                             % (node_name(index), probe.stdout))
        log("%s: fail2ban ignored %s, banned nobody; the next login went through at once"
            % (node_name(index), ", ".join(ignored)))
    rc, _unused = run_playbook(os.path.join("playbooks", "validate.yml"))
    if rc != 0:
        raise SystemExit("lab: validate.yml failed (rc=%d)" % rc)
    log("acceptance tests (tests/acceptance) on the lab's nodes")
    rc = acceptance()
    if rc != 0:
        raise SystemExit("lab: the acceptance tests failed (rc=%d)" % rc)
    log("done; `make lab-down` removes the lab")


def down():
    out = sh(["docker", "ps", "-aq", "--filter", "label=" + LABEL], check=False, capture=True).stdout.split()
    if out:
        log("removing %d container(s)" % len(out))
        sh(["docker", "rm", "-f", "-v"] + out, capture=True)
    nets = sh(["docker", "network", "ls", "-q", "--filter", "label=" + LABEL], check=False, capture=True).stdout.split()
    for net in nets:
        sh(["docker", "network", "rm", net], check=False, capture=True)
    for path in (INVENTORY,):
        if os.path.exists(path):
            os.remove(path)
    shutil.rmtree(LAB_DIR, ignore_errors=True)
    # The lab's cluster key pair (cluster_ssh keeps it beside the inventory).
    shutil.rmtree(os.path.join(ROOT, "inventories", "lab", ".gpufleet"), ignore_errors=True)
    log("lab removed (the node image and the shared apt cache stay; `make clean` removes the cache)")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "nodes"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--nodes", type=int, default=int(os.environ.get("LAB_NODES", "2")))
    for name, what in (("run", "ansible-playbook"), ("acceptance", "pytest")):
        cmd = sub.add_parser(name, help="extra arguments go to %s as they are" % what)
        cmd.add_argument("extra", nargs="*", help="passed to %s (--tags, --limit, -k ...)" % what)
    sub.add_parser("down")
    if argv[:1] in (["run"], ["acceptance"]) and not {"-h", "--help"} & set(argv[1:2]):
        # Everything after the command belongs to ansible-playbook or pytest: argparse would take their
        # options (--tags, -k) as its own.
        args = argparse.Namespace(command=argv[0], extra=argv[2:] if argv[1:2] == ["--"] else argv[1:])
    else:
        args = parser.parse_args(argv)
    if args.command in ("up", "nodes") and not 1 <= args.nodes <= 200:
        parser.error("--nodes must be between 1 and 200")
    if args.command == "up":
        up(args.nodes)
    elif args.command == "nodes":
        nodes(args.nodes)
    elif args.command == "run":
        return run_playbook("site.yml", *args.extra)[0]
    elif args.command == "acceptance":
        if not os.path.exists(INVENTORY):
            raise SystemExit("lab: no lab is running (%s is missing): start it with `make lab`"
                             % os.path.relpath(INVENTORY, ROOT))
        return acceptance(*args.extra)
    else:
        down()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
