"""Running a play's structure on a batch of hosts: `block`/`rescue`/`always`, `include_tasks`
and `include_role` (expanded per host and item, hosts with the same expansion run it
together), and --start-at-task. The play loop runs the tasks themselves.

As in Ansible: a host whose task fails in a block runs the block's `rescue` (with
`ansible_failed_task` and `ansible_failed_result` set); a rescued failure does not fail the
host and counts as `rescued`, not `failed`, in the recap; `always` runs on every host that
entered the block, failed or not, and a host whose failure was not rescued stays failed after
it. An include shows one result per host (`skipped` when no item's `when` held, or the loop
is empty) and counts `ok` once per file or role it brought in, as Ansible's recap does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from glmops.engine.loading import MAX_DEPTH
from glmops.engine.nodes import Block, Include, Node, Play, Task, names_task
from glmops.engine.results import Status, TaskResult
from glmops.engine.run_state import RunState
from glmops.engine.sessions import HostSession
from glmops.engine.structure import expand_include
from glmops.engine.task_run import TaskRunner
from glmops.engine.templating import evaluate_condition, render_value
from glmops.errors import InputError, TemplateError

#: How the play loop runs a list of nodes on hosts (PlayLoop._run_nodes): blocks and includes
#: hand their tasks back through it; returns why any_errors_fatal stops the play, or None.
RunNodes = Callable[[Play, Path, list[Node], list[HostSession], ThreadPoolExecutor], str | None]


class BlockRunner:
    """Blocks and includes for the play loop, which runs their tasks (`run_nodes`, given by
    the loop, so this module needs no import of it)."""

    def __init__(self, state: RunState, runner: TaskRunner, run_nodes: RunNodes):
        self._state = state
        self._runner = runner
        self._run_nodes = run_nodes
        #: --start-at-task: the task name still looked for (tasks before it are skipped).
        self._seeking = state.options.start_at_task
        #: How many blocks with a rescue the play is inside now: a failure there is not
        #: fatal (any_errors_fatal) until its rescue fails too.
        self.rescuable = 0
        #: Dynamic includes inside each other now (an include of itself would never end).
        self._include_depth = 0

    def seeking(self, task: Task) -> bool:
        """Whether --start-at-task skips this task (it has not yet reached the one named)."""
        if self._seeking is None:
            return False
        if task.implicit or not names_task(self._seeking, task):
            return True
        self._seeking = None
        return False

    def run_block(
        self,
        play: Play,
        playbook: Path,
        block: Block,
        sessions: list[HostSession],
        pool: ThreadPoolExecutor,
    ) -> str | None:
        """The block on the hosts, then rescue on those it failed, then always on all."""
        for session in sessions:
            session.failure = None
        run = self._run_nodes
        self.rescuable += bool(block.rescue)
        try:
            reason = run(play, playbook, block.block, sessions, pool)
        finally:
            self.rescuable -= bool(block.rescue)
        if reason or self._state.interrupted:  # an interrupted run starts nothing more
            return reason
        failed = [s for s in sessions if s.dead and s.failure is not None]
        if block.rescue and failed:
            for session in failed:
                self._rescue(session)
            reason = run(play, playbook, block.rescue, failed, pool)
            if reason:
                return reason
        if not block.always:
            return None
        down = {s.host.name: s.failure for s in sessions if s.dead and s.failure is not None}
        for session in sessions:
            if session.host.name in down:
                session.dead = False
        reason = run(play, playbook, block.always, sessions, pool)
        for session in sessions:
            if session.host.name in down:  # not rescued: still failed after always
                session.dead = True
                session.failure = session.failure or down[session.host.name]
        return reason

    @staticmethod
    def _rescue(session: HostSession) -> None:
        """The host goes on in rescue: its failure counts as rescued, and is readable."""
        assert session.failure is not None
        task, result = session.failure
        session.registered["ansible_failed_task"] = {
            "name": task.name,
            "action": task.module,
            "args": task.args,
        }
        session.registered["ansible_failed_result"] = result.registered()
        session.dead, session.failure = False, None
        session.tally.failed -= 1
        session.tally.rescued += 1

    def run_include(
        self,
        play: Play,
        playbook: Path,
        include: Include,
        sessions: list[HostSession],
        pool: ThreadPoolExecutor,
    ) -> str | None:
        """Expand the include on each host (per item), then run each distinct expansion on
        the hosts that got it, in the order the first host got them."""
        options = self._state.options
        if self._seeking is not None or not include.selected(options.tags, options.skip_tags):
            return None
        groups: dict[str, tuple[str, dict[str, Any], list[HostSession]]] = {}
        for session in sessions:
            seen: dict[str, int] = {}
            for target, item_vars in self._expansions(play, playbook, include, session):
                same = json.dumps([target, item_vars], sort_keys=True, default=str)
                seen[same] = seen.get(same, 0) + 1  # an item repeated runs again, after
                key = f"{same}#{seen[same]}"
                groups.setdefault(key, (target, item_vars, []))[2].append(session)
        for target, item_vars, hosts in groups.values():
            try:
                if self._include_depth >= MAX_DEPTH:
                    raise InputError(f"includes nested over {MAX_DEPTH} deep (an include cycle?)")
                nodes = expand_include(include, play, target, item_vars)
            except InputError as error:
                for session in hosts:
                    self._fail(session, include, str(error))
                continue
            self._include_depth += 1
            try:
                reason = self._run_nodes(play, playbook, nodes, hosts, pool)
            finally:
                self._include_depth -= 1
            if reason:
                return reason
        return None

    def _expansions(
        self, play: Play, playbook: Path, include: Include, session: HostSession
    ) -> list[tuple[str, dict[str, Any]]]:
        """What the include brings in on this host: (file or role, item vars) per item whose
        `when` holds."""
        task = _as_task(include)
        where = f"{include.where} on host '{session.host.name}'"
        try:
            variables = self._runner.variables(play, playbook, session, task)
            items = [None]
            if include.loop is not None:
                items = render_value(include.loop, variables, where=where)
                if not isinstance(items, list):
                    raise TemplateError(f"{where}: 'loop' rendered to {items!r}, not a list")
            found: list[tuple[str, dict[str, Any]]] = []
            for item in items:
                item_vars = {} if include.loop is None else {include.loop_var: item}
                scope = {**variables, **item_vars}
                if task.when and not evaluate_condition(task.when, scope, where=where):
                    item_result = TaskResult(Status.SKIPPED, "condition false")
                else:
                    target = include.target
                    if include.kind == "include_tasks":
                        target = _rendered_name(target, scope, where)
                    found.append((target, item_vars))
                    item_result = TaskResult(Status.OK, f"included: {target}")
                if include.loop is not None:
                    self._state.reporter.item(session.host.name, task.name, str(item), item_result)
        except (TemplateError, InputError) as error:
            self._fail(session, include, str(error))
            return []
        self._record_expansions(session, task, include, found, len(items))
        return found

    def _record_expansions(
        self,
        session: HostSession,
        task: Task,
        include: Include,
        found: list[tuple[str, dict[str, Any]]],
        item_count: int,
    ) -> None:
        """As Ansible does: one result per host for the include task, looped or not (skipped
        when nothing was included; each item has its own line), but `ok` counted once per
        file or role it brought in."""
        if not found:
            why = "condition false" if item_count else "no items in the loop"
            self._record(session, task, TaskResult(Status.SKIPPED, why))
            return
        targets = ", ".join(dict.fromkeys(target for target, _ in found))
        counted = "" if include.loop is None else f" ({len(found)} of {item_count} items)"
        self._record(session, task, TaskResult(Status.OK, f"included: {targets}{counted}"))
        session.tally.ok += len(found) - 1

    def _record(self, session: HostSession, task: Task, result: TaskResult) -> None:
        self._runner.record(session, task, result, source=f"{task.source}:{task.line}")

    def _fail(self, session: HostSession, include: Include, message: str) -> None:
        task = _as_task(include)
        result = TaskResult(Status.FAILED, message)
        self._record(session, task, result)
        session.dead, session.failure = True, (task, result)


def _rendered_name(template: str, variables: dict[str, Any], where: str) -> str:
    """A templated include file name, rendered: it may come from a host's output, so it must
    stay a relative path below the folders it is looked up in."""
    name = str(render_value(template, variables, where=where))
    if "{{" in template and (Path(name).is_absolute() or ".." in Path(name).parts):
        raise TemplateError(
            f"{where}: the file name rendered to {name!r}; a templated name must be a relative "
            "path without '..'"
        )
    return name


def _as_task(include: Include) -> Task:
    """The include as a task: its name, vars and conditions (its block's first), for
    variables, the task line and the tally."""
    conditions = [*include.scope.when, *([] if include.when is None else _listed(include.when))]
    return Task(
        name=include.name,
        module=include.kind,
        args={"target": include.target},
        source=include.source,
        line=include.line,
        when=conditions or None,
        vars={**include.scope.vars, **include.vars},
        tags=include.tags,
    )


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]
