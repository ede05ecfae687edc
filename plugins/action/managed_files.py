# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of gpufleet.cluster.managed_files (the module's DOCUMENTATION describes the task): renders every
`src` template on the controller the way ansible.builtin.template does, reads every `copy` file the way
ansible.builtin.copy finds and reads its `src` (vault-encrypted files decrypted), then calls the module once for the
set.

When the task runs on the controller itself (connection local, no become: the MPI hostfile, Prometheus targets and
the cluster key directory), the plugin first reads the files in this process, as the user the module would run as;
when every item is already as asked, it returns the module's own no-op result without starting a module process
(about 0.3 s of controller CPU each). Anything that would change, and anything it cannot judge for certain, goes to
the module (module_utils/managed_files.settled).

Hand-written because a run that changes nothing pays for every module call on every node: ansible.builtin.template
costs two per file (a stat, then the file module for owner, group and mode), and neither ansible-core nor the
collections of the `ansible` package has a module that checks and writes a set of files in one call. Rendering
follows ansible-core 2.19's own template action (ansible/plugins/action/template.py): the same search path, the same
template variables and the same Jinja settings, so a file written by either is byte for byte the same
(tests/unit/test_managed_files_action.py compares the two).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os

from jinja2.defaults import (
    BLOCK_END_STRING,
    BLOCK_START_STRING,
    COMMENT_END_STRING,
    COMMENT_START_STRING,
    VARIABLE_END_STRING,
    VARIABLE_START_STRING,
)

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.template import generate_ansible_template_vars

try:  # the data tagging templar of ansible-core 2.19, whose template action this one follows
    from ansible.template import trust_as_template
except ImportError:
    trust_as_template = None

from ansible_collections.gpufleet.cluster.plugins.module_utils.managed_files import item_problems, settled

MODULE = "gpufleet.cluster.managed_files"

# ansible.builtin.template's defaults: trim_blocks on, lstrip_blocks off, "\n" line ends, Jinja's delimiters.
TEMPLATE_OVERRIDES = dict(
    block_start_string=BLOCK_START_STRING,
    block_end_string=BLOCK_END_STRING,
    variable_start_string=VARIABLE_START_STRING,
    variable_end_string=VARIABLE_END_STRING,
    comment_start_string=COMMENT_START_STRING,
    comment_end_string=COMMENT_END_STRING,
    trim_blocks=True,
    lstrip_blocks=False,
    newline_sequence="\n",
)


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("files",))

    def render(self, src, dest, task_vars):
        """src rendered as ansible.builtin.template renders it for dest (ansible-core 2.19)."""
        if trust_as_template is None:
            raise AnsibleActionFail("%s renders src as ansible-core 2.19's template action does; this controller "
                                    "runs an older ansible-core, so give content instead or upgrade" % MODULE)
        try:
            source = self._find_needle("templates", src)
        except AnsibleError as exc:
            raise AnsibleActionFail(to_text(exc))
        template_data = trust_as_template(self._loader.get_text_file_contents(source))

        # Jinja's search path for includes: each search path entry and its templates/ subdirectory. (A copy: the
        # template action extends the task's own list, which would grow here with every file.)
        searchpath = list(task_vars.get("ansible_search_path", []))
        searchpath.extend([self._loader.get_basedir(), os.path.dirname(source)])
        searchpath = [path for entry in searchpath for path in (os.path.join(entry, "templates"), entry)]

        temp_vars = task_vars.copy()
        template_vars = generate_ansible_template_vars(path=src, fullpath=source, dest_path=dest)
        if "ansible_managed" in temp_vars:  # a user's ansible_managed wins, as in the template action
            template_vars.pop("ansible_managed", None)
        temp_vars.update(template_vars)

        templar = self._templar.copy_with_new_env(searchpath=searchpath, available_variables=temp_vars)
        resultant = templar.template(template_data, escape_backslashes=False, overrides=TEMPLATE_OVERRIDES)
        # The template action writes str() of a template that renders to something else than a string.
        return "" if resultant is None else to_text(resultant)

    def read_copy(self, name):
        """The bytes of a `copy` file, base64-encoded: found as ansible.builtin.copy finds src (the role's files/
        directory, then the search path, or an absolute path on the controller) and sent verbatim, whatever its
        encoding, never templated."""
        try:
            source = self._find_needle("files", name)
        except AnsibleError as exc:
            raise AnsibleActionFail(to_text(exc))
        if os.path.isdir(source):
            raise AnsibleActionFail("copy %s is a directory on the controller; %s copies single files" % (name, MODULE))
        real = self._loader.get_real_file(source, decrypt=True)
        try:
            with open(real, "rb") as handle:
                data = handle.read()
        except (IOError, OSError) as exc:
            raise AnsibleActionFail("cannot read %s on the controller: %s" % (source, exc))
        finally:
            self._loader.cleanup_tmp_file(real)
        return to_text(base64.b64encode(data))

    def runs_here(self):
        """True when the module would run on the controller as this process's user: connection local, no become."""
        return getattr(self._connection, "transport", None) == "local" and not self._play_context.become

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # no effect since ansible-core 2.5

        # ansible-core's task executor calls cleanup() after run(), which removes a remote temporary directory.
        files = self._task.args.get("files")
        if files is None:
            raise AnsibleActionFail("files is required (a list of files; an empty list changes nothing)")
        problems = item_problems(files)
        if problems:
            raise AnsibleActionFail("nothing was written: %s" % "; ".join(problems))
        if not files:
            result.update(changed=False, files=[], changed_files=[], msg="no files: nothing to check")
            return result

        module_files = []
        for item in files:
            item = dict(item)
            src, copy = item.pop("src", None), item.pop("copy", None)
            if src is not None:
                item["content"] = self.render(src, item["dest"], task_vars)
            elif copy is not None:
                item["content_base64"] = self.read_copy(copy)
            module_files.append(item)

        if self.runs_here():
            results = settled(module_files)
            if results is not None:
                result.update(changed=False, files=results, changed_files=[],
                              msg="every item is as asked (read on the controller; no module run)")
                if self._task.diff:
                    result["diff"] = []
                return result

        result.update(self._execute_module(module_name=MODULE, module_args=dict(files=module_files),
                                           task_vars=task_vars))
        return result
