"""gpufleet-run-image --ssh, attacked as a hostile training user would: ~/.ssh or a file in it made a link to
root's files, a FIFO, a device, a huge file, the directory or a file swapped between the launcher's steps, other
owners. Then the copy's owners and modes, its removal (after the run, after a killed launcher), the signals the
launcher forwards to the engine CLI, and the other host paths root hands to the engine.

The files are chowned to a made-up caller, so these run as root (as CI runs the unit tests)."""
import contextlib
import json
import os
import pathlib
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from test_run_image_launcher import launcher

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root (CI runs the unit tests as root)")

UID, GID, OTHER = 4242, 4343, 4444
KEYS = {"id_ed25519": b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n-----END OPENSSH PRIVATE KEY-----\n",
        "id_ed25519.pub": b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 cluster\n",
        "config": b"Host *\n  IdentitiesOnly yes\n",
        "known_hosts": b"node2 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5\n"}
SECRET = b"root:$6$NOT-FOR-THE-CALLER$:19000:0:99999:7:::\n"


def no_switch(uid, gid, groups):
    """AsCaller stand-in: the tests read as root (the one real switch is tested apart, in its own process)."""
    return contextlib.nullcontext()


def anywhere(path, lstat=None):
    """root_only_above stand-in: the test's run directory is under /tmp, which everyone can write."""
    return True


@pytest.fixture
def mod(tmp_path):
    return launcher(tmp_path)


def make_home(base, uid=UID):
    """BASE/aiuser with a .ssh of the caller's key files, all owned by the caller."""
    home = base / "aiuser"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    for name, content in KEYS.items():
        (ssh / name).write_bytes(content)
        os.chown(str(ssh / name), uid, GID)
        os.chmod(str(ssh / name), 0o600)
    os.chown(str(ssh), uid, GID)
    os.chmod(str(ssh), 0o700)
    os.chown(str(home), uid, GID)
    return home


@pytest.fixture
def home(tmp_path):
    return make_home(tmp_path / "home")


@pytest.fixture
def secret(tmp_path):
    """Root's: a directory the caller may not reach on the host, and a file in it only root can read."""
    folder = tmp_path / "root-only"
    folder.mkdir()
    (folder / "shadow").write_bytes(SECRET)
    os.chmod(str(folder / "shadow"), 0o600)
    return folder


def account(home):
    return pwd.struct_passwd(("aiuser", "x", UID, GID, "", str(home), "/bin/sh"))


def make_copy(mod, home, run_dir, **keywords):
    """make_ssh_copy for the made-up caller; (the copy's path, the warnings)."""
    warnings = []
    name = mod.make_ssh_copy(account(home), GID, str(run_dir), as_caller=no_switch, above=anywhere,
                             warn=warnings.append, **keywords)
    return run_dir / name, warnings


def contents(folder):
    return dict((name, (folder / name).read_bytes()) for name in os.listdir(str(folder)))


def refused(mod, home, run_dir, pattern):
    """make_ssh_copy refuses, saying PATTERN, and leaves no copy behind."""
    with pytest.raises(mod.Refused, match=pattern):
        make_copy(mod, home, run_dir)
    assert not run_dir.exists() or os.listdir(str(run_dir)) == []


def swap_for_link(path, target):
    os.rename(str(path), str(path) + ".real")
    os.symlink(str(target), str(path))


@contextlib.contextmanager
def no_longer_than(seconds):
    """Fail the test, rather than hang it, when the launcher blocks (on a FIFO, say)."""
    def blocked(*unused):
        pytest.fail("the launcher blocked for %d s" % seconds)
    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Spy(object):
    """The launcher's os module with open or stat wrapped: the tests swap files between the launcher's steps."""

    def __init__(self, **wrapped):
        self.__dict__.update(wrapped)

    def __getattr__(self, name):
        return getattr(os, name)


# --- the copy ---

def test_the_copy_is_roots_readable_by_the_callers_group_and_holds_the_callers_files(mod, home, tmp_path):
    run_dir = tmp_path / "run"
    copy, warnings = make_copy(mod, home, run_dir)
    assert warnings == []
    assert contents(copy) == KEYS
    # The run directory: root's, made by the launcher, that only root can enter.
    info = os.lstat(str(run_dir))
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o700
    # The copy: root's, readable by the caller's group (the container runs with that gid), writable by no one else.
    info = os.lstat(str(copy))
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, GID, 0o750)
    for name in KEYS:
        info = os.lstat(str(copy / name))
        assert stat.S_ISREG(info.st_mode)
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, GID, 0o640)
    # Named for this launcher: its pid and start time, so a later start can tell whether it is still running.
    match = mod.COPY_NAME.match(copy.name)
    assert match and int(match.group(1)) == os.getpid() and match.group(2) == mod.process_start(os.getpid())


def test_the_copy_satisfies_openssh_permission_rules(mod, home, tmp_path):
    # OpenSSH refuses a private key only when it is the user's own and others may read it (sshkey_perm_ok), and a
    # config only when someone other than root or the user owns it or group or others may write it (readconf.c).
    copy, _unused = make_copy(mod, home, tmp_path / "run")
    for name in KEYS:
        info = os.stat(str(copy / name))
        assert info.st_uid != UID or not info.st_mode & 0o077
        assert info.st_uid in (0, UID) and not info.st_mode & 0o022


def test_an_empty_ssh_directory_gives_an_empty_copy(mod, home, tmp_path):
    for name in KEYS:
        (home / ".ssh" / name).unlink()
    copy, warnings = make_copy(mod, home, tmp_path / "run")
    assert os.listdir(str(copy)) == [] and warnings == []


def test_a_copy_that_cannot_be_written_whole_is_not_left_behind(mod, home, tmp_path, monkeypatch):
    calls = []

    def full(fd, data):
        calls.append(fd)
        if len(calls) > 2:
            raise OSError(28, "No space left on device")
        return os.write(fd, data)
    monkeypatch.setattr(mod, "os", Spy(write=full))
    refused(mod, home, tmp_path / "run", "cannot write the copy in .*: No space left on device")


# --- ~/.ssh and the home: links, owners, missing ---

@pytest.mark.parametrize("target", ["secret", "own"])
def test_a_ssh_directory_that_is_a_link_is_refused(mod, home, secret, tmp_path, target):
    # A link to root's directory, or even to another directory of the caller's: only a real ~/.ssh is copied.
    own = tmp_path / "elsewhere"
    own.mkdir()
    os.chown(str(own), UID, GID)
    swap_for_link(home / ".ssh", secret if target == "secret" else own)
    refused(mod, home, tmp_path / "run", "symbolic link")


def test_a_home_that_is_a_link_is_refused_with_or_without_a_trailing_slash(mod, home, tmp_path):
    link = tmp_path / "home" / "linked"
    os.symlink(str(home), str(link))
    for pw_dir in (str(link), str(link) + "/", str(link) + "/."):
        with pytest.raises(mod.Refused, match="symbolic link"):
            make_copy(mod, pw_dir, tmp_path / "run")


@pytest.mark.parametrize("what", ["ssh", "home"])
def test_a_directory_of_another_owner_is_refused(mod, home, tmp_path, what):
    os.chown(str(home / ".ssh" if what == "ssh" else home), OTHER, GID)
    refused(mod, home, tmp_path / "run", "owned by uid %d, not by the caller" % OTHER)


def test_a_missing_ssh_directory_is_refused(mod, home, tmp_path):
    shutil.rmtree(str(home / ".ssh"))
    refused(mod, home, tmp_path / "run", "does not exist")


def test_a_ssh_that_is_a_file_is_refused(mod, home, tmp_path):
    shutil.rmtree(str(home / ".ssh"))
    (home / ".ssh").write_bytes(b"x")
    os.chown(str(home / ".ssh"), UID, GID)
    refused(mod, home, tmp_path / "run", "not a directory")


# --- entries of ~/.ssh ---

def test_a_key_file_that_is_a_link_to_shadow_is_left_out(mod, home, secret, tmp_path):
    ssh = home / ".ssh"
    (ssh / "authorized_keys").symlink_to(secret / "shadow")
    os.lchown(str(ssh / "authorized_keys"), UID, GID)
    copy, warnings = make_copy(mod, home, tmp_path / "run")
    assert contents(copy) == KEYS
    assert warnings == ["--ssh: left out ~/.ssh/authorized_keys: a symbolic link "
                        "(only regular files the caller owns are copied)"]


def test_a_hard_link_to_a_root_file_is_left_out(mod, home, secret, tmp_path):
    # With fs.protected_hardlinks off, a user can hard-link root's file into ~/.ssh; it stays root's.
    os.link(str(secret / "shadow"), str(home / ".ssh" / "known_hosts2"))
    copy, warnings = make_copy(mod, home, tmp_path / "run")
    assert contents(copy) == KEYS
    assert warnings == ["--ssh: left out ~/.ssh/known_hosts2: owned by uid 0, not by the caller "
                        "(only regular files the caller owns are copied)"]


def test_fifos_devices_directories_and_sockets_are_left_out_without_blocking(mod, home, tmp_path):
    ssh = home / ".ssh"
    os.mkfifo(str(ssh / "agent.fifo"))
    (ssh / "config.d").mkdir()
    (ssh / "config.d" / "extra").write_bytes(b"Host x\n")
    try:
        os.mknod(str(ssh / "null"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        device = True
    except PermissionError:
        device = False
    here = os.getcwd()
    os.chdir(str(ssh))
    try:
        control = socket.socket(socket.AF_UNIX)
        control.bind("cm-node2")
    finally:
        os.chdir(here)
    for name in os.listdir(str(ssh)):
        os.lchown(str(ssh / name), UID, GID)
    try:
        with no_longer_than(10):
            copy, warnings = make_copy(mod, home, tmp_path / "run")
    finally:
        control.close()
    assert contents(copy) == KEYS
    expected = {"agent.fifo": "a FIFO", "config.d": "a directory"}
    if device:
        expected["null"] = "a device"
    # The ControlMaster socket goes without a word.
    assert warnings == ["--ssh: left out ~/.ssh/%s: %s (only regular files the caller owns are copied)"
                        % item for item in sorted(expected.items())]


def test_a_file_of_another_owner_is_left_out(mod, home, tmp_path):
    os.chown(str(home / ".ssh" / "config"), OTHER, GID)
    copy, warnings = make_copy(mod, home, tmp_path / "run")
    assert sorted(contents(copy)) == sorted(set(KEYS) - {"config"})
    assert "owned by uid %d" % OTHER in warnings[0]


def test_a_huge_file_is_refused(mod, home, tmp_path):
    huge = home / ".ssh" / "known_hosts"
    with open(str(huge), "wb") as handle:
        handle.truncate(mod.SSH_MAX_FILE + 1)
    refused(mod, home, tmp_path / "run", re.escape("known_hosts is larger than 1024 KiB"))


def test_a_file_that_grows_after_its_fstat_is_refused(mod, tmp_path):
    path = tmp_path / "grown"
    path.write_bytes(b"x" * 20)
    fd = os.open(str(path), os.O_RDONLY)
    try:
        with pytest.raises(mod.Refused, match="larger than"):
            mod.read_limited(fd, 10, str(path))
    finally:
        os.close(fd)


@pytest.mark.parametrize("limit, value, pattern", [("SSH_MAX_FILES", 3, "more than 3 files"),
                                                   ("SSH_MAX_ENTRIES", 2, "more than 2 entries"),
                                                   ("SSH_MAX_TOTAL", 100, "more than 0 KiB of files")])
def test_too_many_files_entries_or_bytes_are_refused(mod, home, tmp_path, monkeypatch, limit, value, pattern):
    monkeypatch.setattr(mod, limit, value)
    refused(mod, home, tmp_path / "run", pattern)


def test_the_limits_the_docstring_names_are_the_launchers(mod):
    doc = " ".join(mod.__doc__.split())
    assert "More than %d entries, more than %d files, a file over %d KiB or more than %d KiB in all" % (
        mod.SSH_MAX_ENTRIES, mod.SSH_MAX_FILES, mod.SSH_MAX_FILE // 1024, mod.SSH_MAX_TOTAL // 1024) in doc
    assert "run directory, %s" % mod.RUN_DIR in doc
    assert "exit status %d" % mod.REFUSED in doc


# --- swaps between the launcher's steps ---

def test_ssh_swapped_for_a_link_right_after_it_was_opened_still_gives_the_callers_files(mod, home, secret,
                                                                                        tmp_path, monkeypatch):
    def open_then_swap(name, flags, mode=0o777, dir_fd=None):
        fd = os.open(name, flags, mode, dir_fd=dir_fd)
        if name == ".ssh":
            swap_for_link(home / ".ssh", secret)
        return fd
    monkeypatch.setattr(mod, "os", Spy(open=open_then_swap))
    copy, warnings = make_copy(mod, home, tmp_path / "run")
    assert os.path.islink(str(home / ".ssh"))
    # Read through the descriptor opened before the swap: the caller's files, nothing of root's.
    assert contents(copy) == KEYS and warnings == []


def test_ssh_swapped_for_a_link_just_before_it_is_opened_is_refused(mod, home, secret, tmp_path, monkeypatch):
    def swap_then_open(name, flags, mode=0o777, dir_fd=None):
        if name == ".ssh":
            swap_for_link(home / ".ssh", secret)
        return os.open(name, flags, mode, dir_fd=dir_fd)
    monkeypatch.setattr(mod, "os", Spy(open=swap_then_open))
    refused(mod, home, tmp_path / "run", "symbolic link")


def test_the_home_swapped_for_a_link_after_it_was_opened_still_gives_the_callers_files(mod, home, secret,
                                                                                       tmp_path, monkeypatch):
    def open_then_swap(name, flags, mode=0o777, dir_fd=None):
        fd = os.open(name, flags, mode, dir_fd=dir_fd)
        if name == str(home):
            swap_for_link(home, secret)
        return fd
    monkeypatch.setattr(mod, "os", Spy(open=open_then_swap))
    copy, _unused = make_copy(mod, home, tmp_path / "run")
    assert contents(copy) == KEYS


@pytest.mark.parametrize("replacement", ["link", "fifo", "hard link"])
def test_a_key_file_swapped_between_its_lstat_and_its_open_is_left_out(mod, home, secret, tmp_path, monkeypatch,
                                                                       replacement):
    victim = home / ".ssh" / "id_ed25519"

    def stat_then_swap(name, dir_fd=None, follow_symlinks=True):
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        if name == "id_ed25519" and dir_fd is not None:
            victim.unlink()
            if replacement == "link":
                victim.symlink_to(secret / "shadow")
            elif replacement == "fifo":
                os.mkfifo(str(victim))
                os.chown(str(victim), UID, GID)
            else:
                os.link(str(secret / "shadow"), str(victim))
        return info
    monkeypatch.setattr(mod, "os", Spy(stat=stat_then_swap))
    with no_longer_than(10):
        copy, warnings = make_copy(mod, home, tmp_path / "run")
    assert "id_ed25519" not in contents(copy)
    assert SECRET not in b"".join(contents(copy).values())
    why = {"link": "a symbolic link", "fifo": "a FIFO", "hard link": "owned by uid 0, not by the caller"}[replacement]
    assert warnings == ["--ssh: left out ~/.ssh/id_ed25519: %s (only regular files the caller owns are copied)" % why]


def test_a_key_file_that_is_roots_only_while_it_is_opened_is_left_out(mod, home, secret, tmp_path, monkeypatch):
    # Root's file (a hard link) at the moment of the open, the caller's own again right after: only the open
    # descriptor tells what was opened.
    victim = home / ".ssh" / "id_ed25519"

    def swap_around_open(name, flags, mode=0o777, dir_fd=None):
        if name != "id_ed25519" or flags & os.O_DIRECTORY or flags & os.O_CREAT:
            return os.open(name, flags, mode, dir_fd=dir_fd)
        victim.unlink()
        os.link(str(secret / "shadow"), str(victim))
        fd = os.open(name, flags, mode, dir_fd=dir_fd)
        victim.unlink()
        victim.write_bytes(KEYS["id_ed25519"])
        os.chown(str(victim), UID, GID)
        return fd
    monkeypatch.setattr(mod, "os", Spy(open=swap_around_open))
    copy, warnings = make_copy(mod, home, tmp_path / "run")
    assert SECRET not in b"".join(contents(copy).values())
    assert "id_ed25519" not in contents(copy)
    assert warnings == ["--ssh: left out ~/.ssh/id_ed25519: owned by uid 0, not by the caller "
                        "(only regular files the caller owns are copied)"]


# --- the run directory ---

def test_the_run_directory_is_made_roots_alone(mod, tmp_path):
    fd = mod.run_directory(str(tmp_path / "run"), anywhere)
    os.close(fd)
    info = os.lstat(str(tmp_path / "run"))
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o700)


@pytest.mark.parametrize("setup, pattern", [("link", "symbolic link"), ("open", "not root's alone"),
                                            ("user", "not root's alone"), ("above", "a directory above")])
def test_a_run_directory_others_could_change_or_enter_is_refused(mod, tmp_path, setup, pattern):
    run_dir = tmp_path / "run"
    (tmp_path / "real").mkdir(mode=0o700)
    if setup == "link":
        os.symlink(str(tmp_path / "real"), str(run_dir))
    else:
        run_dir.mkdir(mode=0o700)
    if setup == "open":
        os.chmod(str(run_dir), 0o755)
    if setup == "user":
        os.chown(str(run_dir), UID, GID)
    with pytest.raises(mod.Refused, match=pattern):
        mod.run_directory(str(run_dir), (lambda path: False) if setup == "above" else anywhere)


def test_the_real_run_directory_check_refuses_a_place_everyone_can_write(mod, tmp_path):
    # tmp_path is under /tmp (sticky, world-writable): not a place for root's copies.
    with pytest.raises(mod.Refused, match="a directory above"):
        mod.run_directory(str(tmp_path / "run"))


# --- removal ---

def dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_copies_whose_launcher_is_gone_are_removed_without_following_links(mod, home, secret, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    me, started = os.getpid(), mod.process_start(os.getpid())
    names = {"dead": "ssh.%d.%s.%s" % (dead_pid(), "1", "a" * 16),
             "reused": "ssh.%d.%s.%s" % (me, int(started) - 1, "b" * 16),
             "live": "ssh.%d.%s.%s" % (me, started, "c" * 16)}
    for name in names.values():
        (run_dir / name).mkdir()
        (run_dir / name / "id_ed25519").write_bytes(b"k")
    # A stale copy holding links to root's files: removed, what they point to kept.
    (run_dir / names["dead"] / "to-secret-dir").symlink_to(secret)
    (run_dir / names["dead"] / "to-secret-file").symlink_to(secret / "shadow")
    (run_dir / "unrelated").mkdir()
    copy, _unused = make_copy(mod, home, run_dir)
    assert sorted(os.listdir(str(run_dir))) == sorted([names["live"], "unrelated", copy.name])
    assert (secret / "shadow").read_bytes() == SECRET


def test_a_copy_is_alive_while_its_pid_runs_the_process_that_made_it(mod):
    me = os.getpid()
    assert mod.copy_owner_alive(me, mod.process_start(me))
    assert not mod.copy_owner_alive(me, "1")
    assert not mod.copy_owner_alive(dead_pid(), "1")


def test_remove_copy_unlinks_a_link_rather_than_emptying_its_target(mod, secret, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ("ssh.1.1." + "d" * 16)).symlink_to(secret)
    mod.remove_copy(str(run_dir), "ssh.1.1." + "d" * 16)
    assert (secret / "shadow").read_bytes() == SECRET
    assert "could not remove" in capsys.readouterr().err


# --- main --ssh: the copy mounted, the engine its child, the copy removed ---

@pytest.fixture
def as_root_for(mod, home, tmp_path, monkeypatch):
    """main as root for the sudo caller UID:GID, with the run directory in tmp_path and no real uid switch."""
    monkeypatch.setenv("SUDO_UID", str(UID))
    monkeypatch.setenv("SUDO_GID", str(GID))
    monkeypatch.setattr(mod, "pwd", type("Pwd", (), {"getpwuid": staticmethod(lambda uid: account(home))}))
    monkeypatch.setattr(mod, "RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(mod, "AsCaller", no_switch)
    monkeypatch.setattr(mod, "root_only_above", anywhere)
    return tmp_path / "run"


def test_main_mounts_the_copy_runs_the_engine_as_its_child_and_removes_the_copy(mod, home, as_root_for):
    seen = {}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])

    def spawn(path, args, env, setsigmask):
        source, dest, _unused = [arg for arg in args if arg.endswith(":%s/.ssh:ro" % home)][0].split(":")
        seen.update(args=args, env=env, dest=dest, copy=contents(pathlib.Path(source)), mask=setsigmask)
        return os.posix_spawn("/bin/sh", ["sh", "-c", "exit 7"], env, setsigmask=setsigmask)
    assert mod.main(["--ssh", "--", "mpirun", "hostname"], euid=0, spawn=spawn) == 7
    assert seen["dest"] == str(home / ".ssh") and seen["copy"] == KEYS
    assert seen["args"][-3:] == [mod.IMAGE, "mpirun", "hostname"]
    assert seen["args"][seen["args"].index("--user") + 1] == "%d:%d" % (UID, GID)
    assert set(seen["env"]) == {"PATH"}
    # The engine starts with the signal mask the launcher had; the launcher gets it back; no copy is left.
    assert set(seen["mask"]) == set(mask) == set(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    assert os.listdir(str(as_root_for)) == []


def test_main_refuses_a_linked_ssh_and_starts_nothing(mod, home, secret, as_root_for, capsys):
    swap_for_link(home / ".ssh", secret)
    started = []
    assert mod.main(["--ssh", "--", "id"], euid=0, spawn=lambda *a, **k: started.append(a)) == 125
    assert started == []
    assert "gpufleet-run-image: --ssh: %s/.ssh is a symbolic link" % home in capsys.readouterr().err
    assert os.listdir(str(as_root_for)) == []


def test_an_engine_that_cannot_start_still_removes_the_copy(mod, home, as_root_for):
    def spawn(path, args, env, setsigmask):
        raise FileNotFoundError(2, "No such file or directory")
    assert mod.main(["--ssh", "--", "id"], euid=0, spawn=spawn) == 127
    assert os.listdir(str(as_root_for)) == []


# --- signals, in a process of their own ---

HARNESS = r'''
import contextlib, importlib.util, os, pwd, signal, sys
# HUP and INT at their defaults, as in a terminal: under nohup, or started in the background by a shell, the tests
# inherit them ignored, and an ignored signal stays ignored across exec, down to the engine's shell.
for number in (signal.SIGHUP, signal.SIGINT):
    signal.signal(number, signal.SIG_DFL)
spec = importlib.util.spec_from_file_location("launcher", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mode, engine = sys.argv[2], sys.argv[3]
if mode == "supervise":
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, mod.WATCHED)
    sys.exit(mod.supervise(["/bin/sh", "-c", engine], {"PATH": "/usr/bin:/bin"}, previous))
home, run_dir, uid, gid = sys.argv[4:8]
mod.pwd = type("Pwd", (), {"getpwuid": staticmethod(
    lambda caller: pwd.struct_passwd(("aiuser", "x", int(uid), int(gid), "", home, "/bin/sh")))})
os.environ.update(SUDO_UID=uid, SUDO_GID=gid)

def spawn(path, args, env, setsigmask):
    return os.posix_spawn("/bin/sh", ["sh", "-c", engine, "engine"] + list(args), env, setsigmask=setsigmask)

sys.exit(mod.run_with_ssh(["id"], None, {}, spawn=spawn, run_dir=run_dir,
                          as_caller=lambda *ids: contextlib.nullcontext(), above=lambda path: True))
'''


def engine_script(record):
    """A stand-in engine CLI: records each signal it gets, exiting with 3 (TERM), 4 (HUP) or 5 (INT), and then its
    argv and pid. The pid file says it is ready: its traps are set before it is written, so a signal sent once it is
    there meets the trap, never the default action (the order once let a loaded machine kill it before its traps)."""
    return ("trap 'echo TERM >> {r}.signals; exit 3' TERM; trap 'echo HUP >> {r}.signals; exit 4' HUP; "
            "trap 'echo INT >> {r}.signals; exit 5' INT; "
            "printf '%s\\n' \"$@\" > {r}.args; echo $$ > {r}.pid; "
            "while :; do sleep 0.05; done").format(r=record)


def start(tmp_path, *argv):
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "gpufleet-run-image.py")] + list(argv),
                            stderr=subprocess.PIPE)


def wait_for(path, seconds=20):
    deadline = time.time() + seconds
    while not os.path.exists(path) or not open(path).read().strip():
        assert time.time() < deadline, "%s never appeared" % path
        time.sleep(0.02)


@pytest.mark.parametrize("sent, code", [(signal.SIGTERM, 3), (signal.SIGHUP, 4), (signal.SIGINT, 5)])
def test_a_signal_sent_to_the_launcher_reaches_the_engine_once_and_its_status_comes_back(mod, tmp_path, sent, code):
    record = str(tmp_path / "engine")
    harness = start(tmp_path, "supervise", engine_script(record))
    try:
        wait_for(record + ".pid")
        harness.send_signal(sent)
        assert harness.wait(20) == code
    finally:
        harness.kill()
    assert open(record + ".signals").read().split() == [sent.name[3:]]


def test_an_engine_killed_by_a_signal_gives_128_plus_its_number(mod, tmp_path):
    harness = start(tmp_path, "supervise", "kill -KILL $$")
    assert harness.wait(20) == 128 + signal.SIGKILL


def test_the_engines_exit_status_passes_through(mod, tmp_path):
    assert start(tmp_path, "supervise", "exit 42").wait(20) == 42


def ssh_run(mod, home, tmp_path):
    record = str(tmp_path / "engine")
    run_dir = tmp_path / "run"
    harness = start(tmp_path, "ssh", engine_script(record), str(home), str(run_dir), str(UID), str(GID))
    wait_for(record + ".pid")  # written last: the argv is there too
    args = open(record + ".args").read().splitlines()
    source = [arg for arg in args if arg.endswith(":%s/.ssh:ro" % home)][0].split(":")[0]
    return harness, record, run_dir, source


def test_a_terminated_launcher_stops_the_engine_and_removes_the_copy(mod, home, tmp_path):
    harness, record, run_dir, source = ssh_run(mod, home, tmp_path)
    try:
        assert os.path.dirname(source) == str(run_dir) and contents(pathlib.Path(source)) == KEYS
        harness.terminate()
        assert harness.wait(20) == 3
    finally:
        harness.kill()
    assert open(record + ".signals").read().split() == ["TERM"]
    assert os.listdir(str(run_dir)) == []


def test_the_copy_of_a_killed_launcher_is_removed_at_the_next_start(mod, home, tmp_path):
    harness, record, run_dir, source = ssh_run(mod, home, tmp_path)
    harness.kill()
    harness.wait(20)
    os.kill(int(open(record + ".pid").read()), signal.SIGKILL)
    assert os.path.isdir(source)
    copy, _unused = make_copy(mod, home, run_dir)
    assert os.listdir(str(run_dir)) == [copy.name]


# --- the real switch to the caller's ids, in a process of its own ---

AS_CALLER = r'''
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("launcher", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
with mod.AsCaller(int(sys.argv[3]), int(sys.argv[4]), [int(sys.argv[4])]):
    inside = os.geteuid(), os.getegid()
    files, skipped = mod.read_ssh(sys.argv[2], int(sys.argv[3]))
print(json.dumps({"inside": inside, "after": [os.geteuid(), os.getegid()], "files": sorted(name for name, _ in files),
                  "skipped": skipped}))
'''


def test_the_caller_files_are_read_with_the_callers_ids(mod, tmp_path):
    # A file the caller owns but may not read (mode 0000) stays out: the kernel checks every open as for the
    # caller, so root reads nothing the caller could not.
    base = tempfile.mkdtemp(dir="/tmp")
    try:
        os.chmod(base, 0o755)
        home = make_home(pathlib.Path(base))
        (home / ".ssh" / "locked").write_bytes(b"x")
        os.chown(str(home / ".ssh" / "locked"), UID, GID)
        os.chmod(str(home / ".ssh" / "locked"), 0)
        script = tmp_path / "as_caller.py"
        script.write_text(AS_CALLER)
        out = subprocess.run([sys.executable, str(script), str(tmp_path / "gpufleet-run-image.py"), str(home),
                              str(UID), str(GID)], stdout=subprocess.PIPE, check=True).stdout
    finally:
        shutil.rmtree(base)
    result = json.loads(out)
    assert result["inside"] == [UID, GID] and result["after"] == [0, 0]
    assert result["files"] == sorted(KEYS)
    assert result["skipped"] == [["locked", "not readable by the caller (Permission denied)"]]


# --- the other paths root hands to the engine ---

D, F, L = stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK
TREE = {"/": (D, 0, 0o755), "/etc": (D, 0, 0o755), "/etc/nccl.conf": (F, 0, 0o644),
        "/etc/ucx": (D, 1000, 0o755), "/etc/ucx/ucx.conf": (F, 0, 0o644),
        "/etc/openmpi": (D, 0, 0o775), "/etc/openmpi/openmpi-mca-params.conf": (F, 0, 0o644),
        "/etc/gpufleet": (D, 0, 0o755), "/etc/gpufleet/fabric.env": (L, 0, 0o777),
        "/etc/gpufleet/hostfile": (F, 0, 0o644), "/etc/gpufleet/placement.json": (F, 0, 0o644),
        "/etc/ssh": (D, 0, 0o755), "/etc/ssh/ssh_known_hosts": (F, 0, 0o644), "/etc/ssh/ssh_config.d": (D, 0, 0o755),
        "/srv": (D, 0, 0o755), "/srv/jobs": (D, 1000, 0o755),
        "/home": (D, 0, 0o755), "/home/aiuser": (D, 1000, 0o700), "/home/aiuser/data": (D, 1000, 0o755),
        "/tmp": (D, 0, 0o1777), "/tmp/shared": (D, 0, 0o755),
        "/usr": (D, 0, 0o755), "/usr/local": (D, 0, 0o755), "/usr/local/lib": (D, 0, 0o755),
        "/usr/local/lib/gpufleet": (D, 0, 0o755), "/usr/local/lib/gpufleet/validate": (D, 0, 0o755)}


def fake_lstat(tree):
    def lstat(path):
        if path not in tree:
            raise FileNotFoundError(2, "No such file or directory", path)
        kind, uid, mode = tree[path]
        return os.stat_result((kind | mode, 0, 0, 1, uid, uid, 0, 0, 0, 0))
    return lstat


@pytest.mark.parametrize("path, trusted", [
    ("/etc/nccl.conf", True), ("/srv/jobs", True), ("/usr/local/lib/gpufleet/validate", True),
    ("/etc/ucx/ucx.conf", False),                 # a user's directory above it
    ("/etc/openmpi/openmpi-mca-params.conf", False),  # a group-writable directory above it
    ("/home/aiuser/data", False), ("/tmp/shared", False),  # the user's home, a sticky world-writable directory
    ("/etc/gpufleet/fabric.env", False),          # a link
    ("/etc/missing.conf", False), ("etc/nccl.conf", False), ("/etc/../etc/nccl.conf", False),
    ("//etc/nccl.conf", False), ("/srv/jobs/", False), ("/", False)])
def test_only_paths_no_one_but_root_can_change_are_trusted(mod, path, trusted):
    assert mod.trusted_path(path, fake_lstat(TREE)) is trusted


def test_the_engine_gets_only_trusted_settings_mounts_and_files(mod, monkeypatch):
    monkeypatch.setattr(mod, "MOUNTS", [{"src": "/srv/jobs/", "dest": "/jobs"},
                                        {"src": "/home/aiuser/data", "dest": "/data"},
                                        {"src": "/usr/local/lib/gpufleet/validate", "dest": "/opt/gpufleet/validate"},
                                        {"src": "/srv/absent", "dest": "/absent"}])
    tree = dict(TREE)
    warnings = []
    sources = mod.trusted_sources(fake_lstat(tree), warnings.append)
    assert sources["settings"] == ["/etc/nccl.conf", "/etc/gpufleet/hostfile", "/etc/gpufleet/placement.json"]
    # A mount's own directory may be a user's: the path is checked, and handed on as checked (no trailing slash).
    assert sources["mounts"] == [{"src": "/srv/jobs", "dest": "/jobs"},
                                 {"src": "/usr/local/lib/gpufleet/validate", "dest": "/opt/gpufleet/validate"}]
    assert sources["fabric_env"] == ""
    assert sources["ssh_paths"] == ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_config.d"]
    left_out = sorted(re.match(r"left out (\S+):", warning).group(1) for warning in warnings)
    assert left_out == ["/etc/gpufleet/fabric.env", "/etc/openmpi/openmpi-mca-params.conf", "/etc/ucx/ucx.conf",
                        "/home/aiuser/data"]
    # A root-owned fabric environment file that its group may write is left out too; a sound one is handed on.
    tree["/etc/gpufleet/fabric.env"] = (F, 0, 0o664)
    assert mod.trusted_sources(fake_lstat(tree), warnings.append)["fabric_env"] == ""
    tree["/etc/gpufleet/fabric.env"] = (F, 0, 0o644)
    assert mod.trusted_sources(fake_lstat(tree), warnings.append)["fabric_env"] == "/etc/gpufleet/fabric.env"
    # The cluster hostfile likewise: a group-writable one would let that group point mpirun at other hosts.
    tree["/etc/gpufleet/hostfile"] = (F, 0, 0o664)
    assert mod.trusted_sources(fake_lstat(tree), warnings.append)["settings"] == [
        "/etc/nccl.conf", "/etc/gpufleet/placement.json"]
    # The placement map too: a group-writable one would let that group move ranks off their GPU's CPUs.
    tree["/etc/gpufleet/placement.json"] = (F, 0, 0o664)
    assert mod.trusted_sources(fake_lstat(tree), warnings.append)["settings"] == ["/etc/nccl.conf"]


def test_the_real_check_refuses_a_path_under_tmp_and_a_link(mod, tmp_path):
    (tmp_path / "file").write_text("x")
    assert not mod.trusted_path(str(tmp_path / "file"))
    assert not mod.root_only_above(str(tmp_path / "file"))
    assert mod.trusted_path("/") is False
