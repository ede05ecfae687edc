# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Tasks that need no worker, decided or run in ansible-playbook itself.

ansible-core forks a worker process for every task and host. Forking ``ansible-playbook`` and tearing the worker
down again cost the controller about 15 ms of CPU per task (2026-12-06 profile), also for a task whose condition is
false (the worker only sends "skipped" back, about 120 times per node in a no-op run of site.yml) and for a task
whose action never leaves the controller (``set_fact``, ``assert``, ``debug``: about 80 per node).

``install()`` wraps the strategies' ``StrategyBase._queue_task``:

- ``skip``: for a task with a condition, no loop and no delegation, it takes the same steps as ansible-core's
  ``TaskExecutor`` before that first check, on copies: the task's connection settings over the play's, their magic
  variables added to a copy of the task's variables, the condition evaluated with them. When the condition is false
  and nothing was warned on the way, the skipped result the worker would have sent goes through the same result
  queue. Anything else (a true condition, an error, a warning) goes on, and a worker evaluates the condition again.
- ``run``: a task whose action is one of ``CONTROLLER_ACTIONS`` (action plugins that never touch the connection,
  never wait and never ask), with no loop, delegation, retries, async or timeout, is run by ansible-core's own
  ``TaskExecutor`` in ``ansible-playbook``, on a copy of the task and of its variables, as the worker would run it;
  its result goes through the same queue.

Either way registering, handlers, callbacks and statistics are ansible-core's own. Only ansible-core 2.19's internals
are known here; with another release ``install()`` changes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import private_cache

SKIP_REASON = "Conditional result was False"

# Action plugins that run on the controller alone: they template and return, with no connection, no prompt, no
# waiting and no state outside their result.
CONTROLLER_ACTIONS = frozenset("ansible.builtin." + name for name in (
    "assert", "debug", "fail", "include_vars", "set_fact", "validate_argument_spec"))


def _internals():
    """ansible-core's pieces this relies on, or None when this release does not have them."""
    if not private_cache.core_is_known():
        return None
    try:
        from ansible._internal import _display_utils, _task
        from ansible._internal._templating._engine import TemplateEngine
        from ansible.executor.task_executor import TaskExecutor
        from ansible.executor.task_result import _RawTaskResult
        from ansible.plugins import loader as plugin_loader
        from ansible.plugins.strategy import StrategyBase
    except ImportError:
        return None
    return dict(StrategyBase=StrategyBase, TemplateEngine=TemplateEngine, RawTaskResult=_RawTaskResult,
                DeferredWarningContext=_display_utils.DeferredWarningContext, TaskContext=_task.TaskContext,
                TaskExecutor=TaskExecutor, plugin_loader=plugin_loader)


def _plain(task):
    """No loop and no delegation: one run of the task, on its own host."""
    return task.loop is None and not task.loop_with and task.delegate_to is None


def judgeable(task):
    """Whether the skip can be decided here: a task with a condition, no loop and no delegation."""
    return bool(task.when) and _plain(task)


def runnable(task):
    """Whether the task can run here: a controller-only action, once, without retries, async or a timeout."""
    return (task.resolved_action in CONTROLLER_ACTIONS and _plain(task) and not task.until and not task.async_val
            and not task.timeout)


def skipped_result(host, task, task_vars, play_context, loader, internals=None):
    """The result ansible-core's worker would send for ``task`` on ``host`` when its condition is false; None when
    the condition is true, or this cannot tell without a worker (an error, a warning, a task it does not judge)."""
    internals = internals or _internals()
    if internals is None or not judgeable(task):
        return None
    try:
        with internals["DeferredWarningContext"](variables=task_vars) as warnings:
            templar = internals["TemplateEngine"](loader=loader, variables=task_vars)
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


def run_result(host, task, task_vars, play_context, strategy, internals=None):
    """(result, the task copy it ran on) of ansible-core's TaskExecutor run here, as a worker runs it; None for a
    task that must go to a worker."""
    internals = internals or _internals()
    if internals is None or not runnable(task):
        return None
    # The worker runs on its own copy of everything (a fork): the executor squashes and post-validates the task and
    # adds to the variables.
    copy = task.copy(exclude_tasks=True)
    with internals["TaskContext"](copy):
        result = internals["TaskExecutor"](host, copy, task_vars.copy(), play_context, strategy._loader,
                                           internals["plugin_loader"].get_plugin_loader_namespace(),
                                           strategy._final_q, strategy._variable_manager).run()
    return result, copy


def install(skip=True, run=True):
    """Wrap ``StrategyBase._queue_task`` to skip (``skip``) and run (``run``) what needs no worker here; returns the
    wrapper, or None when this ansible-core is not one it knows or both are off. Installed once per process."""
    internals = _internals()
    if internals is None or not (skip or run):
        return None
    StrategyBase, RawTaskResult = internals["StrategyBase"], internals["RawTaskResult"]
    original = StrategyBase.__dict__["_queue_task"]
    if getattr(original, "gpufleet_original", None) is not None:
        return original

    def _queue_task(self, host, task, task_vars, play_context):
        done = None
        if skip:
            result = skipped_result(host, task, task_vars, play_context, self._loader, internals)
            if result is not None:
                done = result, task
        if done is None and run:
            done = run_result(host, task, task_vars, play_context, self, internals)
        if done is None:
            return original(self, host, task, task_vars, play_context)
        result, ran = done
        # What ansible-core records for a queued task, then the worker's result, sent the way a worker sends it.
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        self._pending_results += 1
        self._final_q.send_task_result(RawTaskResult(host=host, task=ran, return_data=result,
                                                     task_fields=ran.dump_attrs()))
        return None

    _queue_task.gpufleet_original = original
    StrategyBase._queue_task = _queue_task
    return _queue_task
