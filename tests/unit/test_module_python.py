"""preflight's Python for Ansible modules (roles/preflight/files/gpufleet-python3.py): modules imported from a
payload zip compile once and come from the cache after, always for their own source and under this run's file
name; a cache or an entry anyone else could have written is never read; the interpreter runs a script on stdin or
from a file as python3 does; and a real module (ansible.builtin.ping, ansible.builtin.stat) runs through it.
"""
import importlib.util
import marshal
import os
import stat
import subprocess
import sys
import zipfile
from hashlib import sha256

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "roles", "preflight", "files", "gpufleet-python3.py")
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the cache must belong to root")


def load_wrapper():
    spec = importlib.util.spec_from_file_location("gpufleet_python3", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def wrapper(monkeypatch):
    """The interpreter's code, its hook installed for the test only, and every demo module forgotten after."""
    module = load_wrapper()
    hooks = list(sys.path_hooks)
    path = list(sys.path)
    yield module
    sys.path_hooks[:] = hooks
    sys.path[:] = path
    sys.path_importer_cache.clear()
    for name in [name for name in sys.modules if name == "demo" or name.startswith("demo.")]:
        del sys.modules[name]


@pytest.fixture
def cache(tmp_path):
    """A cache root as preflight makes it: root's, 0755, with the user's own directory 0700 in it."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o755)
    own = root / str(os.geteuid())
    own.mkdir(mode=0o700)
    os.chmod(root, 0o755)
    os.chmod(own, 0o700)
    return root


SOURCES = {
    "demo/__init__.py": "",
    "demo/values.py": "VALUE = 'from the zip'\n\ndef fail():\n    raise RuntimeError('boom')\n",
}


def payload(tmp_path, run, sources=None):
    """A zip where Ansible puts its payloads: <tmp>/ansible_<module>_payload_<random>/ansible_<module>_payload.zip."""
    folder = tmp_path / ("ansible_demo_payload_%s" % run)
    folder.mkdir()
    archive = folder / "ansible_demo_payload.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for name, text in (sources or SOURCES).items():
            handle.writestr(name, text)
    return str(archive)


def import_values(wrapper, directory, archive):
    """Import demo.values from archive through the hook (the wrapper's hook first, as main() installs it)."""
    for name in [name for name in sys.modules if name == "demo" or name.startswith("demo.")]:
        del sys.modules[name]
    if wrapper.payload_hook not in sys.path_hooks:
        wrapper.install(directory)
    wrapper.CachingZipImporter.directory = directory
    sys.path.insert(0, archive)
    sys.path_importer_cache.clear()
    import demo.values  # noqa: F401 (imported through the hook)

    return sys.modules["demo.values"]


def key_for(path, source):
    return sha256(importlib.util.MAGIC_NUMBER + path.encode() + b"\0" + source.encode()).hexdigest()


def counting_compile(wrapper, monkeypatch):
    calls = []

    def compile_and_count(source, filename, *args, **kwargs):
        calls.append(filename)
        return compile(source, filename, *args, **kwargs)

    monkeypatch.setattr(wrapper, "compile", compile_and_count, raising=False)
    return calls


@as_root
def test_compiles_each_module_once_then_reads_the_cache(wrapper, cache, tmp_path, monkeypatch):
    directory = wrapper.cache_dir(str(cache))
    assert directory == str(cache / "0")
    calls = counting_compile(wrapper, monkeypatch)
    first = import_values(wrapper, directory, payload(tmp_path, "first"))
    assert first.VALUE == "from the zip"
    # Each module once: stock zipimport compiles every module twice (get_filename compiles too).
    assert sorted(os.path.basename(os.path.dirname(c)) + "/" + os.path.basename(c) for c in calls) == sorted(SOURCES)
    entries = sorted(os.listdir(directory))
    assert entries == sorted(key_for(name, text) for name, text in SOURCES.items())
    for entry in entries:
        info = os.lstat(os.path.join(directory, entry))
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == 0

    calls.clear()
    second_archive = payload(tmp_path, "second")
    second = import_values(wrapper, directory, second_archive)
    assert second.VALUE == "from the zip"
    assert calls == []
    # The cached code names this run's payload, as a .pyc names the file it was loaded for.
    assert second.__file__ == os.path.join(second_archive, "demo/values.py")
    assert second.fail.__code__.co_filename == second.__file__
    with pytest.raises(RuntimeError) as info:
        second.fail()
    assert str(info.traceback[-1].path) == second.__file__


@as_root
def test_a_changed_source_is_a_new_entry_never_the_old_code(wrapper, cache, tmp_path):
    directory = wrapper.cache_dir(str(cache))
    assert import_values(wrapper, directory, payload(tmp_path, "old")).VALUE == "from the zip"
    changed = dict(SOURCES, **{"demo/values.py": "VALUE = 'changed'\n"})
    assert import_values(wrapper, directory, payload(tmp_path, "new", changed)).VALUE == "changed"
    assert key_for("demo/values.py", "VALUE = 'changed'\n") in os.listdir(directory)


def plant(directory, code_text, mode=0o600, owner=0):
    """Put code that sets VALUE to 'planted' under the key of demo/values.py's real source."""
    entry = os.path.join(directory, key_for("demo/values.py", SOURCES["demo/values.py"]))
    with open(entry, "wb") as handle:
        handle.write(marshal.dumps(compile(code_text, "planted", "exec")))
    os.chmod(entry, mode)
    os.chown(entry, owner, -1)
    return entry


@as_root
@pytest.mark.parametrize("mode, owner", [(0o600, NOBODY), (0o620, 0), (0o602, 0)],
                         ids=["another user's entry", "group-writable entry", "world-writable entry"])
def test_an_entry_someone_else_could_write_is_not_run(wrapper, cache, tmp_path, mode, owner):
    directory = wrapper.cache_dir(str(cache))
    plant(directory, "VALUE = 'planted'\n", mode, owner)
    assert import_values(wrapper, directory, payload(tmp_path, "attack")).VALUE == "from the zip"


@as_root
def test_a_symlinked_entry_is_not_followed(wrapper, cache, tmp_path):
    directory = wrapper.cache_dir(str(cache))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = plant(str(elsewhere), "VALUE = 'planted'\n")
    os.symlink(target, os.path.join(directory, os.path.basename(target)))
    assert import_values(wrapper, directory, payload(tmp_path, "attack")).VALUE == "from the zip"


@as_root
def test_a_corrupt_entry_is_compiled_again(wrapper, cache, tmp_path):
    directory = wrapper.cache_dir(str(cache))
    entry = os.path.join(directory, key_for("demo/values.py", SOURCES["demo/values.py"]))
    with open(entry, "wb") as handle:
        handle.write(b"\x00not marshal")
    os.chmod(entry, 0o600)
    assert import_values(wrapper, directory, payload(tmp_path, "corrupt")).VALUE == "from the zip"


@as_root
@pytest.mark.parametrize("breakage", ["root dir group-writable", "own dir readable by others", "own dir of nobody",
                                      "own dir a symlink", "own dir missing", "root dir of nobody"])
def test_a_cache_directory_others_could_write_is_not_used(wrapper, cache, tmp_path, breakage, monkeypatch):
    own = cache / "0"
    if breakage == "root dir group-writable":
        os.chmod(cache, 0o775)
    elif breakage == "own dir readable by others":
        os.chmod(own, 0o755)
    elif breakage == "own dir of nobody":
        os.chown(own, NOBODY, -1)
    elif breakage == "own dir a symlink":
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        own.rmdir()
        own.symlink_to(real)
    elif breakage == "own dir missing":
        own.rmdir()
    elif breakage == "root dir of nobody":
        os.chown(cache, NOBODY, -1)
    assert wrapper.cache_dir(str(cache)) is None
    # Without a cache it still imports, compiling each module once, and writes nothing anywhere.
    calls = counting_compile(wrapper, monkeypatch)
    assert import_values(wrapper, None, payload(tmp_path, "nocache")).VALUE == "from the zip"
    assert len(calls) == len(SOURCES)
    if os.path.isdir(own) and not os.path.islink(own):
        assert os.listdir(own) == []


def test_only_ansible_payloads_go_through_the_hook(wrapper, tmp_path):
    other = tmp_path / "library.zip"
    with zipfile.ZipFile(other, "w") as handle:
        handle.writestr("lib.py", "")
    with pytest.raises(ImportError):
        wrapper.payload_hook(str(other))
    assert isinstance(wrapper.payload_hook(payload(tmp_path, "ok")), wrapper.CachingZipImporter)


def interpreter(tmp_path):
    """The interpreter as preflight writes it: this Python on its first line, then the script."""
    path = tmp_path / "python3"
    with open(SCRIPT) as handle:
        path.write_text("#!%s\n%s" % (sys.executable, handle.read()))
    path.chmod(0o755)
    return str(path)


PROBE = "import sys, json\nimport __main__\nprint(json.dumps([sys.argv, __name__, getattr(__main__, '__file__', None), sys.path[0]]))\n"


def test_a_script_on_stdin_runs_as_python3_runs_it(tmp_path):
    ran = subprocess.run([interpreter(tmp_path)], input=PROBE, capture_output=True, text=True, check=True)
    plain = subprocess.run([sys.executable], input=PROBE, capture_output=True, text=True, check=True)
    assert ran.stdout == plain.stdout == '[[""], "__main__", "<stdin>", ""]\n'


def test_a_script_file_runs_as_python3_runs_it(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    ran = subprocess.run([interpreter(tmp_path), str(script), "arg"], capture_output=True, text=True, check=True)
    plain = subprocess.run([sys.executable, str(script), "arg"], capture_output=True, text=True, check=True)
    assert ran.stdout == plain.stdout


def test_options_go_to_the_real_interpreter(tmp_path):
    ran = subprocess.run([interpreter(tmp_path), "-c", "import sys; print(sys.executable)"], capture_output=True,
                         text=True, check=True)
    assert ran.stdout.strip() == sys.executable


def test_exit_status_and_errors_pass_through(tmp_path):
    ran = subprocess.run([interpreter(tmp_path)], input="import sys\nsys.exit(3)\n", capture_output=True, text=True,
                         check=False)
    assert ran.returncode == 3
    ran = subprocess.run([interpreter(tmp_path)], input="raise ValueError('bad')\n", capture_output=True, text=True,
                         check=False)
    assert ran.returncode == 1 and "ValueError: bad" in ran.stderr


@pytest.mark.parametrize("module, args, expected", [
    ("ansible.builtin.ping", "data=through-the-cache", '"ping": "through-the-cache"'),
    ("ansible.builtin.stat", "path=/etc/hostname", '"exists": true'),
])
def test_a_real_module_runs_through_it(tmp_path, module, args, expected):
    """Ansible itself, on localhost, with the interpreter as ansible_python_interpreter (pipelining and not)."""
    python = interpreter(tmp_path)
    for pipelining in ("True", "False"):
        env = dict(os.environ, ANSIBLE_PIPELINING=pipelining, ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"),
                   ANSIBLE_REMOTE_TMP=str(tmp_path / "remote"), ANSIBLE_NOCOLOR="1")
        done = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local", "-i", "localhost,",
             "-m", module, "-a", args, "-e", "ansible_python_interpreter=" + python],
            capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout and expected in done.stdout, done.stdout
