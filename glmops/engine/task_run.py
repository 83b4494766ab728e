"""One task on one host: its variables, `when`, `loop`, `retries`/`until`, the module's plan
then apply (or only the plan under --check), `changed_when`/`failed_when`, and its result
recorded (tally, `register`, output censored by `no_log`). Every failure of a task becomes its
result here, so the play loop only sees results and the host-level troubles it must act on
(unreachable, interrupted)."""

from __future__ import annotations

import copy
import functools
import os
import re
import time
import traceback
from pathlib import Path
from typing import Any

from glmops import paths
from glmops.engine.ansible_args import ansible_facts, expand_with
from glmops.engine.context import RemoteCommandError, TaskContext
from glmops.engine.delegation import Delegates
from glmops.engine.filters import OMIT, to_bool
from glmops.engine.hostvars import HostVars, groups_of
from glmops.engine.inventory import Inventory
from glmops.engine.nodes import Play, Task
from glmops.engine.results import Status, TaskResult
from glmops.engine.run_state import RunState
from glmops.engine.sessions import HostSession, SessionPool
from glmops.engine.templating import evaluate_condition, render_value, resolve_variables
from glmops.engine.unsafe import mark_unsafe
from glmops.errors import (
    CommandInterrupted,
    CommandTimeout,
    HostUnreachable,
    ModuleError,
    TemplateError,
)
from glmops.modules import REGISTRY
from glmops.modules.base import check_types

#: Result data of a task whose command was ended midway (timeout, interrupt): it may have
#: changed the host, so its notifications are kept.
ENDED_MIDWAY = "ended_midway"


class TaskRunner:
    """Runs one task on one host, over the host's session (or its delegate's) from the pool."""

    def __init__(
        self, state: RunState, pool: SessionPool, delegates: Delegates, inventory: Inventory
    ):
        self._state = state
        self._pool = pool
        self._delegates = delegates
        self._inventory = inventory
        self._hostvars = HostVars(inventory, pool, state)

    def variables(
        self, play: Play, playbook: Path, session: HostSession, task: Task | None = None
    ) -> dict[str, Any]:
        """What a task on this host sees: play defaults < inventory < play vars < -e, the
        run's own (inventory_hostname, facts, pending_handlers, hostvars, groups, ...),
        registered results and set_fact, then the task's vars (with its blocks' and role's),
        and -e once more on top (it wins over everything, as in Ansible); templates resolved,
        secrets noted for masking."""
        host = session.host
        merged = {**play.defaults, **host.vars, **play.vars, **self._state.options.extra_vars}
        self._state.masker.add_secret_vars(merged)
        merged.update(
            inventory_hostname=host.name,
            group_names=host.groups,
            check_mode=self._state.options.check,
            playbook_dir=mark_unsafe(str(playbook.parent)),  # a path, not a template
            facts=session.facts or {},
            **ansible_facts(session.facts),
            # What the play's handlers will run on this host: notified so far in this run, or
            # kept on the host by an earlier run that stopped before its handlers.
            pending_handlers=sorted(session.pending),
            hostvars=self._hostvars,
            groups=groups_of(self._inventory),
        )
        merged.update(session.registered)
        if task:
            merged.update(task.vars)  # block, role and task vars, role parameters
        merged.update(self._state.options.extra_vars)  # -e wins over everything, as in Ansible
        where = f"{task.where} on host '{host.name}'" if task else f"play '{play.name}'"
        resolved = resolve_variables(merged, where=where)
        self._state.masker.add_secret_vars(resolved)
        return resolved

    def run(
        self, play: Play, playbook: Path, session: HostSession, task: Task, *, handler: bool = False
    ) -> TaskResult:
        """Run the task on the host (once per `loop` item), then record its result; shown as
        running (for the heartbeat) while it runs."""
        started = time.monotonic()
        source = f"{task.source}:{task.line}"
        self._state.reporter.task_start(session.host.name, task.name, source, handler=handler)
        self._state.running[session.host.name] = (task.name, started)
        try:
            if task.loop is None:
                result = self._guarded(play, playbook, session, task, {})
            else:
                result = self._looped(play, playbook, session, task)
        finally:
            self._state.running.pop(session.host.name, None)
        self.record(
            session, task, result, handler=handler, source=source, took=time.monotonic() - started
        )
        return result

    def record(
        self,
        session: HostSession,
        task: Task,
        result: TaskResult,
        *,
        handler: bool = False,
        source: str | None = None,
        took: float | None = None,
    ) -> None:
        """Count a task's result for a host, register it, and show it (censored by no_log)."""
        if result.failed and task.ignore_errors:
            result.ignored = True
        session.tally.count(result)
        # What a task registered came from the host; what set_fact stored was rendered once
        # already: both are data from now on, never rendered again.
        if task.register:
            session.registered[task.register] = mark_unsafe(result.registered())
        if not result.failed:  # set_fact
            session.registered.update(mark_unsafe(result.data.get("set_vars") or {}))
        shown = _censored(result) if task.no_log else result
        self._state.runlog.write(
            session.host.name,
            f"task {task.name!r}: {shown.status.value} "
            f"({took or 0:.2f}s) {shown.msg}" + (f" on {shown.delegate}" if shown.delegate else ""),
        )
        self._state.reporter.task(
            session.host.name,
            task.name,
            shown,
            handler=handler,
            source=source,
            duration=took,
        )

    def _guarded(
        self,
        play: Play,
        playbook: Path,
        session: HostSession,
        task: Task,
        item_vars: dict[str, Any],
    ) -> TaskResult:
        """One run of a task (or of one loop item), every failure turned into its result."""
        try:
            return self._attempts(play, playbook, session, task, item_vars)
        except HostUnreachable:
            raise
        except CommandTimeout as error:
            return TaskResult(Status.FAILED, f"timed out: {error}", data={ENDED_MIDWAY: True})
        except CommandInterrupted as error:
            return TaskResult(
                Status.FAILED,
                f"interrupted: {error}; its command was ended",
                data={ENDED_MIDWAY: True},
            )
        except TemplateError as error:  # the task's own templates name it; a module's do not
            where = f"{task.where} on host '{session.host.name}'"
            message = str(error)
            located = message if message.startswith(where) else f"{where}: {message}"
            return TaskResult(Status.FAILED, located)
        except (ModuleError, RemoteCommandError) as error:
            return TaskResult(Status.FAILED, str(error))
        except Exception as error:  # a bug in a module fails its task, never the whole run
            trace = traceback.format_exc()
            self._state.runlog.write(session.host.name, trace)
            return TaskResult(
                Status.FAILED,
                f"internal error in module '{task.module}': {error!r}"
                f" (traceback in {self._state.runlog.path}/{session.host.name}.log)",
                data={"traceback": trace},
            )

    def _looped(self, play: Play, playbook: Path, session: HostSession, task: Task) -> TaskResult:
        """`loop:` the task once per item (as `loop_var`); the result holds every item's."""
        where = f"{task.where} on host '{session.host.name}'"
        variables = self.variables(play, playbook, session, task)
        try:
            items = render_value(task.loop, variables, where=where)
            if task.loop_with:
                items = expand_with(task.loop_with, items, variables)
        except TemplateError as error:
            return TaskResult(Status.FAILED, str(error))
        except ValueError as error:
            return TaskResult(Status.FAILED, f"{where}: {error}")
        if not isinstance(items, list):
            return TaskResult(Status.FAILED, f"{where}: 'loop' rendered to {items!r}, not a list")
        results, delegates = [], set()
        for index, item in enumerate(items):
            if self._state.interrupted:
                break
            item_vars = {task.loop_var: item}
            if task.index_var:
                item_vars[task.index_var] = index
            one = self._guarded(play, playbook, session, task, item_vars)
            results.append({**one.registered(), task.loop_var: item})
            delegates |= {one.delegate} if one.delegate else set()
            self._state.reporter.item(
                session.host.name,
                task.name,
                self._label(task, {**variables, **item_vars}, item, where),
                _censored(one) if task.no_log else one,
            )
        result = _loop_result(results, task.loop_var)
        result.delegate = ", ".join(sorted(delegates)) or None
        return result

    @staticmethod
    def _label(task: Task, variables: dict[str, Any], item: Any, where: str) -> str:
        """What an item's line shows: `loop_control.label` rendered, else the item."""
        if task.no_log:
            return "(hidden: no_log)"
        if task.loop_label is None:
            return str(item)
        try:
            return str(render_value(task.loop_label, variables, where=where))
        except TemplateError as error:
            return f"(label: {error})"

    def _attempts(
        self,
        play: Play,
        playbook: Path,
        session: HostSession,
        task: Task,
        item_vars: dict[str, Any],
    ) -> TaskResult:
        where = f"{task.where} on host '{session.host.name}'"
        variables = {**self.variables(play, playbook, session, task), **item_vars}
        module_cls = REGISTRY[task.module]
        if task.when is not None and not evaluate_condition(task.when, variables, where=where):
            return TaskResult(
                Status.SKIPPED,
                f"condition false: {task.when}",
                data=dict(module_cls.result_defaults),
            )
        params = _without_omitted(module_cls, render_value(task.args, variables, where=where))
        problems = check_types(module_cls, params)
        if problems:
            raise ModuleError(f"{where}: {problems[0]}")
        delegate = (
            self._delegates.session(play, task, variables, where) if task.delegate_to else None
        )
        ctx = self._pool.context(play, delegate or session, task)
        if ctx.become_user and ("{{" in ctx.become_user or "{%" in ctx.become_user):
            ctx.become_user = str(render_value(ctx.become_user, variables, where=where))
        chosen = next((v for v in (task.become, play.become) if v is not None), None)
        if isinstance(chosen, str):  # a templated `become:`
            ctx.become = to_bool(render_value(chosen, variables, where=where))
        ctx.environment = _environment(
            render_value({**play.environment, **task.environment}, variables, where=where), where
        )
        if task.check_mode is False:
            ctx.check = False
        ctx.vars, ctx.search_paths = variables, _search_paths(playbook, task)
        attempts = task.retries + 1 if (task.retries or task.until) else 1
        for attempt in range(1, attempts + 1):
            result = self._once(module_cls(params), ctx)
            result.data = {**module_cls.result_defaults, **result.data}
            result = self._conditions(task, result, variables, where)
            if task.until is None and not result.failed:
                break
            if task.until is not None:
                registered = mark_unsafe(result.registered())
                scope = {
                    **variables,
                    "result": registered,
                    **({task.register: registered} if task.register else {}),
                }
                if evaluate_condition(task.until, scope, where=where):
                    break
            if attempt < attempts:
                self._state.runlog.write(
                    session.host.name, f"retry {attempt}/{task.retries}: {task.name}"
                )
                time.sleep(task.delay)
        else:
            if task.until is not None and not result.failed:
                result = TaskResult(
                    Status.FAILED,
                    f"'until' still false after {attempts} attempt(s): {result.msg}",
                    result.diff,
                    result.data,
                )
        if (
            result.changed
            and module_cls.changes_facts
            and session.facts is not None
            and not self._state.options.check
            and delegate is None
        ):
            self._pool.gather_facts(play, session)
        if delegate is not None and delegate is not session:
            result.delegate = delegate.host.name
        return result

    def _once(self, module, ctx: TaskContext) -> TaskResult:
        plan = module.plan(ctx)
        if plan.change is False:
            return TaskResult(Status.OK, plan.reason, data=plan.data_public())
        if ctx.check:
            if plan.change is None:
                return TaskResult(Status.SKIPPED, f"check mode: {plan.reason}")
            return TaskResult(Status.CHANGED, plan.reason, plan.diff, plan.data_public())
        if ctx.prefetched is not None:  # the host is about to change: check it again after
            ctx.prefetched.forget()
        return module.apply(ctx, plan)

    def _conditions(
        self, task: Task, result: TaskResult, variables: dict[str, Any], where: str
    ) -> TaskResult:
        if (
            task.changed_when is None
            and task.failed_when is None
            or result.status in (Status.SKIPPED, Status.UNREACHABLE)
        ):
            return result
        registered = mark_unsafe(result.registered())
        scope = {**variables, "result": registered}
        if task.register:
            scope[task.register] = registered
        if task.failed_when is not None and evaluate_condition(
            task.failed_when, scope, where=where
        ):
            return TaskResult(
                Status.FAILED, f"failed_when: {task.failed_when}", result.diff, result.data
            )
        if task.changed_when is not None and result.status is not Status.FAILED:
            changed = evaluate_condition(task.changed_when, scope, where=where)
            result.status = Status.CHANGED if changed else Status.OK
        elif task.failed_when is not None and result.status is Status.FAILED:
            result.status = Status.CHANGED if result.data.get("rc") is not None else Status.OK
        return result


def _without_omitted(module_cls: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Arguments that rendered to `omit` are left unset (their default), as in Ansible."""
    return {
        key: copy.deepcopy(module_cls.args[key].default)
        if value == OMIT and key in module_cls.args
        else value
        for key, value in params.items()
        if not (value == OMIT and key not in module_cls.args)
    }


def _environment(values: Any, where: str) -> dict[str, str]:
    if not isinstance(values, dict):
        raise ModuleError(f"{where}: 'environment' must be a mapping")
    for name in values:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise ModuleError(f"{where}: environment variable name {name!r} is not valid")
    return {str(k): "" if v is None else str(v) for k, v in values.items()}


def _loop_result(results: list[dict[str, Any]], loop_var: str) -> TaskResult:
    """One result for a looped task: failed if an item failed, changed if one changed."""
    counts: dict[str, int] = {}
    for one in results:
        counts[one["status"]] = counts.get(one["status"], 0) + 1
    if counts.get("failed"):
        status = Status.FAILED
    elif counts.get("changed"):
        status = Status.CHANGED
    elif results and counts.get("skipped") == len(results):
        status = Status.SKIPPED
    else:
        status = Status.OK
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    failed = [f"{loop_var}={one[loop_var]!r}: {one['msg']}" for one in results if one["failed"]]
    msg = f"{len(results)} item(s): {summary or 'none'}" + (
        f"; {'; '.join(failed)}" if failed else ""
    )
    return TaskResult(status, msg, data={"results": results})


def _censored(result: TaskResult) -> TaskResult:
    """What a `no_log` task shows: its status, never its output, message or diff."""
    return TaskResult(
        result.status,
        "(output hidden: no_log)",
        None,
        {},
        ignored=result.ignored,
        delegate=result.delegate,
    )


def _search_paths(playbook: Path, task: Task) -> list[Path]:
    """Where `src:` of copy/template is looked up: the task's role, the task's own file's
    folder, beside the playbook, then the project's."""
    role = task.role.path if task.role is not None else None
    return list(_resolved_search_paths(playbook, role, task.source, os.getcwd()))


@functools.lru_cache(maxsize=1024)
def _resolved_search_paths(
    playbook: Path, role: Path | None, source: str, cwd: str
) -> tuple[Path, ...]:
    """`_search_paths`, resolved once per task file (and working directory, which relative
    paths resolve against) rather than once per task and host: five symbolic-link walks."""
    first = [role] if role is not None else []
    first.append(Path(source).parent)
    found = [*first, playbook.parent, playbook.parent.parent, paths.root()]
    return tuple(dict.fromkeys(path.resolve() for path in found))
