"""The preload callback's cache of compiled Jinja templates (plugins/plugin_utils/template_cache.py).

What it must do: give back exactly the code ansible-core's compile gives (for every template and conditional this
project has), serve it from disk to a later process, compile again whenever a filter or test it names is called
differently now, keep templates that fail to compile out, and never read an entry or a directory that another
user could have written.
"""
import glob
import json
import os
import pwd
import subprocess
import sys

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible._internal._templating._jinja_bits import AnsibleEnvironment, _TemplateCompileContext
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import private_cache, template_cache
from conftest import ROOT, yaml_strings

CONDITIONS = ("when", "that", "failed_when", "changed_when", "until")


def _walk(document):
    for key, text in yaml_strings(document):
        if key in CONDITIONS and "{{" not in text:
            yield "expression", text
        elif "{{" in text or "{%" in text:
            yield "template", text


def project_templates():
    """Every template and conditional in the roles' YAML and every role template file."""
    found = set()
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "*", "*.yml")) + glob.glob(
            os.path.join(ROOT, "playbooks", "*.yml")):
        with open(path) as handle:
            for document in yaml.safe_load_all(handle):
                found.update(_walk(document))
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "templates", "*")):
        with open(path) as handle:
            found.add(("template", handle.read()))
    return sorted(found)


def compile_one(environment, kind, source, escape_backslashes=True):
    with _TemplateCompileContext(escape_backslashes=escape_backslashes):
        if kind == "expression":
            return environment.compile_expression(source, False)._template.root_render_func.__code__
        return environment.from_string(source).root_render_func.__code__


@pytest.fixture
def cache_root(tmp_path):
    root = tmp_path / "cache"
    yield str(root)
    template_cache.uninstall()


def render(text, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text))


def entries(root):
    return sorted(path for path in glob.glob(os.path.join(root, "*", "*")))


CORPUS_CHILD = r"""
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
sys.path.insert(0, sys.argv[2])
import test_template_cache as t
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import private_cache, template_cache
corpus = t.project_templates()
environment = t.AnsibleEnvironment()
plain = [t.compile_one(environment, kind, source) for kind, source in corpus]
cache = template_cache.install(sys.argv[3])
cold = [t.compile_one(environment, kind, source) for kind, source in corpus]
counts = [cache.hits, cache.misses]
cache.memory.clear()  # as a later process: everything from disk
warm = [t.compile_one(environment, kind, source) for kind, source in corpus]
print(json.dumps({"corpus": len(corpus), "cold": counts, "warm": [cache.hits - counts[0], cache.misses - counts[1]],
                  "cold_equal": cold == plain, "warm_equal": warm == plain,
                  "differ": [source for (kind, source), a, b in zip(corpus, plain, warm) if a != b][:3]}))
"""


def test_the_cache_gives_the_code_the_compile_gives_for_every_template_of_the_project(cache_root):
    done = subprocess.run([sys.executable, "-c", CORPUS_CHILD, os.path.join(ROOT, "collections"),
                           os.path.dirname(os.path.abspath(__file__)), cache_root],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["corpus"] > 1000
    assert result["cold"] == [0, result["corpus"]]
    assert result["warm"] == [result["corpus"], 0]
    assert result["cold_equal"] and result["warm_equal"], result["differ"]
    assert len(entries(cache_root)) == result["corpus"]


def test_rendering_through_the_cache_is_unchanged(cache_root):
    text = "{{ names | map('upper') | join(',') }}{% if extra is defined %}+{{ extra }}{% endif %}"
    assert render(text, names=["a", "b"]) == "A,B"
    template_cache.install(cache_root)
    assert render(text, names=["a", "b"]) == "A,B"
    AnsibleEnvironment._gpufleet_template_cache.memory.clear()
    assert render(text, names=["a", "b"], extra=1) == "A,B+1"
    assert AnsibleEnvironment._gpufleet_template_cache.hits >= 1


def test_a_later_process_reads_the_entries(cache_root):
    source = "{{ 'x' | ansible.builtin.to_json }}|{{ value | default(3) }}"
    child = (
        "import sys; sys.path.insert(0, %r)\n"
        "from ansible_collections.gpufleet.cluster.plugins.plugin_utils import template_cache\n"
        "from ansible.parsing.dataloader import DataLoader\n"
        "from ansible.template import Templar, trust_as_template\n"
        "cache = template_cache.install(%r)\n"
        "print(Templar(loader=DataLoader(), variables={}).template(trust_as_template(%r)))\n"
        "print(cache.hits, cache.misses)\n" % (os.path.join(ROOT, "collections"), cache_root, source))
    first = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert first.stdout.splitlines() == ['"x"|3', "0 1"]
    assert second.stdout.splitlines() == ['"x"|3', "1 0"]


def test_a_filter_called_differently_now_is_compiled_again(cache_root):
    from jinja2 import pass_environment

    cache = template_cache.install(cache_root)
    source = "{{ 1 | gpufleet_probe }}"
    plain = AnsibleEnvironment()
    plain.filters["gpufleet_probe"] = lambda value: "plain:%s" % value
    compile_one(plain, "template", source)

    @pass_environment
    def with_environment(env, value):
        return "env:%s" % value

    other = AnsibleEnvironment()
    other.filters["gpufleet_probe"] = with_environment
    cache.memory.clear()
    served = compile_one(other, "template", source)  # the entry above would call it without the environment
    assert (cache.hits, cache.misses) == (0, 2)
    cache.memory.clear()
    assert compile_one(other, "template", source) == served
    assert (cache.hits, cache.misses) == (1, 2)
    template_cache.uninstall()
    assert served == compile_one(other, "template", source)
    assert served != compile_one(plain, "template", source)


def test_template_and_expression_and_escaping_are_kept_apart(cache_root):
    cache = template_cache.install(cache_root)
    environment = AnsibleEnvironment()
    compile_one(environment, "template", "a == 'b\\n'")
    compile_one(environment, "expression", "a == 'b\\n'")
    compile_one(environment, "expression", "a == 'b\\n'", escape_backslashes=False)
    assert cache.misses == 3 and cache.hits == 0
    assert len(entries(cache_root)) == 3


def test_a_template_that_fails_to_compile_is_not_cached(cache_root):
    template_cache.install(cache_root)
    for _attempt in range(2):
        with pytest.raises(Exception, match="Unexpected end of template"):
            AnsibleEnvironment().from_string("{% if x %}")
    assert entries(cache_root) == []


def _one_entry(cache_root):
    cache = template_cache.install(cache_root)
    environment = AnsibleEnvironment()
    compile_one(environment, "template", "{{ planted }}")
    (path,) = entries(cache_root)
    cache.memory.clear()
    return cache, environment, path


def _served(cache, environment):
    hits = cache.hits
    compile_one(environment, "template", "{{ planted }}")
    cache.memory.clear()
    return cache.hits > hits


def test_entries_are_private_files_and_reused(cache_root):
    cache, environment, path = _one_entry(cache_root)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    assert _served(cache, environment)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file of another user needs root")
def test_an_entry_of_another_user_is_never_read(cache_root):
    cache, environment, path = _one_entry(cache_root)
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    assert not _served(cache, environment)


def test_an_entry_others_can_write_is_never_read(cache_root):
    cache, environment, path = _one_entry(cache_root)
    os.chmod(path, 0o620)
    assert not _served(cache, environment)


def test_a_symlinked_or_damaged_entry_is_never_read(cache_root, tmp_path):
    cache, environment, path = _one_entry(cache_root)
    elsewhere = tmp_path / "elsewhere"
    os.rename(path, str(elsewhere))
    os.symlink(str(elsewhere), path)
    assert not _served(cache, environment)
    os.unlink(path)
    with open(path, "wb") as handle:
        handle.write(b"not marshal data")
    os.chmod(path, 0o600)
    assert not _served(cache, environment)
    # compiled again and replaced: the next process gets the good entry
    compile_one(environment, "template", "{{ planted }}")
    cache.memory.clear()
    assert _served(cache, environment)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_a_directory_others_can_write_is_not_used(tmp_path, mode):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    os.chmod(str(root), mode)
    cache = template_cache.install(str(root))
    try:
        assert cache.directory is None
        compile_one(AnsibleEnvironment(), "template", "{{ 1 }}")
        assert cache.misses == 1 and os.listdir(str(root)) == []
    finally:
        template_cache.uninstall()


def test_a_directory_under_a_folder_others_can_write_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    assert private_cache.make_directory(str(shared / "cache")) is None
    os.chmod(str(shared), 0o1777)  # sticky, but not root's: someone else's /tmp
    if os.geteuid() == 0:
        assert private_cache.make_directory(str(shared / "cache")) is not None  # root's sticky folder, like /tmp
    os.chmod(str(shared), 0o755)
    assert private_cache.make_directory(str(shared / "cache")) is not None


def test_entries_unused_for_thirty_days_are_pruned(tmp_path):
    directory = tmp_path / "entries"
    directory.mkdir()
    for name, age in (("old", 31), ("new", 2)):
        path = directory / name
        path.write_bytes(b"")
        stamp = 1_000_000_000 - age * 24 * 3600
        os.utime(str(path), (stamp, stamp))
    assert private_cache.prune(str(directory), now=1_000_000_000) == 1
    assert os.listdir(str(directory)) == ["new"]


def test_an_empty_root_keeps_the_cache_in_memory(cache_root):
    cache = template_cache.install("")
    environment = AnsibleEnvironment()
    compile_one(environment, "template", "{{ 2 }}")
    compile_one(environment, "template", "{{ 2 }}")
    assert cache.directory is None and (cache.hits, cache.misses) == (1, 1)


def test_with_another_ansible_core_release_nothing_is_hooked(monkeypatch, tmp_path):
    from ansible._internal._templating._jinja_plugins import JinjaPluginIntercept
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import module_payload_cache

    monkeypatch.setattr("ansible.release.__version__", "2.20.0")
    before = (AnsibleEnvironment.__dict__.get("compile"), JinjaPluginIntercept.__dict__.get("__getitem__"))
    assert template_cache.install(str(tmp_path)) is None
    assert template_cache.share_plugin_lookups(warm=False) is None
    assert module_payload_cache.install(str(tmp_path)) is None
    assert (AnsibleEnvironment.__dict__.get("compile"), JinjaPluginIntercept.__dict__.get("__getitem__")) == before
    assert os.listdir(str(tmp_path)) == []
