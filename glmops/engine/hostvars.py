"""Ansible's `hostvars` and `groups`: what a task sees of the other hosts of the inventory.

`groups` maps each inventory group (and `all`) to its hosts' names, in inventory order.
`hostvars[name]` is that host's view as this run knows it now: its inventory variables and
-e, `inventory_hostname`, `group_names`, the facts gathered on it and what its tasks
registered or set, templates rendered in its own scope. It is read at the moment a task
looks (a host whose play has not gathered facts yet has empty `facts`), which is what makes
the classic "the router lists every replica" template possible:

    backends: "{{ groups['replicas'] | map('extract', hostvars, 'ansible_host') | list }}"

Play variables are not part of another host's view (as in Ansible). Secret-named values of
another host are masked in output like the task host's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from glmops.engine.inventory import Host, Inventory
from glmops.engine.run_state import RunState
from glmops.engine.sessions import SessionPool
from glmops.engine.templating import resolve_variables


def rendered_host(host: Host) -> Host:
    """`host` with its variables as a task sees them before facts: inventory and -e, its name
    and groups, templates rendered in its own scope. Work outside a playbook (the model
    phase) reads these, so a templated `model_dir` means there what it means in deploy."""
    merged = {**host.vars, "inventory_hostname": host.name, "group_names": host.groups}
    resolved = resolve_variables(merged, where=f"host '{host.name}'")
    return replace(host, vars=resolved)


class HostVars(Mapping[str, dict[str, Any]]):
    """Every inventory host's variables by name, built on lookup (a Mapping, so Jinja's
    `hostvars['web1'].port`, `hostvars.keys()` and `map('extract', hostvars, ...)` work)."""

    def __init__(self, inventory: Inventory, pool: SessionPool, state: RunState):
        self._inventory = inventory
        self._pool = pool
        self._state = state

    def __getitem__(self, name: str) -> dict[str, Any]:
        host = self._inventory.host(name)
        if host is None:
            raise KeyError(name)
        session = self._pool.sessions.get(name)
        merged = {**host.vars, **self._state.options.extra_vars}
        merged.update(
            inventory_hostname=host.name,
            group_names=host.groups,
            facts=(session.facts if session else None) or {},
        )
        if session is not None:
            merged.update(session.registered)
        resolved = resolve_variables(merged, where=f"hostvars['{name}']")
        self._state.masker.add_secret_vars(resolved)
        return resolved

    def __iter__(self) -> Iterator[str]:
        return iter(self._inventory.hosts)

    def __len__(self) -> int:
        return len(self._inventory.hosts)

    def __repr__(self) -> str:
        return f"hostvars({', '.join(self._inventory.hosts)})"


def groups_of(inventory: Inventory) -> dict[str, list[str]]:
    """`groups`: each group's hosts by name, `all` included (a fresh copy per task)."""
    return {name: list(members) for name, members in inventory.groups.items()}
