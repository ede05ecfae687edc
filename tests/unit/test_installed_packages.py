"""installed_packages and node_facts(packages: true) on captured dpkg and rpm databases.

Each parser is held against what the package manager itself and ansible.builtin.package_facts said about the same
system at the same moment (tests/fixtures/dpkg, tests/fixtures/rpm): preflight replaced package_facts with node_facts,
so every role's packages_missing call must see the same answer as before.
"""
import json
import os
import time

import pytest

from ansible_collections.gpufleet.cluster.plugins.filter.packages import packages_missing
from ansible_collections.gpufleet.cluster.plugins.module_utils import installed_packages as ip
from ansible_collections.gpufleet.cluster.plugins.modules import node_facts
from conftest import fixture_parts
from module_harness import patch_module, run_main

DPKG_STATUS = fixture_parts("dpkg", "status-trixie-node.txt")[1]
DPKG_QUERY = fixture_parts("dpkg", "dpkg-query-trixie-node.txt")[1]
DPKG_PACKAGE_FACTS = json.loads(fixture_parts("dpkg", "package-facts-trixie-node.txt")[1])
RPM_QA = fixture_parts("rpm", "rpm-qa-debian-rpm-4.20.txt")[1]
RPM_PACKAGE_FACTS = json.loads(fixture_parts("rpm", "package-facts-debian-rpm-4.20.txt")[1])


def dpkg_query_installed():
    """{binary:Package: (version, arch)} of the lines dpkg-query marks installed (ii, hi)."""
    result = {}
    for line in DPKG_QUERY.splitlines():
        name, version, arch, abbrev = line.split("\t")
        if abbrev.strip() in ("ii", "hi"):
            result[name] = (version, arch)
    return result


def test_dpkg_fixture_holds_the_states_it_claims():
    statuses = [line for line in DPKG_STATUS.splitlines() if line.startswith("Status: ")]
    assert len(statuses) == 32
    assert "Status: hold ok installed" in statuses
    assert "Status: deinstall ok config-files" in statuses
    assert "Status: install ok unpacked" in statuses


def test_dpkg_status_agrees_with_dpkg_query():
    packages = ip.parse_dpkg_status(DPKG_STATUS)
    # dpkg-query qualifies Multi-Arch: same packages of the native architecture (libc6:amd64); package_facts does not.
    expected = {name[:-len(":amd64")] if name.endswith(":amd64") else name: value
                for name, value in dpkg_query_installed().items()}
    assert {name: (entries[0]["version"], entries[0]["arch"]) for name, entries in packages.items()} == expected
    assert all(len(entries) == 1 for entries in packages.values())
    assert len(packages) == 30


def test_dpkg_status_agrees_with_package_facts():
    """Same keys and the same name/version/arch/source as package_facts, except the one package dpkg has only
    unpacked: python-apt lists it, node_facts does not (its install task then runs and apt configures it)."""
    packages = ip.parse_dpkg_status(DPKG_STATUS)
    trimmed = {name: [{key: entry[key] for key in ("name", "version", "arch", "source")} for entry in entries]
               for name, entries in DPKG_PACKAGE_FACTS.items()}
    assert set(trimmed) - set(packages) == {"hello"}
    del trimmed["hello"]
    assert packages == trimmed


def test_dpkg_states_that_are_not_installed():
    packages = ip.parse_dpkg_status(DPKG_STATUS)
    assert "sudo" not in packages  # rc: removed, configuration kept
    assert "hello" not in packages  # unpacked, never configured
    assert packages["hostname"] == [{"name": "hostname", "version": "3.25", "arch": "amd64", "source": "apt"}]


def test_dpkg_foreign_architecture_is_listed_apart():
    packages = ip.parse_dpkg_status(DPKG_STATUS)
    assert packages["gcc-14-base"][0]["arch"] == "amd64"
    assert packages["gcc-14-base:i386"] == [
        {"name": "gcc-14-base:i386", "version": "14.2.0-19", "arch": "i386", "source": "apt"}]
    assert packages["tzdata"][0]["arch"] == "all"
    # Told that i386 is native (an i386 dpkg), the amd64 stanza becomes the foreign one.
    as_i386 = ip.parse_dpkg_status(DPKG_STATUS, native_arch="i386")
    assert as_i386["gcc-14-base"][0]["arch"] == "i386"
    assert as_i386["dpkg:amd64"][0]["version"] == "1.22.22"


def test_native_architecture_comes_from_dpkg_itself():
    stanzas = list(ip.dpkg_stanzas(DPKG_STATUS))
    assert ip.native_dpkg_arch(stanzas) == "amd64"
    without_dpkg = [fields for fields in stanzas if fields["package"] != "dpkg"]
    assert ip.native_dpkg_arch(without_dpkg) == "amd64"
    assert ip.native_dpkg_arch([]) is None


def test_dpkg_answers_packages_missing_as_package_facts_did():
    names = ["openssh-server", "hello", "sudo", "gcc-14-base:i386", "libc6", "nftables", "openssh-server=1:10.0p1-*",
             "openssh-server=1:9.*"]
    ours = packages_missing(names, ip.parse_dpkg_status(DPKG_STATUS))
    before = packages_missing(names, DPKG_PACKAGE_FACTS)
    assert ours == ["hello", "sudo", "nftables", "openssh-server=1:9.*"]
    assert [name for name in before if name != "hello"] == [name for name in ours if name != "hello"]


def test_rpm_qa_agrees_with_package_facts():
    """Same entries as package_facts (manager rpm) for the same database, rpm's "(none)" as null where package_facts
    writes the string "None"."""
    packages = ip.parse_rpm_qa(RPM_QA)
    expected = {name: [dict(entry, **{key: None for key in ("epoch", "arch") if entry[key] == "None"})
                       for entry in entries]
                for name, entries in RPM_PACKAGE_FACTS.items()}
    assert packages == expected
    assert [entry["version"] for entry in packages["capture-data"]] == ["0.9", "1.0"]
    assert packages["capture-tool"][0]["epoch"] == "2"
    assert packages["gpg-pubkey"][0]["arch"] is None
    assert packages_missing(["capture-tool=1.17.*", "capture-data=1.0", "capture-data=2.*"], packages) == [
        "capture-data=2.*"]


def test_rpm_lines_it_cannot_read_are_left_out():
    assert ip.parse_rpm_qa("warning: something\nfoo\t(none)\t1\t2\n\n") == {}
    assert ip.parse_dpkg_status("") == {}


# --- node_facts itself, run in-process on a recorded root


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


@pytest.fixture
def recorded_root(tmp_path):
    root = str(tmp_path)
    write(os.path.join(root, "etc/os-release"), fixture_parts("os-release", "debian-13-trixie")[1])
    return root


def test_node_facts_returns_packages_beside_the_facts_not_in_them(monkeypatch, recorded_root):
    write(os.path.join(recorded_root, "var/lib/dpkg/status"), DPKG_STATUS)
    calls = []
    patch_module(monkeypatch, lambda module, args, **kwargs: calls.append(args) or (1, "", ""))
    result = run_main(node_facts.main, {"root": recorded_root, "packages": True, "use_mokutil": False})
    assert result["packages"] == ip.parse_dpkg_status(DPKG_STATUS)
    assert set(result["ansible_facts"]) == {"gpufleet_node"}
    assert "packages" not in result["ansible_facts"]["gpufleet_node"]
    assert result["changed"] is False
    assert calls == []  # dpkg: the file is read, no command runs


def test_node_facts_without_packages_reads_none(monkeypatch, recorded_root):
    write(os.path.join(recorded_root, "var/lib/dpkg/status"), DPKG_STATUS)
    patch_module(monkeypatch, lambda module, args, **kwargs: (1, "", ""))
    result = run_main(node_facts.main, {"root": recorded_root, "use_mokutil": False})
    assert "packages" not in result


def test_node_facts_asks_rpm_without_a_dpkg_database(monkeypatch, recorded_root):
    calls = []

    def run_command(module, args, **kwargs):
        calls.append((args, kwargs.get("environ_update")))
        return 0, RPM_QA, ""

    patch_module(monkeypatch, run_command)
    result = run_main(node_facts.main, {"root": recorded_root, "packages": True, "use_mokutil": False})
    assert result["packages"] == ip.parse_rpm_qa(RPM_QA)
    assert calls == [(["/usr/bin/rpm", "--root", recorded_root, "-qa", "--queryformat", ip.RPM_QUERYFORMAT],
                      {"LANGUAGE": "C", "LC_ALL": "C"})]


def test_node_facts_warns_when_rpm_fails(monkeypatch, recorded_root):
    warnings = []
    patch_module(monkeypatch, lambda module, args, **kwargs: (1, "", "error: rpmdb open failed\n"))
    monkeypatch.setattr(node_facts.AnsibleModule, "warn", lambda module, text: warnings.append(text))
    result = run_main(node_facts.main, {"root": recorded_root, "packages": True, "use_mokutil": False})
    assert result["packages"] is None
    assert warnings and "rpmdb open failed" in warnings[0] and "packages not read" in warnings[0]


def test_node_facts_says_how_old_apts_package_lists_are_where_apt_looks(monkeypatch, recorded_root):
    """package_lists_age is read where apt's cache_valid_time reads it: the update-success stamp, else the lists
    directory; without dpkg it is null."""
    write(os.path.join(recorded_root, "var/lib/dpkg/status"), DPKG_STATUS)
    lists = os.path.join(recorded_root, "var/lib/apt/lists")
    os.makedirs(lists)
    patch_module(monkeypatch, lambda module, args, **kwargs: (1, "", ""))
    now = time.time()
    os.utime(lists, (now - 7200, now - 7200))
    age = run_main(node_facts.main, {"root": recorded_root, "packages": True, "use_mokutil": False})[
        "package_lists_age"]
    assert 7200 <= age <= 7200 + 60
    stamp = os.path.join(recorded_root, "var/lib/apt/periodic/update-success-stamp")
    write(stamp, "")
    os.utime(stamp, (now - 600, now - 600))
    age = run_main(node_facts.main, {"root": recorded_root, "packages": True, "use_mokutil": False})[
        "package_lists_age"]
    assert 600 <= age <= 600 + 60  # the stamp wins over the directory, as in apt
    assert node_facts.package_lists_age(recorded_root, now=now - 3600) == 0  # a clock behind the stamp: 0, not < 0
    assert "package_lists_age" not in run_main(node_facts.main, {"root": recorded_root, "use_mokutil": False})
    os.remove(os.path.join(recorded_root, "var/lib/dpkg/status"))
    patch_module(monkeypatch, lambda module, args, **kwargs: (0, RPM_QA, ""))
    assert run_main(node_facts.main, {"root": recorded_root, "packages": True,
                                      "use_mokutil": False})["package_lists_age"] is None


def test_package_lists_age_is_none_without_apt(tmp_path):
    assert node_facts.package_lists_age(str(tmp_path)) is None


def test_apt_state_changes_with_every_input_of_apts_upgrade_answer_and_nothing_else(monkeypatch, recorded_root):
    """apt_state is the same while dpkg's status, the package lists and /etc/apt are untouched, and differs after
    any install, list refresh (a file renamed into place), source, pin or setting change; apt's lock files and
    the download folder do not count; a dangling link counts as itself; no dpkg, no state."""
    root = recorded_root
    write(os.path.join(root, "var/lib/dpkg/status"), DPKG_STATUS)
    lists = os.path.join(root, "var/lib/apt/lists")
    write(os.path.join(lists, "deb.example_debian_dists_trixie_main_binary-amd64_Packages"), "Package: a\n")
    write(os.path.join(root, "etc/apt/sources.list.d/debian.sources"), "Types: deb\n")
    patch_module(monkeypatch, lambda module, args, **kwargs: (1, "", ""))
    state = run_main(node_facts.main, {"root": root, "packages": True, "use_mokutil": False})["apt_state"]
    assert len(state) == 64 and node_facts.apt_state(root) == state

    def changed(action):
        before = node_facts.apt_state(root)
        action()
        return node_facts.apt_state(root) != before

    packages = os.path.join(lists, "deb.example_debian_dists_trixie_main_binary-amd64_Packages")

    def refresh():
        write(packages + ".new", "Package: a\n")
        os.rename(packages + ".new", packages)  # as apt does: the same size, a new file

    def touch(path):
        return lambda: os.utime(path, ns=(1, os.stat(path).st_mtime_ns + 1000))

    assert changed(lambda: write(os.path.join(root, "var/lib/dpkg/status"), DPKG_STATUS + "\n"))  # an install
    assert changed(refresh)
    assert changed(lambda: write(os.path.join(root, "var/lib/dpkg/updates/0001"), "Package: a\n"))  # unfinished
    assert changed(lambda: write(os.path.join(root, "etc/apt/preferences.d/pin"), "Package: nvidia-*\n"))
    assert changed(touch(os.path.join(root, "etc/apt/sources.list.d/debian.sources")))
    os.makedirs(os.path.join(root, "etc/apt/trusted.gpg.d"))
    assert changed(lambda: os.symlink("/nowhere", os.path.join(root, "etc/apt/trusted.gpg.d/gone.gpg")))
    assert not changed(lambda: write(os.path.join(lists, "lock"), ""))
    assert not changed(lambda: write(os.path.join(lists, "partial", "x_Packages"), "half"))
    assert not changed(lambda: None)
    os.remove(os.path.join(root, "var/lib/dpkg/status"))
    assert node_facts.apt_state(root) is None


def test_node_facts_present_names_only_paths_that_exist(tmp_path, monkeypatch):
    """preflight removes the files of earlier versions only where present lists one: a directory, a file and a
    dangling link count, a missing path does not, and the order given is kept."""
    root = tmp_path / "root"
    (root / "usr/local/libexec/gpufleet").mkdir(parents=True)
    (root / "etc/tmpfiles.d").mkdir(parents=True)
    (root / "etc/tmpfiles.d/gpufleet-ansiballz.conf").write_text("d /var/cache/gpufleet-ansiballz 0700 root root -\n")
    (root / "var/cache").mkdir(parents=True)
    os.symlink("/nonexistent-target", str(root / "var/cache/dangling"))
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="13"\n')
    asked = ["/etc/tmpfiles.d/gpufleet-ansiballz.conf", "/var/cache/gpufleet-ansiballz", "/var/cache/dangling",
             "/usr/local/libexec/gpufleet"]
    patch_module(monkeypatch, lambda module, args, **kwargs: (1, "", ""))
    result = run_main(node_facts.main, {"root": str(root), "use_mokutil": False, "present": asked})
    assert result["present"] == ["/etc/tmpfiles.d/gpufleet-ansiballz.conf", "/var/cache/dangling",
                                 "/usr/local/libexec/gpufleet"]
    assert result["changed"] is False
    assert run_main(node_facts.main, {"root": str(root), "use_mokutil": False})["present"] == []
