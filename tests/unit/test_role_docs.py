"""One source for what a role variable means: meta/argument_specs.yml.

defaults/main.yml holds the value Ansible really uses (it never applies an argument spec's `default`), so the two
must agree key for key; the README tables and the inventories/prod samples are made from them by
scripts/role_docs.py and must be up to date.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

ROLES = sorted(name for name in os.listdir(os.path.join(ROOT, "roles"))
               if os.path.isdir(os.path.join(ROOT, "roles", name)))
SCRIPT = os.path.join(ROOT, "scripts", "role_docs.py")


def load(*parts):
    with open(os.path.join(ROOT, *parts)) as handle:
        return yaml.safe_load(handle) or {}


def specs(role):
    return load("roles", role, "meta", "argument_specs.yml")["argument_specs"]


def first_entry(role):
    """main; for gpufleet_defaults, which has no tasks, its one entry point `settings` (a `main` spec would add an
    argument check task to every play that loads it)."""
    return "settings" if role == "gpufleet_defaults" else "main"


def options(spec, prefix=""):
    for name, option in (spec.get("options") or {}).items():
        yield prefix + name, option
        yield from options(option, prefix + name + ".")


def same(left, right):
    """Equal and of the same YAML types (true is not 1, "1" is not 1)."""
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def test_every_role_has_a_spec_defaults_and_readme():
    assert len(ROLES) >= 13
    for role in ROLES:
        for part in (("meta", "argument_specs.yml"), ("defaults", "main.yml"), ("README.md",)):
            assert os.path.exists(os.path.join(ROOT, "roles", role, *part)), (role, part)
        assert first_entry(role) in specs(role), role


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_specified_with_the_same_value(role):
    defaults = load("roles", role, "defaults", "main.yml")
    entry_points = specs(role)
    problems = []
    for name, value in defaults.items():
        found = [(entry, spec["options"][name]) for entry, spec in entry_points.items()
                 if name in (spec.get("options") or {})]
        if not found:
            problems.append("%s is in defaults/main.yml but in no entry point of meta/argument_specs.yml" % name)
        for entry, option in found:
            if "default" not in option:
                problems.append("%s (%s): the spec gives no default; defaults/main.yml has %r" % (name, entry, value))
            elif not same(option["default"], value):
                problems.append("%s (%s): the spec says %r, defaults/main.yml %r"
                                % (name, entry, option["default"], value))
    assert not problems, "roles/%s:\n  " % role + "\n  ".join(problems)


@pytest.mark.parametrize("role", ROLES)
def test_every_specified_default_is_in_defaults(role):
    defaults = load("roles", role, "defaults", "main.yml")
    missing = ["%s (%s)" % (name, entry) for entry, spec in specs(role).items()
               for name, option in (spec.get("options") or {}).items()
               if "default" in option and name not in defaults]
    assert not missing, "roles/%s: spec defaults missing from defaults/main.yml: %s" % (role, ", ".join(missing))


def test_generated_docs_are_up_to_date():
    check = subprocess.run([sys.executable, SCRIPT, "--check"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def generated_block(role):
    with open(os.path.join(ROOT, "roles", role, "README.md")) as handle:
        text = handle.read()
    begin = text.index("<!-- BEGIN generated from meta/argument_specs.yml")
    end = text.index("<!-- END generated from meta/argument_specs.yml")
    return text[:begin] + text[end:], text[begin:end]


@pytest.mark.parametrize("role", ROLES)
def test_readme_table_has_a_row_per_option_and_no_hand_written_copy(role):
    outside, block = generated_block(role)
    rows = re.findall(r"^\| `([a-z0-9_.]+)` \|", block, re.M)
    main = [name for name, _unused in options(specs(role)[first_entry(role)])]
    assert main and set(main) <= set(rows), set(main) - set(rows)
    for name in main:
        option = dict(options(specs(role)[first_entry(role)]))[name]
        row = next(line for line in block.splitlines() if line.startswith("| `%s` |" % name))
        cells = row.split(" | ")
        assert cells[1] == option.get("type", "str") + (" of " + option["elements"] if "elements" in option else "")
        if option.get("required"):
            assert "**required**" in cells[3]
    # The hand-written variable tables are gone: no row outside the markers starts with one of the role's variables.
    stray = re.findall(r"^\| `?(%s)`? \|" % "|".join(re.escape(n) for n in main if "." not in n), outside, re.M)
    assert not stray, "roles/%s/README.md lists %s outside the generated block" % (role, ", ".join(stray))


def test_check_names_stale_files_and_a_rewrite_fixes_them(tmp_path):
    """On a copy of the roles and the prod samples: a changed description makes --check fail naming the README, the
    defaults file and the sample it reaches, and nothing else; the rewrite carries the new text into all three;
    --check passes again."""
    for part in ("roles", os.path.join("inventories", "prod")):
        shutil.copytree(os.path.join(ROOT, part), tmp_path / part)
    spec_path = tmp_path / "roles" / "nvidia_driver" / "meta" / "argument_specs.yml"
    text = spec_path.read_text()
    old = "description: Seconds to wait for the node to come back from that reboot."
    assert text.count(old) == 1
    spec_path.write_text(text.replace(old, "description: Seconds | to wait <for> the rebooted node, *changed*."))

    def run(*args):
        return subprocess.run([sys.executable, SCRIPT, "--root", str(tmp_path)] + list(args),
                              capture_output=True, text=True, check=False)

    check = run("--check")
    assert check.returncode == 1, check.stdout + check.stderr
    named = check.stdout.strip().split(": ", 1)[1].split(", ")
    assert sorted(named) == ["inventories/prod/group_vars/all/nvidia_driver.yml", "roles/nvidia_driver/README.md",
                             "roles/nvidia_driver/defaults/main.yml"], check.stdout
    assert run().returncode == 0
    readme = (tmp_path / "roles" / "nvidia_driver" / "README.md").read_text()
    # Markdown-escaped in the table cell: the pipe, the angle brackets and the stars.
    assert ("| `nvidia_driver_reboot_timeout` | int | `1800` |  | Seconds \\| to wait &lt;for&gt; the rebooted node, "
            "\\*changed\\*. |") in readme
    defaults = (tmp_path / "roles" / "nvidia_driver" / "defaults" / "main.yml").read_text()
    assert "\n# Seconds | to wait <for> the rebooted node, *changed*.\nnvidia_driver_reboot_timeout: 1800\n" in defaults
    assert yaml.safe_load(defaults) == load("roles", "nvidia_driver", "defaults", "main.yml")
    sample = (tmp_path / "inventories" / "prod" / "group_vars" / "all" / "nvidia_driver.yml").read_text()
    assert "\n# Seconds | to wait <for> the rebooted node, *changed*.\n# nvidia_driver_reboot_timeout: 1800\n" in sample
    again = run("--check")
    assert again.returncode == 0, again.stdout


def test_defaults_comments_come_from_the_spec_and_keep_section_headings():
    """Each variable in defaults/main.yml is preceded by its spec description (sub-options indented below it); a
    '# ---' heading above it stays."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import role_docs
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))
    with open(os.path.join(ROOT, "roles", "validate", "defaults", "main.yml")) as handle:
        text = handle.read()
    assert ("# Fabric profile of the fabric step; empty checks nothing (the step is skipped with what it found).\n"
            "# A RoCE port without a RoCE v2 IPv4 GID fails whenever a profile is set.\n"
            "#   expect_hcas (int): Exact number of RDMA HCAs (after exclude_hcas).\n") in text
    with open(os.path.join(ROOT, "roles", "interconnect", "defaults", "main.yml")) as handle:
        text = handle.read()
    assert "\n# --- MPI hostfile ---\n# Inventory hosts listed in the MPI hostfile" in text
    # A hand-written comment above a variable is replaced, a heading is kept, values and blank lines stay.
    before = "---\n# --- Group ---\n# stale words\nvalidate_mpi: true\n\nvalidate_mpi_timeout: 300\n"
    after = role_docs.defaults_file(ROOT, "validate", before)
    assert after.startswith("---\n# --- Group ---\n# Run the MPI check")
    assert "stale words" not in after
    assert after.endswith("validate_mpi: true\n\n# Seconds an MPI run may take.\nvalidate_mpi_timeout: 300\n")
    with pytest.raises(role_docs.SpecError, match="does not describe"):
        role_docs.defaults_file(ROOT, "validate", "---\nvalidate_no_such_setting: 1\n")


def test_a_readme_without_markers_is_refused(tmp_path):
    shutil.copytree(os.path.join(ROOT, "roles"), tmp_path / "roles")
    readme = tmp_path / "roles" / "fail2ban" / "README.md"
    readme.write_text(re.sub(r"<!-- END generated from[^\n]*\n", "", readme.read_text()))
    check = subprocess.run([sys.executable, SCRIPT, "--root", str(tmp_path), "--check"], capture_output=True,
                           text=True, check=False)
    assert check.returncode == 2
    assert "roles/fail2ban/README.md" in check.stderr
