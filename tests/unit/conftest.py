"""Make `ansible_collections.gpufleet.cluster` importable from this checkout."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def yaml_strings(value, key=None):
    """(key, string) for every string in a loaded YAML tree; an item of a list has its list's key."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for inner_key, inner in value.items():
            yield from yaml_strings(inner, inner_key)
    elif isinstance(value, list):
        for inner in value:
            yield from yaml_strings(inner, key)


def fixture_parts(subdir, name):
    """(header lines, body) of tests/fixtures/<subdir>/<name>: '# ' lines naming the source, a '---' line, then the
    output exactly as it was captured or published. A fixture without that header fails the test that reads it."""
    with open(os.path.join(FIXTURES, subdir, name)) as handle:
        text = handle.read()
    header, sep, body = text.partition("\n---\n")
    assert sep, "%s has no source header" % name
    lines = header.splitlines()
    assert all(line.startswith("# ") for line in lines), name
    assert lines and lines[0].startswith("# source: "), "%s does not name its source" % name
    return lines, body


def render_role_template(role, name, variables, filters=None):
    """roles/<role>/templates/<name> rendered as the template module does it (trim_blocks, Ansible's `comment`
    filter, plus the filters given), with an undefined variable an error rather than an empty string."""
    import jinja2
    from ansible.plugins.filter.core import comment

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROOT, "roles", role, "templates")),
                             trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["comment"] = comment
    env.filters.update(filters or {})
    return env.get_template(name).render(**variables)
