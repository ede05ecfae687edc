"""template_cache.share_plugin_lookups: a filter or test name is looked up once per process, not once per template
environment; what a lookup finds is what ansible-core finds; a name set on one environment wins there only; a name
that does not exist stays missing; the memo starts again when the plugin loader's caches are cleared."""
import pytest

from ansible._internal._templating._jinja_bits import AnsibleEnvironment
from ansible.plugins.loader import filter_loader
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import template_cache


@pytest.fixture
def shared():
    memo = template_cache.share_plugin_lookups(warm=False)
    yield memo
    template_cache.unshare_plugin_lookups()


@pytest.fixture
def loader_calls(monkeypatch):
    calls = []
    original = type(filter_loader).get

    def counting(self, name, *args, **kwargs):
        calls.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(type(filter_loader), "get", counting)
    return calls


def test_a_name_is_looked_up_once_for_every_environment(shared, loader_calls):
    first = AnsibleEnvironment().filters["default"]
    second = AnsibleEnvironment().filters["default"]
    assert first is second
    assert loader_calls.count("default") == 1


def test_what_is_found_is_what_ansible_core_finds(shared):
    template_cache.unshare_plugin_lookups()
    plain = {name: AnsibleEnvironment().filters[name].__wrapped__ for name in ("default", "to_json", "b64encode")}
    template_cache.share_plugin_lookups(warm=False)
    for name, function in plain.items():
        assert AnsibleEnvironment().filters[name].__wrapped__ is function
    assert AnsibleEnvironment().tests["defined"](1) is True


def test_a_missing_name_stays_missing(shared, loader_calls):
    for _attempt in range(2):
        assert AnsibleEnvironment().filters.get("gpufleet_no_such_filter") is None
        with pytest.raises(KeyError):
            AnsibleEnvironment().filters["gpufleet_no_such_filter"]  # pylint: disable=expression-not-assigned
    assert loader_calls.count("gpufleet_no_such_filter") == 1


def test_a_name_set_on_one_environment_wins_there_only(shared):
    own = AnsibleEnvironment()
    own.filters["default"] = lambda value, fallback=None: "own"
    assert own.filters["default"](None) == "own"
    assert AnsibleEnvironment().filters["default"](None) is None  # ansible-core's default, not this one


def test_clearing_the_loader_caches_starts_the_memo_again(shared, loader_calls):
    AnsibleEnvironment().filters["to_json"]  # pylint: disable=expression-not-assigned
    filter_loader._clear_caches()
    AnsibleEnvironment().filters["to_json"]  # pylint: disable=expression-not-assigned
    assert loader_calls.count("to_json") == 2


def test_warming_looks_up_jinja_and_ansible_names_now():
    memo = template_cache.share_plugin_lookups(warm=True)
    try:
        assert {"default", "join", "to_json"} <= set(memo["filter"][1])
        assert {"defined", "match"} <= set(memo["test"][1])
    finally:
        template_cache.unshare_plugin_lookups()


def test_the_default_lexer_is_built_before_the_workers_fork(monkeypatch):
    """After warm_lexer, a template with ansible-core's default settings builds no lexer of its own: a worker forked
    then inherits it."""
    from ansible._internal._templating import _jinja_bits
    from ansible._internal._templating._engine import TemplateEngine
    from ansible.template import trust_as_template

    fresh = type(_jinja_bits.AnsibleEnvironment._lexer_cache)(50)
    monkeypatch.setattr(_jinja_bits.AnsibleEnvironment, "_lexer_cache", fresh)
    built = []
    original = _jinja_bits.AnsibleLexer.__init__

    def counting(self, environment):
        built.append(environment)
        original(self, environment)

    monkeypatch.setattr(_jinja_bits.AnsibleLexer, "__init__", counting)
    key = template_cache.warm_lexer()
    assert len(built) == 1 and key in _jinja_bits.AnsibleEnvironment._lexer_cache
    assert TemplateEngine(variables={"a": 1}).template(trust_as_template("{{ a + 1 }}")) == 2
    assert len(built) == 1
