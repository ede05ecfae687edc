#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: managed_files
short_description: Check and write a set of templated or literal files in one call
version_added: "0.1.0"
description:
  - Writes every file of O(files) whose content, owner, group or mode differs, in one module call for the whole
    set. A run that finds every file as it should be reads them and changes nothing.
  - The C(gpufleet.cluster.managed_files) action plugin renders each O(files[].src) on the controller exactly as
    M(ansible.builtin.template) does (the role's C(templates/) directory and the search path, C(ansible_managed),
    C(template_host), C(template_path) and the other template variables, C(trim_blocks) on, C(lstrip_blocks) off,
    the trailing newline kept), then passes the results to the module as O(files[].content).
  - Checks every file before writing any. A destination directory that does not exist, a destination that is a
    directory, an unknown owner or group, a bad mode or a candidate that fails O(files[].validate) fails the task
    and nothing is written for any file.
  - A changed file is written to a temporary file in its destination directory, validated there, moved over the
    destination atomically, and then given its owner, group and mode. Only the files that differ are touched.
  - Check mode writes nothing and reports what would change. A file whose directory does not exist yet counts as
    changed there, with a warning, since an earlier task of the same run may create that directory.
  - Diff mode returns one diff entry per content change and per attribute change. The content of a file with
    O(files[].diff=false) never appears in the output; its entry says it is hidden.
  - Contents are not logged on the node and never come back in the results (C(invocation) shows them masked).
  - Hand-written rather than M(ansible.builtin.template) or M(ansible.builtin.copy), which cost two module calls per
    file on a run that changes nothing (a stat, then the file module for the attributes); neither ansible-core nor
    the collections of the C(ansible) package has a module that handles a set of files in one call.
options:
  files:
    description:
      - The files. An empty list changes nothing (the action plugin then calls no module at all).
      - Build the list with Jinja to leave out files that do not apply to a node.
    type: list
    elements: dict
    required: true
    suboptions:
      dest:
        description: Absolute path of the file on the node. Its directory must exist. Each path may appear once.
        type: path
        required: true
      src:
        description:
          - A template, found as M(ansible.builtin.template) finds O(ansible.builtin.template#module:src) (the
            role's C(templates/) directory, then the search path).
          - Rendered on the controller by the action plugin, which hands the result to the module as
            O(files[].content); exactly one of O(files[].src) and O(files[].content).
        type: str
      content:
        description:
          - The literal content of the file, as O(ansible.builtin.copy#module:content) takes it.
        type: str
      mode:
        description:
          - Permissions, octal (quote it, V("0644")) or symbolic. Left as they are (a new file gets the umask's)
            when not given.
        type: raw
      owner:
        description: Owner of the file. Left as it is (a new file gets the connecting user) when not given.
        type: str
      group:
        description: Group of the file. Left as it is when not given.
        type: str
      validate:
        description:
          - Command run against the candidate file before it replaces the destination; C(%s) stands for the
            candidate's path. The candidate sits in the destination directory under a name that starts with a dot,
            with the given owner, group and mode. A non-zero exit fails the task and nothing is written.
          - Not run in check mode, where nothing is written.
        type: str
      diff:
        description:
          - Show this file's content in diff mode. V(false) for files that hold secrets; the diff entry then says
            the content is hidden.
        type: bool
        default: true
attributes:
  check_mode:
    description: Writes nothing; reports every file that would change.
    support: full
  diff_mode:
    description: One entry per content change and per attribute change; none with the content of a diff-false file.
    support: full
notes:
  - No SELinux context or file attribute options; a written file takes the context its directory gives it, or keeps
    the one it had.
  - As with M(ansible.builtin.template), a symbolic link at O(files[].dest) is replaced by a regular file.
seealso:
  - module: ansible.builtin.template
  - module: ansible.builtin.copy
author:
  - gpufleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Write the fail2ban jail and filter
  gpufleet.cluster.managed_files:
    files:
      - src: jail.local.j2
        dest: /etc/fail2ban/jail.local
        owner: root
        group: root
        mode: "0644"
      - content: |
          [Definition]
          failregex = ^Invalid user .* from <HOST>
        dest: /etc/fail2ban/filter.d/gpufleet.local
        mode: "0644"
  notify: Restart fail2ban

- name: Write the sshd drop-in, checked by sshd before it is put in place
  gpufleet.cluster.managed_files:
    files:
      - src: sshd_gpufleet.conf.j2
        dest: /etc/ssh/sshd_config.d/50-gpufleet.conf
        mode: "0600"
        validate: /usr/sbin/sshd -t -f %s

- name: Write the exporter's web configuration, a password hash kept out of diffs
  gpufleet.cluster.managed_files:
    files: "{{ [web_config] if exporter_auth else [] }}"
  vars:
    web_config:
      src: web-config.yml.j2
      dest: /etc/prometheus/web-config.yml
      mode: "0640"
      diff: false
  register: web_files

- name: Restart the exporter when its web configuration changed
  ansible.builtin.debug:
    msg: "{{ web_files.changed_files }}"
  when: "'/etc/prometheus/web-config.yml' in web_files.changed_files | default([])"
"""

RETURN = r"""
files:
  description: One entry per file, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    dest:
      description: The destination path.
      type: str
      sample: /etc/fail2ban/jail.local
    changed:
      description: Whether its content or attributes were (in check mode, would be) changed.
      type: bool
      sample: false
    checksum:
      description: sha1 of the wanted content.
      type: str
      sample: 2aae6c35c94fcfb415dbe95f408b9ce91ee846ed
changed_files:
  description: The destinations that were (in check mode, would be) changed, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/etc/fail2ban/jail.local]
diff:
  description:
    - Diff mode only. One entry per content change and per attribute change (C(before) and C(after) are then
      dictionaries of the changed owner, group and mode).
  returned: when diff mode is on
  type: list
  elements: dict
  sample: [{"before": "", "after": "[sshd]\nenabled = true\n", "before_header": "/etc/fail2ban/jail.local",
            "after_header": "/etc/fail2ban/jail.local"}]
"""

import grp
import os
import pwd
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.managed_files import (
    content_diff,
    inspect,
    item_problems,
)

HIDDEN = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def argument_spec():
    return dict(
        files=dict(type="list", elements="dict", required=True, options=dict(
            dest=dict(type="path", required=True),
            src=dict(type="str"),
            content=dict(type="str", no_log=True),
            mode=dict(type="raw"),
            owner=dict(type="str"),
            group=dict(type="str"),
            validate=dict(type="str"),
            diff=dict(type="bool", default=True),
        )),
    )


class Run(object):
    """One call: the module, the files and the temporary files this call made (removed on every exit)."""

    def __init__(self, module):
        self.module = module
        self.files = module.params["files"]
        self.temps = {}
        # The results mask every content, whatever the exit: contents may be secrets.
        self.invocation = dict(module_args=dict(files=[dict(item, content=HIDDEN if item.get("content") is not None
                                                            else None) for item in self.files]))

    def cleanup(self):
        for path in self.temps.values():
            try:
                os.unlink(path)
            except OSError:
                pass
        self.temps = {}

    def fail(self, msg, **extra):
        self.cleanup()
        self.module.fail_json(msg=msg, invocation=self.invocation, **extra)

    def exit(self, **result):
        # Contents shown in diff mode come off the masking list here, at the successful end alone, or the diffs
        # would come back masked; every failure (ours or one raised inside AnsibleModule's own methods) still masks
        # all contents. Contents of files with diff false stay on it, masked wherever they would appear.
        hidden = set(item["content"] for item in self.files if not item["diff"] and item.get("content"))
        shown = set(item["content"] for item in self.files if item["diff"] and item.get("content"))
        self.module.no_log_values.difference_update(shown - hidden)
        self.module.exit_json(invocation=self.invocation, **result)


def attribute_problems(item):
    problems = []
    owner, group = item.get("owner"), item.get("group")
    if owner is not None and not str(owner).isdigit():
        try:
            pwd.getpwnam(owner)
        except KeyError:
            problems.append("%s: no such user %s" % (item["dest"], owner))
    if group is not None and not str(group).isdigit():
        try:
            grp.getgrnam(group)
        except KeyError:
            problems.append("%s: no such group %s" % (item["dest"], group))
    return problems


def main():
    # no_log=True keeps the "Invoked with" line, which would carry the contents, out of the node's journal.
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True, no_log=True)
    run = Run(module)
    files = run.files

    problems = item_problems([dict((k, v) for k, v in item.items() if v is not None) for item in files],
                             rendered=True)
    if problems:
        run.fail("nothing was written: %s" % "; ".join(problems), problems=problems)

    # 1. Plan: read every destination and check what a write needs, before anything is written.
    plans = []
    for item in files:
        data = item["content"].encode("utf-8", "surrogateescape")
        try:
            state = inspect(item["dest"], data)
        except (IOError, OSError) as exc:
            problems.append("cannot read %s: %s" % (item["dest"], exc))
            continue
        if state["is_dir"]:
            problems.append("%s is a directory" % item["dest"])
        if state["dir_missing"] and not module.check_mode:
            problems.append("the directory of %s, %s, does not exist" % (item["dest"], os.path.dirname(item["dest"])))
        problems.extend(attribute_problems(item))
        plans.append((item, data, state))
    if problems:
        run.fail("nothing was written: %s" % "; ".join(problems), problems=problems)

    # 2. Candidates: every changed file is written next to its destination and validated, before any is moved.
    if not module.check_mode:
        failed = []
        for item, data, state in plans:
            if not state["content_changed"]:
                continue
            directory, name = os.path.split(item["dest"])
            try:
                handle, path = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=directory)
                run.temps[item["dest"]] = path
                module.add_cleanup_file(path)  # also gone when a method below ends the module with fail_json
                with os.fdopen(handle, "wb") as out:
                    out.write(data)
            except (IOError, OSError) as exc:
                run.fail("cannot write a candidate for %s in %s: %s; nothing was written" % (item["dest"], directory, exc))
            # Validation may depend on them (sshd refuses a group-writable file); copy and template set them too.
            module.set_mode_if_different(path, item["mode"], False)
            module.set_owner_if_different(path, item["owner"], False)
            module.set_group_if_different(path, item["group"], False)
            if item["validate"]:
                rc, out, err = module.run_command(item["validate"] % path,
                                                  environ_update=dict(LANGUAGE="C", LC_ALL="C"))
                if rc != 0:
                    failed.append(dict(dest=item["dest"], command=item["validate"] % path, rc=rc, stdout=out,
                                       stderr=err))
        if failed:
            run.fail("validation failed for %s; nothing was written" % ", ".join(f["dest"] for f in failed),
                     validation=failed)

    # 3. Write: move the candidates into place, then set owner, group and mode where they differ.
    results, changed_files, diffs = [], [], []
    for item, data, state in plans:
        dest = item["dest"]
        changed = state["content_changed"]
        if changed and module._diff:
            diffs.append(content_diff(dest, state, data, show=item["diff"]))
        if changed and not module.check_mode:
            try:
                module.atomic_move(run.temps[dest], dest)
            except Exception as exc:  # atomic_move raises plain Exception; say what is already in place
                run.fail("could not move the new %s into place: %s (already written: %s)"
                         % (dest, exc, ", ".join(changed_files) or "none"), changed=bool(changed_files),
                         changed_files=changed_files)
            del run.temps[dest]
        # A file that does not exist yet (check mode) has no attributes to compare; a file created just now gets
        # them set, but its diff is the content alone.
        if not module.check_mode or (state["exists"] and not state["is_link"]):
            attr_diff = {}
            args = module.load_file_common_arguments(dict(path=dest, mode=item["mode"], owner=item["owner"],
                                                          group=item["group"]))
            if module.set_fs_attributes_if_different(args, False, attr_diff):
                changed = True
                if module._diff and state["exists"] and not state["is_link"]:
                    attr_diff.update(before_header="%s (owner, group, mode)" % dest,
                                     after_header="%s (owner, group, mode)" % dest)
                    diffs.append(attr_diff)
        if state["dir_missing"]:
            module.warn("the directory of %s, %s, does not exist: a real run fails unless an earlier task creates it"
                        % (dest, os.path.dirname(dest)))
        results.append(dict(dest=dest, changed=changed, checksum=state["checksum"]))
        if changed:
            changed_files.append(dest)

    result = dict(changed=bool(changed_files), files=results, changed_files=changed_files)
    if module._diff:
        result["diff"] = diffs
    run.exit(**result)


if __name__ == "__main__":
    main()
