"""What `--syntax-check`, `--list-tasks` and `--list-hosts` print: a playbook, run nothing."""

from __future__ import annotations

from pathlib import Path

from glmops.engine import batches
from glmops.engine.inventory import Inventory
from glmops.engine.nodes import Include, Play, Task, walk_nodes


def syntax_ok(playbook: Path, plays: list[Play]) -> str:
    tasks = sum(len(p.all_tasks()) for p in plays)
    return f"playbook: {playbook}: syntax ok ({len(plays)} play(s), {tasks} task(s) and handlers)"


def list_tasks(playbook: Path, plays: list[Play], tags: set[str], skip_tags: set[str]) -> str:
    lines = [f"playbook: {playbook}"]
    for play in plays:
        lines.append(f"  play '{play.name}' (hosts: {play.hosts})")
        for task in walk_nodes(play.tasks):
            if isinstance(task, Include):
                if task.selected(tags, skip_tags):
                    what = f"{task.kind} {task.target}, at run time"
                    lines.append(f"    {task.name}  ({what}, {_at(playbook, task)})")
                continue
            if not task.implicit and task.selected(tags, skip_tags):
                shown_tags = f"  TAGS: [{', '.join(task.tags)}]" if task.tags else ""
                lines.append(f"    {task.name}  ({task.module}, {_at(playbook, task)}){shown_tags}")
        for handler in play.handlers:
            lines.append(
                f"    handler {handler.name}  ({handler.module}, {_at(playbook, handler)})"
            )
    return "\n".join(lines)


def _at(playbook: Path, task: Task | Include) -> str:
    """Where a task is written: its line, and its file when not the playbook (a role's, an
    imported file's)."""
    if Path(task.source) == playbook:
        return f"line {task.line}"
    source = Path(task.source)
    shown = (
        source.relative_to(playbook.parent) if source.is_relative_to(playbook.parent) else source
    )
    return f"{shown}:{task.line}"


def list_hosts(inventory: Inventory, plays: list[Play], limit: str | None) -> str:
    allowed = {h.name for h in inventory.select(limit)} if limit else None
    lines = []
    for play in plays:
        hosts = [h.name for h in inventory.select(play.hosts)]
        hosts = [h for h in hosts if allowed is None or h in allowed]
        lines.append(f"play '{play.name}' ({len(hosts)} host(s)):")
        split = batches.split(hosts, play.serial)
        if len(split) > 1:  # `serial`: the batches the play will roll through, in order
            for index, batch in enumerate(split, 1):
                lines.append(f"  batch {index}/{len(split)}: {', '.join(batch)}")
            continue
        lines += [f"  {name}" for name in hosts]
    return "\n".join(lines)
