# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Skipped tasks decided in ansible-playbook itself, without a worker process.

ansible-core forks a worker for every task and host, and the worker's first step is the task's condition: when it is
false, the worker sends back a "skipped" result and exits. Forking ``ansible-playbook`` and tearing the worker down
again cost the controller about 15 ms of CPU per skipped task (2026-12-06 profile), about 120 times per node in a
no-op run of site.yml.

``install()`` wraps the strategies' ``StrategyBase._queue_task``: for a task the wrapper can judge (no loop, no
delegation, a condition of its own or inherited), it takes the same steps as ansible-core's ``TaskExecutor`` before
that first check, on copies, in ``ansible-playbook``: the task's connection settings over the play's, their magic
variables added to a copy of the task's variables, the condition evaluated with them. When the condition is false and
nothing was warned on the way, the skipped result the worker would have sent goes through the same result queue, so
registering, callbacks and statistics are ansible-core's own. Anything else (a true condition, an error, a warning,
a task this cannot judge) goes to a worker as before, which evaluates the condition again: ansible-core's errors and
messages stay its own.

Only ansible-core 2.19's internals are known here; with another release ``install()`` changes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

SKIP_REASON = "Conditional result was False"


def _internals():
    """ansible-core's pieces this relies on, or None when this release does not have them."""
    try:
        from ansible import release
        from ansible._internal import _display_utils
        from ansible._internal._templating._engine import TemplateEngine
        from ansible.executor.task_result import _RawTaskResult
        from ansible.plugins.strategy import StrategyBase
    except ImportError:
        return None
    if not release.__version__.startswith("2.19."):
        return None
    return StrategyBase, TemplateEngine, _RawTaskResult, _display_utils.DeferredWarningContext


def judgeable(task):
    """Whether the skip can be decided here: a task with a condition, no loop and no delegation."""
    return bool(task.when) and task.loop is None and not task.loop_with and task.delegate_to is None


def skipped_result(host, task, task_vars, play_context, loader, internals=None):
    """The result ansible-core's worker would send for ``task`` on ``host`` when its condition is false; None when
    the condition is true, or this cannot tell without a worker (an error, a warning, a task it does not judge)."""
    internals = internals or _internals()
    if internals is None or not judgeable(task):
        return None
    _strategy, TemplateEngine, _raw, DeferredWarningContext = internals
    try:
        with DeferredWarningContext(variables=task_vars) as warnings:
            templar = TemplateEngine(loader=loader, variables=task_vars)
            tempvars = task_vars.copy()
            context = play_context.set_task_and_variable_override(task=task, variables=task_vars, templar=templar)
            context.post_validate(templar=templar)
            if not context.remote_addr:
                context.remote_addr = host.address
            context.update_vars(tempvars)
            details = {}
            if task._resolve_conditional(task.when, tempvars, result_context=details):
                return None
            result = dict(changed=False, skipped=True, skip_reason=SKIP_REASON)
            result.update(details)
            task.update_result_no_log(templar, result)
        if warnings.get_warnings() or warnings.get_deprecation_warnings():
            return None
    except Exception:  # pylint: disable=broad-except
        # The worker raises it again, in ansible-core's own words.
        return None
    return result


def install():
    """Wrap ``StrategyBase._queue_task``; returns the wrapper, or None when this ansible-core is not one it knows."""
    internals = _internals()
    if internals is None:
        return None
    StrategyBase, _engine, RawTaskResult, _warnings = internals
    original = StrategyBase.__dict__["_queue_task"]
    if getattr(original, "gpufleet_original", None) is not None:
        return original

    def _queue_task(self, host, task, task_vars, play_context):
        result = skipped_result(host, task, task_vars, play_context, self._loader, internals)
        if result is None:
            return original(self, host, task, task_vars, play_context)
        # What ansible-core records for a queued task, then the worker's own result, sent the way a worker sends it.
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        self._pending_results += 1
        self._final_q.send_task_result(RawTaskResult(host=host, task=task, return_data=result,
                                                     task_fields=task.dump_attrs()))
        return None

    _queue_task.gpufleet_original = original
    StrategyBase._queue_task = _queue_task
    return _queue_task
