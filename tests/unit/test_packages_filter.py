"""packages_missing against package_facts' dict shape ({name: [{name, version, arch, source}]})."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.packages import packages_missing

FACTS = {
    "openssh-server": [{"name": "openssh-server", "version": "1:10.0p1-7", "arch": "amd64", "source": "apt"}],
    "nvidia-container-toolkit": [{"name": "nvidia-container-toolkit", "version": "1.17.8-1", "arch": "amd64",
                                  "source": "apt"}],
    "fail2ban": [{"name": "fail2ban", "version": "1.1.0-8", "arch": "all", "source": "apt"}],
}


def test_all_present_means_nothing_to_do():
    assert packages_missing(["openssh-server", "fail2ban"], FACTS) == []


def test_absent_names_are_returned_in_order():
    assert packages_missing(["rdma-core", "fail2ban", "ucx-utils"], FACTS) == ["rdma-core", "ucx-utils"]


def test_version_globs():
    assert packages_missing(["nvidia-container-toolkit=1.17.8-*"], FACTS) == []
    assert packages_missing(["nvidia-container-toolkit=1.18.0-*"], FACTS) == ["nvidia-container-toolkit=1.18.0-*"]


@pytest.mark.parametrize("entry", ["foo>=1.0", "/tmp/x.deb", "https://example.org/x.deb", ""])
def test_specs_it_cannot_judge_count_as_missing(entry):
    assert packages_missing([entry], FACTS) == [entry]


@pytest.mark.parametrize("facts", [None, "", []])
def test_without_package_facts_every_name_is_missing(facts):
    assert packages_missing(["openssh-server", "fail2ban"], facts) == ["openssh-server", "fail2ban"]


def test_single_name_string():
    assert packages_missing("fail2ban", FACTS) == []


def test_not_a_list_is_an_error():
    with pytest.raises(AnsibleFilterError):
        packages_missing({"a": 1}, FACTS)
