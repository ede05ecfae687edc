#!/usr/bin/env python3
"""Write the role documentation made from roles/<role>/meta/argument_specs.yml, the one place a role variable is
described (type, choices, description).

    python scripts/role_docs.py           rewrite what is out of date (make docs)
    python scripts/role_docs.py --check   write nothing; exit 1 and name every file that is out of date

Three outputs, in this order:

- roles/<role>/README.md: the variables table(s) between the BEGIN/END markers below, one table per entry point
  (main first, or the one entry point of a role without tasks such as gpufleet_defaults; in the order of
  defaults/main.yml). Everything outside the markers is hand-written and stays.
- roles/<role>/defaults/main.yml: the comment right above each variable is its description (sub-options indented
  below it). Values, blank lines and '# --- ...' section headings are hand-written and stay.
- inventories/prod/group_vars/all/<role>.yml, for the roles that have one: defaults/main.yml with every setting
  commented out, so uncommenting a line gives exactly the default.

The value a role runs with is the one in defaults/main.yml (Ansible never applies an argument spec's `default`);
tests/unit/test_role_docs.py makes the spec's `default` equal it, so the tables tell the truth.

Hand-written rather than a kept tool: ansible-docsmith renders argument specs too, but in its own layout (a section
per variable in the README, a Type/Required/Default block above every default) and knows nothing of the
inventories/prod samples; this needs PyYAML alone, which the venv already has, and reads all YAML with it (node marks
locate a variable's text in defaults/main.yml). Only the Markdown and the comments are composed here.
"""
import argparse
import json
import os
import re
import sys
import textwrap

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = ("<!-- BEGIN generated from meta/argument_specs.yml by scripts/role_docs.py "
         "(edit the spec, then run make docs) -->")
END = "<!-- END generated from meta/argument_specs.yml -->"
# A default longer than this goes below the table as YAML instead of into its cell.
CELL_MAX = 80
COMMENT_WIDTH = 118
MARKUP = re.compile(r"\b([CIBVOEPU])\(([^()]*)\)")
OPTION_KEYS = {"type", "elements", "default", "choices", "required", "no_log", "description", "options"}


class SpecError(Exception):
    pass


def load_yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def argument_specs(root, role):
    data = load_yaml(os.path.join(root, "roles", role, "meta", "argument_specs.yml")) or {}
    specs = data.get("argument_specs") or {}
    main_entry(role, specs)
    for entry, spec in specs.items():
        for name, option in walk(spec.get("options") or {}):
            unknown = set(option) - OPTION_KEYS
            if unknown:
                raise SpecError("roles/%s/meta/argument_specs.yml: %s (%s) has keys this script does not render: %s"
                                % (role, name, entry, ", ".join(sorted(unknown))))
    return specs


def main_entry(role, specs):
    """The entry point the tables start with: main, or the one entry point of a role without tasks (gpufleet_defaults
    documents its settings under `settings`, so that no play gets an argument check task for it)."""
    if "main" in specs:
        return "main"
    if len(specs) == 1:
        return next(iter(specs))
    raise SpecError("roles/%s/meta/argument_specs.yml has no entry point main" % role)


def walk(options, prefix=""):
    """(dotted name, option) of every option and sub-option, in spec order."""
    for name, option in options.items():
        yield prefix + name, option
        if option.get("options"):
            yield from walk(option["options"], prefix + name + ".")


def paragraphs(description):
    if description is None:
        return []
    if isinstance(description, str):
        description = [description]
    return [" ".join(str(part).split()) for part in description]


# --- Markdown -------------------------------------------------------------------------------------------------

def md_escape(text):
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\*|\[\]])", r"\\\1", text)


def md_code(text):
    """A code span that survives a table cell: the fence is longer than any backtick run in it, | is escaped."""
    text = text.replace("\n", " ")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return fence + pad + text.replace("|", "\\|") + pad + fence


def md_text(text, names):
    """Description text: Ansible markup (C(), I(), B(), ...) and known variable names become Markdown."""
    out = []
    pos = 0
    names_pattern = (r"\b(%s)\b" % "|".join(sorted(names, key=len, reverse=True))) if names else r"(?!x)x"
    pattern = re.compile(MARKUP.pattern + "|" + names_pattern)
    for match in pattern.finditer(text):
        out.append(md_escape(text[pos:match.start()]))
        kind, inner, name = match.group(1), match.group(2), match.group(3)
        if name:
            out.append(md_code(name))
        elif kind in "CVOEP":
            out.append(md_code(inner))
        elif kind == "I":
            out.append("*%s*" % md_escape(inner))
        elif kind == "B":
            out.append("**%s**" % md_escape(inner))
        else:
            out.append(md_escape(inner))
        pos = match.end()
    out.append(md_escape(text[pos:]))
    return "".join(out)


def plain_markup(text):
    """Description text for a YAML comment: C(x) becomes `x`, the other markup its plain text."""
    return MARKUP.sub(lambda m: "`%s`" % m.group(2) if m.group(1) in "CVOEP" else m.group(2), text)


def flow(value, inner=False):
    """A value as one line of YAML flow style, strings unquoted where YAML reads them back unchanged."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(flow(item, True) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s: %s" % (flow(key, True), flow(item, True)) for key, item in value.items()) + "}"
    text = str(value)
    try:
        plain = yaml.safe_load("[%s]" % text if inner else text) == ([text] if inner else text)
    except yaml.YAMLError:
        plain = False
    if plain and text and text == text.strip() and "\n" not in text and not (inner and re.search(r"[,{}\[\]]", text)):
        return text
    return json.dumps(text, ensure_ascii=False)


def type_of(option):
    kind = option.get("type", "str")
    if option.get("elements"):
        kind += " of " + option["elements"]
    return kind


def constraints(option):
    parts = []
    if option.get("required"):
        parts.append("**required**")
    if "choices" in option:
        parts.append(", ".join(md_code(flow(choice)) for choice in option["choices"]))
    if option.get("no_log"):
        parts.append("secret (`no_log`)")
    return "; ".join(parts)


def default_text(root, role, name):
    """The key's own text in defaults/main.yml (key line to the end of its value), or None."""
    path = os.path.join(root, "roles", role, "defaults", "main.yml")
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        text = handle.read()
    return defaults_texts(text).get(name)


def defaults_texts(text):
    """{name: lines of its key and value} of a defaults file, located with PyYAML's node marks."""
    node = yaml.compose(text)
    if node is None:
        return {}
    lines = text.splitlines()
    out = {}
    for key, value in node.value:
        last = value.end_mark.line if value.end_mark.column > 0 else value.end_mark.line - 1
        chunk = lines[key.start_mark.line:last + 1]
        while chunk and (not chunk[-1].strip() or chunk[-1].startswith("#")):
            chunk.pop()
        out[key.value] = chunk
    return out


def in_defaults_order(root, role, options):
    """The options in the order of defaults/main.yml (its grouping), the ones it does not set after them."""
    path = os.path.join(root, "roles", role, "defaults", "main.yml")
    order = []
    if os.path.exists(path):
        with open(path) as handle:
            order = list(defaults_texts(handle.read()))
    first = [name for name in order if name in options]
    return {name: options[name] for name in first + [name for name in options if name not in first]}


def table(root, role, options, names, longs):
    options = in_defaults_order(root, role, options)
    rows = ["| Variable | Type | Default | Choices / required | Description |",
            "|---|---|---|---|---|"]
    for name, option in walk(options):
        if "default" in option:
            cell = flow(option["default"])
            if len(cell) > CELL_MAX or "\n" in str(option["default"]):
                longs.append((name, option))
                cell = "see below"
            else:
                cell = md_code(cell)
        elif option.get("required"):
            cell = ""
        else:
            cell = "unset"
        description = "<br>".join(md_text(part, names) for part in paragraphs(option.get("description")))
        rows.append("| %s | %s | %s | %s | %s |" % (md_code(name), type_of(option), cell, constraints(option),
                                                    description))
    return rows


def long_defaults(root, role, longs):
    """YAML blocks for the defaults too long for a table cell: the text of defaults/main.yml for a role variable
    (the test makes its value the spec's), the spec's value dumped for a sub-option."""
    out = []
    for name, option in longs:
        text = default_text(root, role, name) if "." not in name else None
        if text is None:
            text = yaml.safe_dump({name: option["default"]}, default_flow_style=False, sort_keys=False,
                                  width=110, allow_unicode=True).rstrip("\n").splitlines()
        out += ["", "Default of %s:" % md_code(name), "", "```yaml"] + text + ["```"]
    return out


def readme_block(root, role):
    specs = argument_specs(root, role)
    names = set()
    for spec in specs.values():
        names.update(name for name, _unused in walk(spec.get("options") or {}) if "." not in name)
    first = main_entry(role, specs)
    main = specs[first]
    others = [entry for entry in sorted(specs) if entry != first]
    lines = [BEGIN, ""]
    intro = "Entry point `%s`: %s." % (first, md_text(main.get("short_description", "").rstrip("."), set()))
    if others:
        intro += " Other entry points: %s (below)." % ", ".join(md_code(entry) for entry in others)
    lines.append(intro)
    lines.append("")
    main_options = main.get("options") or {}
    if main_options:
        longs = []
        lines += table(root, role, main_options, names, longs)
        lines += long_defaults(root, role, longs)
    else:
        lines.append("It takes no variables.")
    for entry in others:
        spec = specs[entry]
        options = spec.get("options") or {}
        same = [name for name, option in options.items() if main_options.get(name) == option]
        own = {name: option for name, option in options.items() if name not in same}
        lines += ["", "### Entry point `%s`" % entry, ""]
        text = "%s. Run it with `tasks_from: %s`." % (md_text(spec.get("short_description", "").rstrip("."), set()),
                                                      entry)
        lines.append(text)
        for part in paragraphs(spec.get("description")):
            lines += ["", md_text(part, names)]
        if same:
            lines += ["", "It also reads, as described above: %s." % ", ".join(md_code(name) for name in same)]
        if own:
            longs = []
            lines += [""] + table(root, role, own, names, longs)
            lines += long_defaults(root, role, longs)
    lines += ["", END]
    return "\n".join(lines)


def readme(root, role, current):
    """The README with its generated block renewed; SpecError when the markers are missing or doubled."""
    begin = [i for i, line in enumerate(current.splitlines()) if line.startswith("<!-- BEGIN generated from")]
    end = [i for i, line in enumerate(current.splitlines()) if line.startswith("<!-- END generated from")]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        raise SpecError("roles/%s/README.md needs exactly one pair of lines starting '<!-- BEGIN generated from' "
                        "and '<!-- END generated from', in that order, where the variables table goes" % role)
    lines = current.splitlines()
    out = lines[:begin[0]] + readme_block(root, role).splitlines() + lines[end[0] + 1:]
    return "\n".join(out) + "\n"


# --- defaults/main.yml comments and inventories/prod samples --------------------------------------------------

SECTION = re.compile(r"^# ---")


def comment(text, indent=""):
    return textwrap.wrap(text, width=COMMENT_WIDTH, initial_indent="# " + indent,
                         subsequent_indent="# " + indent + ("  " if indent else ""),
                         break_long_words=False, break_on_hyphens=False)


def option_comment(option):
    """The comment lines above a variable in defaults/main.yml: its description, then its sub-options."""
    lines = []
    for part in paragraphs(option.get("description")):
        lines += comment(plain_markup(part))
    for name, sub in walk(option.get("options") or {}):
        text = "%s (%s%s): %s" % (name, type_of(sub), ", required" if sub.get("required") else "",
                                  " ".join(plain_markup(part) for part in paragraphs(sub.get("description"))))
        lines += comment(text, "  ")
    for line in lines:
        if SECTION.match(line):
            raise SpecError("a description may not start a comment line with '---' (that marks a section)")
    return lines


def all_options(role, specs):
    options = {}
    first = main_entry(role, specs)
    for entry in [first] + sorted(set(specs) - {first}):
        for name, option in (specs[entry].get("options") or {}).items():
            options.setdefault(name, option)
    return options


def defaults_file(root, role, current):
    """defaults/main.yml with the comment block right above each variable made from its description. A comment
    line starting with '# ---' there is a section heading and stays; values, blank lines and the rest stay."""
    options = all_options(role, argument_specs(root, role))
    node = yaml.compose(current)
    lines = current.splitlines()
    for key, _unused in reversed(node.value if node is not None else []):
        name = key.value
        if name not in options:
            raise SpecError("roles/%s/defaults/main.yml sets %s, which meta/argument_specs.yml does not describe"
                            % (role, name))
        first = key.start_mark.line
        while first > 0 and lines[first - 1].startswith("#"):
            first -= 1
        sections = [line for line in lines[first:key.start_mark.line] if SECTION.match(line)]
        lines[first:key.start_mark.line] = sections + option_comment(options[name])
    return "\n".join(lines) + "\n"


def prod_sample(role, defaults_text):
    """inventories/prod/group_vars/all/<role>.yml: defaults/main.yml with every setting commented out."""
    lines = defaults_text.splitlines()
    if lines and lines[0] == "---":
        lines = lines[1:]
    out = ["---",
           "# %s: every setting of the role, at its default (roles/%s/defaults/main.yml)." % (role, role),
           "# Uncomment a line to change it for the whole fleet; roles/%s/README.md says what each one does." % role]
    out += [line if not line.strip() or line.startswith("#") else "# " + line for line in lines]
    return "\n".join(out) + "\n"


# --- main -----------------------------------------------------------------------------------------------------

def roles(root):
    return sorted(name for name in os.listdir(os.path.join(root, "roles"))
                  if os.path.exists(os.path.join(root, "roles", name, "meta", "argument_specs.yml")))


def outputs(root):
    """(path, wanted text) of every generated file."""
    samples = os.path.join(root, "inventories", "prod", "group_vars", "all")
    for role in roles(root):
        path = os.path.join(root, "roles", role, "README.md")
        with open(path) as handle:
            yield path, readme(root, role, handle.read())
        path = os.path.join(root, "roles", role, "defaults", "main.yml")
        with open(path) as handle:
            defaults = defaults_file(root, role, handle.read())
        yield path, defaults
        sample = os.path.join(samples, role + ".yml")
        if os.path.exists(sample):
            yield sample, prod_sample(role, defaults)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is out of date")
    parser.add_argument("--root", default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    stale = []
    try:
        for path, wanted in outputs(args.root):
            with open(path) as handle:
                current = handle.read()
            if current != wanted:
                stale.append(os.path.relpath(path, args.root))
                if not args.check:
                    with open(path, "w") as handle:
                        handle.write(wanted)
    except SpecError as error:
        print("role_docs: %s" % error, file=sys.stderr)
        return 2
    if stale:
        if args.check:
            print("out of date (run make docs, or python scripts/role_docs.py): " + ", ".join(stale))
            return 1
        print("rewrote: " + ", ".join(stale))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
