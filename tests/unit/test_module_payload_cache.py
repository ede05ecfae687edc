"""module_payload_cache's manifest: a payload is kept only when every file of its zip is its controller file byte for
byte (package markers aside) and can be located; a stored manifest holds only while every file resolves to the same
place with the same SHA-256. (tests/integration/test_module_payload_cache_runs.py runs it through ansible-playbook.)"""
import base64
import hashlib
import io
import os
import pickle
import zipfile

import pytest

import ansible
from ansible.executor.module_common import _CachedModule
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import module_payload_cache as cache

ANSIBLE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(ansible.__file__)))


def payload(members):
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return pickle.dumps(_CachedModule(zip_data=base64.b64encode(data.getvalue()), metadata=None, source_mapping={}))


def real(member):
    with open(os.path.join(ANSIBLE_PARENT, member), "rb") as handle:
        return handle.read()


def test_a_payload_of_unchanged_files_gets_a_manifest_of_their_digests():
    basic = "ansible/module_utils/basic.py"
    manifest = cache.manifest_of(payload({basic: real(basic), "ansible/__init__.py": b"# a marker ansible writes",
                                          "ansible_collections/__init__.py": b""}), cache.Resolver())
    by_member = {member: (path, digest) for member, path, digest in manifest}
    assert by_member[basic] == (os.path.join(ANSIBLE_PARENT, basic), hashlib.sha256(real(basic)).hexdigest())
    assert by_member["ansible_collections/__init__.py"] == (None, None)
    assert cache.still_valid(manifest, cache.Resolver())


def test_a_member_that_is_not_its_file_byte_for_byte_is_not_kept():
    basic = "ansible/module_utils/basic.py"
    assert cache.manifest_of(payload({basic: real(basic) + b"\n# changed"}), cache.Resolver()) is None


@pytest.mark.parametrize("member", ["ansible/../etc/passwd", "elsewhere/x.py", "ansible//x.py",
                                    "ansible_collections/nosuch/collection/plugins/modules/x.py"])
def test_members_that_cannot_be_located_are_not_kept(member):
    assert cache.manifest_of(payload({member: b"x = 1\n"}), cache.Resolver()) is None


def test_a_manifest_no_longer_holds_when_a_file_changes_or_moves(tmp_path):
    resolver = cache.Resolver()
    basic = "ansible/module_utils/basic.py"
    path = os.path.join(ANSIBLE_PARENT, basic)
    good = ((basic, path, hashlib.sha256(real(basic)).hexdigest()),)
    assert cache.still_valid(good, resolver)
    assert not cache.still_valid(((basic, path, "0" * 64),), cache.Resolver())
    assert not cache.still_valid(((basic, str(tmp_path / "basic.py"), good[0][2]),), cache.Resolver())
