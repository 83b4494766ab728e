"""`delegate_to`: a task that acts on another host (the router, the controller) on behalf of
the host it runs for. It runs over the delegate's session (its connection, `become`, state dir
and run lock) with the original host's variables and facts, and its result is the original
host's, shown as `host -> delegate`. The task runner asks `Delegates` for that session per
task, since the delegate comes from the task's rendered variables; a literal one is checked
(`check_delegates`) before any host is touched.
"""

from __future__ import annotations

from typing import Any

from glmops.engine import runlock
from glmops.engine.inventory import Host, Inventory
from glmops.engine.nodes import Play, Task
from glmops.engine.sessions import HostSession, SessionPool
from glmops.engine.templating import render_value
from glmops.errors import HostUnreachable, InputError, ModuleError


def delegate_host(inventory: Inventory, name: str) -> Host | None:
    """An inventory host by name, or the implicit `localhost` (the controller)."""
    return inventory.host(name)


def check_delegates(play: Play, inventory: Inventory) -> None:
    """A literal `delegate_to` must name an inventory host (or localhost): a typo is an error
    naming the playbook file and line, before any host is touched."""
    for task in play.all_tasks():
        name = task.delegate_to
        if name and "{" not in name and delegate_host(inventory, name) is None:
            raise InputError(
                f"task '{task.name}': delegate_to '{name}' is no host of the inventory "
                f"{inventory.path} (nor localhost)",
                source=task.source,
                line=task.line,
            )


class Delegates:
    """Finds the session a `delegate_to` task runs over, in the run's pool."""

    def __init__(self, inventory: Inventory, pool: SessionPool):
        self._inventory = inventory
        self._pool = pool

    def session(self, play: Play, task: Task, variables: dict[str, Any], where: str) -> HostSession:
        """The session a `delegate_to` task runs over: the delegate's connection, become and
        run lock (taken once, without waiting, by a changing run), shared with the delegate's
        own play when it is a host of this run too."""
        name = render_value(task.delegate_to, variables, where=where)
        host = delegate_host(self._inventory, str(name).strip()) if isinstance(name, str) else None
        if host is None:
            raise ModuleError(f"{where}: delegate_to {name!r} is no host of the inventory")
        target = self._pool.session(host)
        try:
            self._pool.connect(play, target)
        except runlock.HostLocked as error:
            raise ModuleError(f"delegate '{host.name}': {error}") from None
        except HostUnreachable as error:
            raise HostUnreachable(f"delegate '{host.name}': {error}") from None
        return target
