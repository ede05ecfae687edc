# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Module payloads (AnsiballZ) kept between ansible-playbook runs on the controller.

The first time a run uses a module, the worker that runs it builds the module's payload: it parses the module and,
recursively, every module_utils file it imports, and zips them. ansible-core keeps the payload in the run's own
temporary folder (C(DEFAULT_LOCAL_TMP)/ansiballz_cache, one file per module, compression and extensions) for the
later tasks of that run, and removes it when the run ends. A no-op run of site.yml builds about 20 payloads, about
0.3 s of CPU each.

This module keeps them: when a run ends, every payload the run built is stored with a manifest of the files it was
built from (each file of the zip: where it comes from on the controller, and the SHA-256 of that file); when the
next run starts, each stored payload whose files all still resolve to the same places and have the same contents
is put into the new run's folder under ansible-core's own name, and ansible-core uses it as if an earlier task of
the run had built it. A payload built from the same files is the same payload; any changed, moved or shadowing
file is a miss and the worker builds it as usual.

What decides where a file comes from is part of the folder name (ansible-core, Python, the collection paths, the
playbook's collection paths), so another setting finds another folder. The cache stays off when module_utils
folders of one's own are configured (they can shadow ansible.module_utils without a file of the payload changing).
A payload is not kept when a file of its zip is not its controller file byte for byte (ansible-core's own package
markers, __init__.py, aside), since it could then not be checked.

Entries are kept as private_cache keeps them (a private folder of the user running Ansible, files only that user
can write, written atomically, removed after 30 days unused).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import io
import marshal
import os
import pickle
import sys
import zipfile

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import private_cache

FORMAT = 1
MISSING = "missing"


class Unresolved(Exception):
    """A file of the payload cannot be located on the controller now."""


def run_directory():
    """ansible-core's payload folder of this run (it builds payloads there and looks for them there)."""
    from ansible import constants as C

    return os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache")


def own_module_utils_paths():
    """The module_utils folders besides ansible-core's own that payloads are built from (as ansible-core finds them)."""
    from ansible.executor.module_common import _MODULE_UTILS_PATH
    from ansible.plugins.loader import module_utils_loader

    own = os.path.realpath(_MODULE_UTILS_PATH)
    return [path for path in module_utils_loader._get_paths(subdirs=False)
            if os.path.isdir(path) and os.path.realpath(path) != own]


def context():
    """What decides where a payload's files come from, other than the files themselves."""
    from ansible.release import __version__
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    return repr((FORMAT, __version__, sys.version, list(AnsibleCollectionConfig.collection_paths),
                 list(AnsibleCollectionConfig.playbook_paths)))


class Resolver:
    """Where the files of a payload come from on this controller now."""

    def __init__(self):
        import ansible

        self.ansible_parent = os.path.dirname(os.path.dirname(os.path.abspath(ansible.__file__)))
        self.collections = {}
        self.digests = {}

    def digest(self, path):
        """file_digest, once per file and run (payloads share most of their files)."""
        if path not in self.digests:
            self.digests[path] = file_digest(path)
        return self.digests[path]

    def collection_path(self, name):
        if name not in self.collections:
            from ansible.utils.collection_loader._collection_finder import _get_collection_path

            try:
                self.collections[name] = os.path.abspath(_get_collection_path(name))
            except Exception:  # pylint: disable=broad-except
                self.collections[name] = None
        return self.collections[name]

    def source(self, member):
        """The controller file a zip member comes from, or None for a package marker of the namespaces."""
        parts = member.split("/")
        if ".." in parts or "" in parts:
            raise Unresolved(member)
        if parts[0] == "ansible":
            return os.path.join(self.ansible_parent, *parts)
        if parts[0] == "ansible_collections":
            if len(parts) <= 3:
                return None  # ansible_collections/__init__.py, ansible_collections/<ns>/__init__.py
            base = self.collection_path("%s.%s" % (parts[1], parts[2]))
            if base is None:
                raise Unresolved(member)
            return os.path.join(base, *parts[3:])
        raise Unresolved(member)


def file_digest(path):
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return MISSING


def manifest_of(raw, resolver):
    """(member, controller file, SHA-256 of that file) for each file of a stored payload, or None when a member is
    not its controller file byte for byte (package markers aside) or cannot be located."""
    cached = pickle.loads(raw)  # ansible-core's own _CachedModule, written by this run into its private folder
    archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(cached.zip_data)))
    manifest = []
    try:
        for member in sorted(archive.namelist()):
            path = resolver.source(member)
            digest = resolver.digest(path)
            if not member.endswith("__init__.py"):
                if path is None or digest != hashlib.sha256(archive.read(member)).hexdigest():
                    return None
            manifest.append((member, path, digest))
    except Unresolved:
        return None
    return tuple(manifest)


def still_valid(manifest, resolver):
    try:
        return all(resolver.source(member) == path and resolver.digest(path) == digest
                   for member, path, digest in manifest)
    except Unresolved:
        return False


def entry_name(payload_name):
    return hashlib.sha256(payload_name.encode("utf-8", "surrogatepass")).hexdigest()


class ModulePayloadCache:
    """Seeds a run's payload folder from the stored payloads, and stores what the run built."""

    def __init__(self, directory):
        self.directory = directory
        self.seeded = set()
        self.stored = 0

    def seed(self):
        """Put every stored payload whose files are unchanged into this run's folder; return how many."""
        run = run_directory()
        os.makedirs(run, mode=0o700, exist_ok=True)
        resolver = Resolver()
        for name in sorted(os.listdir(self.directory)):
            if name.startswith("."):
                continue
            data = private_cache.read_private(self.directory, name)
            try:
                form, payload_name, manifest, raw = marshal.loads(data)
            except (TypeError, ValueError, EOFError):
                continue
            if (form != FORMAT or name != entry_name(payload_name) or os.path.basename(payload_name) != payload_name
                    or payload_name.startswith(".") or payload_name.endswith((".lock", "-part"))):
                continue
            if not still_valid(manifest, resolver):
                continue
            if not os.path.exists(os.path.join(run, payload_name)):
                private_cache.write_private(run, payload_name, raw)
            try:
                os.utime(os.path.join(self.directory, name))  # used: not pruned
            except OSError:
                pass
            self.seeded.add(payload_name)
        return len(self.seeded)

    def store(self):
        """Keep every payload this run built (those not seeded); return how many."""
        run = run_directory()
        try:
            names = sorted(os.listdir(run))
        except OSError:
            return 0
        resolver = Resolver()
        for payload_name in names:
            if payload_name in self.seeded or payload_name.startswith(".") or payload_name.endswith((".lock", "-part")):
                continue
            raw = private_cache.read_private(run, payload_name)
            if raw is None:
                continue
            try:
                manifest = manifest_of(raw, resolver)
            except Exception:  # pylint: disable=broad-except
                manifest = None
            if manifest is None:
                continue
            private_cache.write_private(self.directory, entry_name(payload_name),
                                        marshal.dumps((FORMAT, payload_name, manifest, raw)))
            self.stored += 1
        return self.stored


def install(root=None):
    """The cache for this run (its folder made and pruned), or None when it must stay off: own module_utils folders,
    an ansible-core without the payload folder it knows, or no private folder."""
    try:
        from ansible.executor.module_common import _CachedModule, _MODULE_UTILS_PATH  # noqa: F401 pylint: disable=unused-import
    except ImportError:
        return None
    if not private_cache.core_is_known() or own_module_utils_paths():
        return None
    base = os.path.join(root or private_cache.default_root("payloads"),
                        "v%d-%s" % (FORMAT, hashlib.sha256(context().encode()).hexdigest()[:16]))
    directory = private_cache.make_directory(base)
    if directory is None:
        return None
    private_cache.prune(directory)
    return ModulePayloadCache(directory)
