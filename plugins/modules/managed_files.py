#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: managed_files
short_description: Check and write a set of files and directories, and remove paths, in one call
version_added: "0.1.0"
description:
  - Writes every file of O(files) whose content, owner, group or mode differs, creates or fixes every directory and
    removes every path that is to be absent, in one module call for the whole set. A run that finds everything as
    it should be reads it and changes nothing.
  - The C(gpufleet.cluster.managed_files) action plugin renders each O(files[].src) on the controller exactly as
    M(ansible.builtin.template) does (the role's C(templates/) directory and the search path, C(ansible_managed),
    C(template_host), C(template_path) and the other template variables, C(trim_blocks) on, C(lstrip_blocks) off,
    the trailing newline kept), then passes the results to the module as O(files[].content). It reads each
    O(files[].copy) on the controller as M(ansible.builtin.copy) reads its O(ansible.builtin.copy#module:src)
    (vault-encrypted files decrypted) and passes the bytes verbatim, whatever their encoding and without templating.
  - Checks every item before changing any. A parent directory that neither exists nor is an earlier directory item
    of the same call, a file destination that is a directory, a directory destination that is something else, an
    unknown owner or group, a bad mode or a candidate that fails O(files[].validate) fails the task and nothing is
    changed for any item (directories this call made for the candidates are removed again).
  - A changed file is written to a temporary file in its destination directory, validated there, moved over the
    destination atomically, and then given its owner, group and mode. Only the files that differ are touched.
  - Refuses, before any change, every item whose path another account could replace. That is a directory on the
    way owned by an account other than root and the one the module runs as, a directory on the way that its group
    or others may write (sticky ones excepted), a symbolic link on the way that such an account owns, or a link at a
    directory item's O(files[].dest) that root does not own. Root therefore never writes, chowns, chmods or removes
    through a user's files; write in a user's home as that user (C(become_user)), where the kernel bounds what a
    link can reach.
  - Items are applied in the order given. Directory items count as there for the items after them, in check mode
    too, so a directory and the files in it go into one call.
  - Check mode changes nothing and reports what would change. A file or directory whose parent neither exists nor
    is an earlier directory item counts as changed there, with a warning, since an earlier task of the same run may
    create that directory.
  - Diff mode returns one diff entry per content change, per attribute change, per directory created and per path
    removed. The content of a file with O(files[].diff=false) never appears in the output; its entry says it is
    hidden.
  - Contents are not logged on the node and never come back in the results (C(invocation) shows them masked).
  - A task that runs on the controller itself (connection C(local), no become, as with C(delegate_to=localhost) and
    C(become=false)) is read by the action plugin first, in its own process. When every item is already as asked,
    it returns the same per-item results without starting the module, with C(msg) saying so. Whatever would change
    and whatever it cannot judge for certain (a link, a symbolic mode, an unknown owner) goes to the module.
  - Hand-written rather than M(ansible.builtin.template) or M(ansible.builtin.copy), which cost two module calls per
    file on a run that changes nothing (a stat, then the file module for the attributes), and
    M(ansible.builtin.file), one per directory or removed path; neither ansible-core nor the collections of the
    C(ansible) package has a module that handles a set of files in one call.
options:
  files:
    description:
      - The files, directories and paths to remove, applied in this order. An empty list changes nothing (the
        action plugin then calls no module at all).
      - Build the list with Jinja to leave out items that do not apply to a node.
    type: list
    elements: dict
    required: true
    suboptions:
      dest:
        description:
          - Absolute path on the node. Its directory must exist or be an earlier directory item of the same call.
          - Each path may appear once, and none may lie inside a path the same call removes.
        type: path
        required: true
      state:
        description:
          - V(file) writes a file from exactly one of O(files[].src), O(files[].content) and O(files[].copy).
          - V(directory) creates the directory (not its parents) or, when it exists, gives it the O(files[].owner),
            O(files[].group) and O(files[].mode) given; a symbolic link to a directory counts as one, as for
            M(ansible.builtin.file). It takes no content and no O(files[].validate).
          - V(absent) removes a file, a symbolic link (not what it points to) or a directory tree, as
            M(ansible.builtin.file) does with O(ansible.builtin.file#module:state=absent); changed only when
            something was there. It takes no content, attributes or O(files[].validate).
        type: str
        choices: [file, directory, absent]
        default: file
      src:
        description:
          - A template, found as M(ansible.builtin.template) finds O(ansible.builtin.template#module:src) (the
            role's C(templates/) directory, then the search path).
          - Rendered on the controller by the action plugin, which hands the result to the module as
            O(files[].content); exactly one of O(files[].src), O(files[].content) and O(files[].copy).
        type: str
      content:
        description:
          - The literal content of the file, as O(ansible.builtin.copy#module:content) takes it.
        type: str
      copy:
        description:
          - A file copied verbatim, found as M(ansible.builtin.copy) finds O(ansible.builtin.copy#module:src) (the
            role's C(files/) directory, then the search path, or an absolute path on the controller); never
            templated, so C({{ }}) in it stays as it is. A single file, not a directory.
          - Read on the controller by the action plugin, which hands its bytes to the module base64-encoded (binary
            files too).
        type: str
      content_base64:
        description:
          - The bytes of a O(files[].copy) file, base64-encoded, as the action plugin hands them to the module. Not
            given in a task, where the action plugin refuses it; give O(files[].copy) or O(files[].content).
        type: str
      mode:
        description:
          - Permissions, octal (quote it, V("0644")) or symbolic. Left as they are (a new file or directory gets the
            umask's) when not given.
        type: raw
      owner:
        description:
          - Owner of the file or directory. Left as it is (a new one gets the connecting user) when not given.
        type: str
      group:
        description: Group of the file or directory. Left as it is when not given.
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
    description: Changes nothing and reports what would change, with the diff.
    support: full
  diff_mode:
    description: One entry per content change, attribute change, directory created and path removed.
    support: full
notes:
  - No SELinux context or file attribute options; a written file takes the context its directory gives it, or keeps
    the one it had.
  - As with M(ansible.builtin.template), a symbolic link at O(files[].dest) is replaced by a regular file.
  - Unlike M(ansible.builtin.file), a directory item does not create missing parents; list them as earlier
    directory items, which keeps check mode and the all-or-nothing checks exact.
seealso:
  - module: ansible.builtin.template
  - module: ansible.builtin.copy
  - module: ansible.builtin.file
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

- name: Create the rules directory and install the alert rules verbatim, each checked by promtool
  gpufleet.cluster.managed_files:
    files:
      - dest: /etc/prometheus/rules
        state: directory
        owner: root
        group: root
        mode: "0755"
      - copy: prometheus/gpufleet-alerts.yml
        dest: /etc/prometheus/rules/gpufleet-alerts.yml
        mode: "0644"
        validate: promtool check rules %s
      - dest: /etc/prometheus/rules/old-alerts.yml
        state: absent
  notify: Reload Prometheus

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
    state:
      description: The item's state, V(file), V(directory) or V(absent).
      type: str
      sample: file
    changed:
      description:
        - Whether its content or attributes were (in check mode, would be) changed, the directory created or the
          path removed.
      type: bool
      sample: false
    checksum:
      description: sha1 of the wanted content.
      returned: for files
      type: str
      sample: 2aae6c35c94fcfb415dbe95f408b9ce91ee846ed
changed_files:
  description: The paths that were (in check mode, would be) changed, created or removed, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/etc/fail2ban/jail.local]
msg:
  description: Says that the action plugin found every item as asked on the controller and ran no module.
  returned: when the task runs on the controller itself and nothing differs
  type: str
  sample: every item is as asked (read on the controller; no module run)
diff:
  description:
    - Diff mode only. One entry per content change and per attribute change (C(before) and C(after) are then
      dictionaries of the changed owner, group and mode); a directory created or a path removed gives C(before)
      and C(after) as M(ansible.builtin.file) does (C(path) and C(state)).
  returned: when diff mode is on
  type: list
  elements: dict
  sample: [{"before": "", "after": "[sshd]\nenabled = true\n", "before_header": "/etc/fail2ban/jail.local",
            "after_header": "/etc/fail2ban/jail.local"}]
"""

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.managed_files import (
    STATES,
    content_diff,
    dir_missing,
    group_id,
    inspect,
    item_problems,
    owner_id,
    path_kind,
    state_diff,
    wanted_bytes,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.trusted_path import untrusted_step

HIDDEN = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


class Module(AnsibleModule):
    """AnsibleModule whose "Invoked with" line in the node's log names each item's destination and state, never a
    content. AnsibleModule(no_log=True) does not keep that line out (the task's own no_log, off unless the task sets
    it, takes its place), and the masking of the no_log suboptions misses there a content that spans lines: the line
    shows the list as Python writes it, with its newlines escaped."""

    def log(self, msg, log_args=None):
        if log_args is not None and "files" in log_args:
            items = ", ".join("%s (%s)" % (item.get("dest"), item.get("state")) for item in self.params.get("files") or [])
            msg, log_args = "Invoked with files: %s" % items, dict(files=items)
        super(Module, self).log(msg, log_args=log_args)


def argument_spec():
    return dict(
        files=dict(type="list", elements="dict", required=True, options=dict(
            dest=dict(type="path", required=True),
            state=dict(type="str", choices=list(STATES), default="file"),
            src=dict(type="str"),
            content=dict(type="str", no_log=True),
            copy=dict(type="str"),
            content_base64=dict(type="str", no_log=True),
            mode=dict(type="raw"),
            owner=dict(type="str"),
            group=dict(type="str"),
            validate=dict(type="str"),
            diff=dict(type="bool", default=True),
        )),
    )


class Run(object):
    """One call: the module, the items, and the temporary files and directories this call made before the first
    move (removed again on every failure, so that a failed check leaves the node as it was)."""

    def __init__(self, module):
        self.module = module
        self.files = module.params["files"]
        self.temps = {}
        self.created = []
        # The results mask every content, whatever the exit: contents may be secrets.
        self.invocation = dict(module_args=dict(files=[
            dict(item, content=HIDDEN if item.get("content") is not None else None,
                 content_base64=HIDDEN if item.get("content_base64") is not None else None)
            for item in self.files]))

    def cleanup(self):
        for path in self.temps.values():
            try:
                os.unlink(path)
            except OSError:
                pass
        self.temps = {}
        for path in reversed(self.created):
            try:
                os.rmdir(path)
            except OSError:
                pass
        self.created = []

    def fail(self, msg, **extra):
        self.cleanup()
        self.module.fail_json(msg=msg, invocation=self.invocation, **extra)

    def exit(self, **result):
        # Contents shown in diff mode come off the masking list here, at the successful end alone, or the diffs
        # would come back masked; every failure (ours or one raised inside AnsibleModule's helpers) still masks
        # all contents. Contents of files with diff false stay on it, masked wherever they would appear.
        hidden = set(item["content"] for item in self.files if not item["diff"] and item.get("content"))
        shown = set(item["content"] for item in self.files if item["diff"] and item.get("content"))
        self.module.no_log_values.difference_update(shown - hidden)
        self.module.exit_json(invocation=self.invocation, **result)


def attribute_problems(item):
    problems = []
    owner, group = item.get("owner"), item.get("group")
    if owner is not None and owner_id(owner) is None:
        problems.append("%s: no such user %s" % (item["dest"], owner))
    if group is not None and group_id(group) is None:
        problems.append("%s: no such group %s" % (item["dest"], group))
    return problems


def plan(module, files):
    """Read every path and check what each item needs, changing nothing: (plans, problems). An item counts its
    earlier directory items as there, in check mode too."""
    plans, problems, planned = [], [], set()
    for item in files:
        dest = item["dest"] = os.path.normpath(item["dest"]) if item["state"] != "file" else item["dest"]
        parent = os.path.dirname(os.path.normpath(dest))
        # Before anything is read: a step another account controls could make the reads and writes below land
        # anywhere (a directory item's link is followed, as the file module follows it).
        untrusted = untrusted_step(dest, follow_last=item["state"] == "directory")
        if untrusted:
            problems.append(untrusted)
            continue
        try:
            if item["state"] == "file":
                data = wanted_bytes(item)
                state = inspect(dest, data, planned)
                if state["is_dir"]:
                    problems.append("%s is a directory" % dest)
            else:
                data, state = None, dict(kind=path_kind(dest), dir_missing=dir_missing(dest, planned))
                if item["state"] == "directory":
                    state["dir_missing"] = state["dir_missing"] and state["kind"] == "absent"
                    state["is_dir"] = os.path.isdir(dest)  # a link to a directory is one, as for the file module
                    if state["kind"] != "absent" and not state["is_dir"]:
                        problems.append("%s exists and is not a directory" % dest)
                    planned.add(os.path.normpath(dest))
                else:
                    state["dir_missing"] = False  # nothing there, nothing to remove
        except (IOError, OSError, TypeError, ValueError) as exc:
            problems.append("cannot read %s: %s" % (dest, exc))
            continue
        if state["dir_missing"] and not module.check_mode:
            problems.append("the directory of %s, %s, does not exist (nor is it an earlier directory item)"
                            % (dest, parent))
        problems.extend(attribute_problems(item))
        plans.append((item, data, state))
    return plans, problems


def set_attributes(module, item, diff, follow=False):
    """owner, group and mode where they differ (in check mode: whether they do); diff gets the changed ones."""
    args = module.load_file_common_arguments(dict(path=item["dest"], mode=item["mode"], owner=item["owner"],
                                                  group=item["group"], follow=follow))
    return module.set_fs_attributes_if_different(args, False, diff)


def attr_entry(dest, attr_diff):
    attr_diff.update(before_header="%s (owner, group, mode)" % dest, after_header="%s (owner, group, mode)" % dest)
    return attr_diff


def make_directories(module, run, plans):
    """Create the missing directories (in order: a parent is there or an earlier item) with their attributes, so
    that the candidates of the files inside can be written and validated there. Removed again if a check fails."""
    for item, dummy, state in plans:
        if item["state"] != "directory" or state["kind"] != "absent":
            continue
        try:
            os.mkdir(item["dest"])
        except OSError as exc:
            run.fail("cannot create the directory %s: %s; nothing was written" % (item["dest"], exc))
        run.created.append(item["dest"])
        set_attributes(module, item, None)


def write_candidates(module, run, plans):
    """Every changed file written next to its destination and validated, before any is moved."""
    failed = []
    for item, data, state in plans:
        if item["state"] != "file" or not state["content_changed"]:
            continue
        directory, name = os.path.split(item["dest"])
        try:
            handle, path = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=directory)
            run.temps[item["dest"]] = path
            module.add_cleanup_file(path)  # also gone when a helper below ends the module with fail_json
            with os.fdopen(handle, "wb") as out:
                out.write(data)
        except (IOError, OSError) as exc:
            run.fail("cannot write a candidate for %s in %s: %s; nothing was written" % (item["dest"], directory, exc))
        # Validation may depend on them (sshd refuses a group-writable file); copy and template set them too.
        module.set_mode_if_different(path, item["mode"], False)
        module.set_owner_if_different(path, item["owner"], False)
        module.set_group_if_different(path, item["group"], False)
        if item["validate"]:
            rc, out, err = module.run_command(item["validate"] % path, environ_update=dict(LANGUAGE="C", LC_ALL="C"))
            if rc != 0:
                failed.append(dict(dest=item["dest"], command=item["validate"] % path, rc=rc, stdout=out, stderr=err))
    if failed:
        run.fail("validation failed for %s; nothing was written" % ", ".join(f["dest"] for f in failed),
                 validation=failed)


def remove(path, kind):
    if kind == "directory":
        shutil.rmtree(path)
    else:
        os.unlink(path)


def main():
    # The task's no_log replaces no_log=True here (ansible-core passes it with every call); Module then logs the
    # destinations alone, so the contents stay out of the node's journal either way.
    module = Module(argument_spec=argument_spec(), supports_check_mode=True, no_log=True)
    run = Run(module)
    files = run.files

    problems = item_problems([dict((k, v) for k, v in item.items() if v is not None) for item in files],
                             rendered=True)
    if problems:
        run.fail("nothing was written: %s" % "; ".join(problems), problems=problems)

    # 1. Plan: read every path and check what a change needs, before anything is changed.
    plans, problems = plan(module, files)
    if problems:
        run.fail("nothing was written: %s" % "; ".join(problems), problems=problems)

    # 2. New directories, then candidates: every changed file is written next to its destination and validated
    # before any is moved; a failure removes the candidates and the directories made here.
    if not module.check_mode:
        make_directories(module, run, plans)
        write_candidates(module, run, plans)
        run.created = []  # from here on, what is made stays

    # 3. Change: in the order given, create or fix directories, move the candidates into place, remove paths.
    results, changed_files, diffs = [], [], []
    for item, data, state in plans:
        dest = item["dest"]
        result = dict(dest=dest, state=item["state"])
        if item["state"] == "directory":
            changed = state["kind"] == "absent"
            if changed:
                if module._diff:
                    diffs.append(state_diff(dest, "absent", "directory", owner=item["owner"], group=item["group"],
                                            mode=item["mode"]))
            else:
                attr_diff = {}
                if set_attributes(module, item, attr_diff, follow=True):
                    changed = True
                    if module._diff:
                        diffs.append(attr_entry(dest, attr_diff))
            if state["dir_missing"]:
                module.warn("the parent of the directory %s, %s, does not exist: a real run fails unless an earlier "
                            "task creates it" % (dest, os.path.dirname(dest)))
        elif item["state"] == "absent":
            changed = state["kind"] != "absent"
            if changed and module._diff:
                diffs.append(state_diff(dest, state["kind"], "absent"))
            if changed and not module.check_mode:
                try:
                    remove(dest, state["kind"])
                except (IOError, OSError) as exc:
                    run.fail("could not remove %s: %s (already changed: %s)"
                             % (dest, exc, ", ".join(changed_files) or "none"), changed=bool(changed_files),
                             changed_files=changed_files)
        else:
            changed = state["content_changed"]
            if changed and module._diff:
                diffs.append(content_diff(dest, state, data, show=item["diff"]))
            if changed and not module.check_mode:
                try:
                    module.atomic_move(run.temps[dest], dest)
                except Exception as exc:  # atomic_move raises plain Exception; say what is already in place
                    run.fail("could not move the new %s into place: %s (already changed: %s)"
                             % (dest, exc, ", ".join(changed_files) or "none"), changed=bool(changed_files),
                             changed_files=changed_files)
                del run.temps[dest]
            # A file that does not exist yet (check mode) has no attributes to compare; a file created just now gets
            # them set, but its diff is the content alone.
            if not module.check_mode or (state["exists"] and not state["is_link"]):
                attr_diff = {}
                if set_attributes(module, item, attr_diff):
                    changed = True
                    if module._diff and state["exists"] and not state["is_link"]:
                        diffs.append(attr_entry(dest, attr_diff))
            if state["dir_missing"]:
                module.warn("the directory of %s, %s, does not exist: a real run fails unless an earlier task "
                            "creates it" % (dest, os.path.dirname(dest)))
            result["checksum"] = state["checksum"]
        result["changed"] = changed
        results.append(result)
        if changed:
            changed_files.append(dest)

    result = dict(changed=bool(changed_files), files=results, changed_files=changed_files)
    if module._diff:
        result["diff"] = diffs
    run.exit(**result)


if __name__ == "__main__":
    main()
