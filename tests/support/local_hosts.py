"""Inventories of local-connection hosts, for running the real engine without SSH: each host
has its own state folder (so its own run lock and pending notifications)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


def local_hosts(
    folder: Path,
    groups: Mapping[str, Sequence[str]],
    *,
    group_vars: Mapping[str, Any] | None = None,
    host_vars: Callable[[str], Mapping[str, Any]] | None = None,
) -> Path:
    """Write `folder/hosts.yml`: `groups` maps a group name to its hosts (`all`: hosts of no
    group), each host `connection: local` with `state_dir: folder/state-<name>` and
    `host_vars(name)`; `group_vars` are the vars of `all`. Returns the file."""

    def hosts(names: Sequence[str]) -> dict[str, Any]:
        return {
            name: {
                "connection": "local",
                "state_dir": str(folder / f"state-{name}"),
                **(host_vars(name) if host_vars else {}),
            }
            for name in names
        }

    top: dict[str, Any] = {}
    if group_vars:
        top["vars"] = dict(group_vars)
    if "all" in groups:
        top["hosts"] = hosts(groups["all"])
    children = {g: {"hosts": hosts(names)} for g, names in groups.items() if g != "all"}
    if children:
        top["children"] = children
    path = folder / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": top}, sort_keys=False))
    return path
