"""A loaded playbook's data: plays, and the nodes of a play's body, with what a task inherits
from the nodes around it. It imports none of the loaders that build it (playparse, structure,
roles) nor the runners that read it, so both sides share one home for these types.

A play's body is a list of nodes: a `Task`, a `Block` (`block`/`rescue`/`always`), or an
`Include` (`include_tasks`/`include_role`: expanded per host at run time). Static structure
(`import_tasks`, `import_role`, `roles:`) is expanded when the playbook loads into blocks, so the
play loop only knows these three kinds. A `Scope` carries what enclosing blocks, imports and
roles give their tasks (conditions, vars, tags, become, ...), applied to each task as it loads,
as Ansible's inheritance does: a block's `when` is evaluated again for every task under it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from glmops.engine.batches import SerialEntry

#: Keys a block may carry besides block/rescue/always; each is inherited by its tasks.
BLOCK_KEYS = frozenset(
    {
        "name",
        "block",
        "rescue",
        "always",
        "when",
        "become",
        "become_user",
        "tags",
        "vars",
        "environment",
        "ignore_errors",
        "no_log",
        "check_mode",
        "delegate_to",
        "any_errors_fatal",
    }
)


@dataclass(frozen=True)
class RoleRef:
    """The role a task came from: its name (shown as `role : task`) and its folder."""

    name: str
    path: Path


@dataclass(frozen=True)
class Scope:
    """What enclosing blocks, imports and roles give each task below them."""

    #: Where relative include/import paths are looked up first (the including file's folder).
    base_dir: Path
    #: The playbook's folder: the last place include paths are looked up.
    playbook_dir: Path
    when: tuple[Any, ...] = ()
    vars: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    become: bool | None = None
    become_user: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    ignore_errors: bool = False
    no_log: bool = False
    check_mode: bool | None = None
    delegate_to: str | None = None
    any_errors_fatal: bool | None = None
    role: RoleRef | None = None

    def child(self, **changes: Any) -> Scope:
        """A scope under this one: conditions and tags add up, vars merge (inner wins), the
        rest is replaced when given."""
        merged = dict(changes)
        merged["when"] = self.when + tuple(changes.get("when", ()))
        merged["tags"] = tuple(dict.fromkeys(self.tags + tuple(changes.get("tags", ()))))
        merged["vars"] = {**self.vars, **changes.get("vars", {})}
        merged["environment"] = {**self.environment, **changes.get("environment", {})}
        for key in ("become", "become_user", "check_mode", "delegate_to", "any_errors_fatal"):
            if changes.get(key) is None:
                merged[key] = getattr(self, key)
        merged["ignore_errors"] = self.ignore_errors or bool(changes.get("ignore_errors"))
        merged["no_log"] = self.no_log or bool(changes.get("no_log"))
        return replace(self, **merged)

    def search_dirs(self) -> list[Path]:
        """Where a relative include/import path is looked up, first match wins."""
        dirs = [self.base_dir]
        if self.role is not None:
            dirs.append(self.role.path / "tasks")
        dirs.append(self.playbook_dir)
        return list(dict.fromkeys(dirs))

    def apply(self, task: Task) -> Task:
        """The task as its scope makes it: conditions before its own, vars under its own."""
        if self.when:  # a task's own `when` stays as written when nothing encloses it
            own_when = [] if task.when is None else _as_list(task.when)
            task.when = [*self.when, *own_when]
        task.vars = {**self.vars, **task.vars}
        task.tags = list(dict.fromkeys([*task.tags, *self.tags]))
        task.environment = {**self.environment, **task.environment}
        for key in ("become", "become_user", "check_mode", "delegate_to", "any_errors_fatal"):
            if getattr(task, key) is None:
                setattr(task, key, getattr(self, key))
        task.ignore_errors = task.ignore_errors or self.ignore_errors
        task.no_log = task.no_log or self.no_log
        if self.role is not None:
            task.role = self.role
            task.name = f"{self.role.name} : {task.name}"
        return task


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


@dataclass
class Block:
    """`block:` with its `rescue:` and `always:` sections (each a list of nodes)."""

    name: str
    source: str
    line: int
    block: list[Node] = field(default_factory=list)
    rescue: list[Node] = field(default_factory=list)
    always: list[Node] = field(default_factory=list)


@dataclass
class Include:
    """`include_tasks` or `include_role`: which tasks run is decided per host at run time
    (the file name may be a template; `when` is evaluated once; `loop` includes once per item)."""

    name: str
    kind: str  # "include_tasks" or "include_role"
    source: str
    line: int
    #: include_tasks: the file (may be a template); include_role: the role's name.
    target: str
    scope: Scope
    #: include_role: `tasks_from` (default main).
    tasks_from: str = "main"
    when: Any = None
    loop: Any = None
    loop_var: str = "item"
    vars: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line} {self.kind} '{self.name}'"

    def selected(self, tags: set[str], skip_tags: set[str]) -> bool:
        """--tags/--skip-tags on the include itself (its tasks are then selected one by one)."""
        names = set(self.tags) | {"all"}
        if tags and not (names & tags) and "always" not in names:
            return False
        return not (skip_tags and names & skip_tags)


@dataclass
class Task:
    name: str
    module: str
    args: dict[str, Any]
    source: str
    line: int
    when: Any = None
    notify: list[str] = field(default_factory=list)
    register: str | None = None
    tags: list[str] = field(default_factory=list)
    retries: int = 0
    until: Any = None
    delay: float = 5
    timeout: float | None = None
    #: true/false, or a template rendered when the task runs.
    become: bool | str | None = None
    ignore_errors: bool = False
    vars: dict[str, Any] = field(default_factory=dict)
    listen: list[str] = field(default_factory=list)
    changed_when: Any = None
    failed_when: Any = None
    #: False: run even under --check (for read-only probes whose output later tasks use).
    check_mode: bool | None = None
    #: Run once per item (a list, or a template that renders to one), as `loop_var`.
    loop: Any = None
    loop_var: str = "item"
    #: `with_<kind>:` the loop came from (its value becomes the items as Ansible's lookup does).
    loop_with: str | None = None
    #: `loop_control`: the item's index as this variable, and what an item's line shows.
    index_var: str | None = None
    loop_label: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    #: Hide the task's output, diff and commands from the screen, events and run log.
    no_log: bool = False
    become_user: str | None = None
    #: Run on the batch's first host only; the result counts for every host of the batch.
    run_once: bool = False
    #: Run over this inventory host's connection (`localhost`: the controller), with the
    #: original host's variables and facts; a template is rendered per host.
    delegate_to: str | None = None
    #: A failure on any host stops the play for every host after this task (None: the play's).
    any_errors_fatal: bool | None = None
    #: The role this task came from (its folder is searched first for `src:` files).
    role: RoleRef | None = None
    #: Added by the play's structure (the handler flush after pre_tasks), not written.
    implicit: bool = False

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line} task '{self.name}'"

    def errors_fatal(self, play_default: bool) -> bool:
        """Whether a failure of this task stops the play for every host (`any_errors_fatal`)."""
        return play_default if self.any_errors_fatal is None else self.any_errors_fatal

    def selected(self, tags: set[str], skip_tags: set[str]) -> bool:
        """Whether --tags/--skip-tags let this task run (`always` runs unless skipped; `never`
        only when --tags names it or another of its tags)."""
        if "never" in self.tags and not (set(self.tags) & tags):
            return False
        names = set(self.tags) | {"all"}
        if tags and not (names & tags) and "always" not in names:
            return False
        return not (skip_tags and names & skip_tags)


@dataclass
class Play:
    name: str
    hosts: str
    source: str
    line: int
    vars: dict[str, Any] = field(default_factory=dict)
    #: Lowest-precedence variables: the inventory and -e override them (play vars do not).
    defaults: dict[str, Any] = field(default_factory=dict)
    #: The play's body: tasks, blocks and includes, in order.
    tasks: list[Node] = field(default_factory=list)
    handlers: list[Task] = field(default_factory=list)
    become: bool | str | None = None
    become_user: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    gather_facts: bool = True
    tags: list[str] = field(default_factory=list)
    #: Batch sizes (glmops/engine/batches.py); None: every host in one batch.
    serial: list[SerialEntry] | None = None
    max_fail_percentage: float | None = None
    any_errors_fatal: bool = False
    #: `connection:` for every host of the play (local or ssh); None: the inventory's.
    connection: str | None = None
    #: Run notified handlers even on hosts that failed (`force_handlers`, --force-handlers).
    force_handlers: bool = False

    def all_tasks(self) -> list[Task]:
        """Every task written in the play and known at load (blocks' sections, imports,
        roles; not the implicit handler flushes), then the handlers."""
        return [*(t for t in walk_tasks(self.tasks) if not t.implicit), *self.handlers]

    @property
    def stops_on_failure(self) -> bool:
        """Whether a failed batch can stop the play (and the run), as in Ansible."""
        return (
            self.serial is not None or self.max_fail_percentage is not None or self.any_errors_fatal
        )

    @property
    def handler_names(self) -> set[str]:
        """Every name a task may notify: handlers' names and what they listen to."""
        return {h.name for h in self.handlers} | {n for h in self.handlers for n in h.listen}


Node = Any  # Task | Block | Include


def names_task(pattern: str, task: Task) -> bool:
    """Whether --start-at-task's `pattern` names this task: its name, its name without the
    role's prefix (`role : name`), or a shell-style pattern of its name."""
    plain = task.name.split(" : ", 1)[-1]
    return pattern in (task.name, plain) or fnmatch.fnmatchcase(task.name, pattern)


def walk_nodes(nodes: list[Node]) -> Iterator[Task | Include]:
    """Every task and include known when the playbook loads, in order (blocks' sections
    included)."""
    for node in nodes:
        if isinstance(node, Block):
            yield from walk_nodes(node.block)
            yield from walk_nodes(node.rescue)
            yield from walk_nodes(node.always)
        else:
            yield node


def walk_tasks(nodes: list[Node]) -> Iterator[Task]:
    """Every task known when the playbook loads, in order (not those includes bring in)."""
    for node in walk_nodes(nodes):
        if not isinstance(node, Include):
            yield node
