"""What a run shows: task lines and logs on stderr, diffs and the recap on stdout.

With --json, stdout carries one JSON event per line instead (task results, diffs, the recap),
for machines; stderr still carries the human log. `glmops facts --json` and `status --json`
write the same kind of lines (`event_line`): one schema, versioned by its `schema` field.
Output that is not a terminal is never cut to a width: tables take the width they need.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from glmops.engine.results import HostTally, PlayRecap, Status, TaskResult
from glmops.engine.runlog import Masker

#: The JSON event schema: every line is an object with `schema`, `event` and `time`.
SCHEMA = "glmops.event/1"


def event_line(kind: str, **fields: Any) -> str:
    """One JSON event (one line) of the documented schema."""
    event = {"schema": SCHEMA, "event": kind, "time": round(time.time(), 3), **fields}
    return json.dumps(event, default=str, sort_keys=False)


class _Console(Console):
    """rich's console, but a line of text to a file that shows no colour (a log, a pipe) is
    written as rich would write it, without rich's layout pass: that takes a millisecond or
    more a line, and a run on a large fleet prints thousands of lines."""

    def print(self, *objects: Any, style: Any = None, **kwargs: Any) -> None:
        plain = not kwargs.keys() - {"markup"} and kwargs.get("markup", True)
        if plain and len(objects) == 1 and isinstance(objects[0], str) and self._as_is():
            text = Text.from_markup(objects[0], emoji=self._emoji)
            text.expand_tabs(self.tab_size)
            line = text.plain + "\n"
            with self._lock:
                self.file.write(line)
            return
        super().print(*objects, style=style, **kwargs)

    def _as_is(self) -> bool:
        """No colour, no recording, no capture: rich would write the text alone."""
        return self.color_system is None and not self.record and self._buffer_index == 0


def console(file: TextIO) -> Console:
    """A rich console for `file`; when it is not a terminal, wide enough never to cut a table."""
    try:
        interactive = file.isatty()
    except (AttributeError, ValueError):
        interactive = False
    width = None if interactive else 100_000
    return _Console(file=file, highlight=False, soft_wrap=True, width=width)


STYLE = {
    Status.OK: "green",
    Status.CHANGED: "yellow",
    Status.FAILED: "red",
    Status.SKIPPED: "cyan",
    Status.UNREACHABLE: "bold red",
}


class Reporter:
    def __init__(
        self,
        masker: Masker,
        *,
        verbosity: int = 0,
        json_events: bool = False,
        check: bool = False,
        explain: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ):
        self.masker = masker
        self.verbosity = verbosity
        self.json_events = json_events
        self.check = check
        self.explain = explain
        self.out = console(stdout or sys.stdout)
        self.err = console(stderr or sys.stderr)
        self._lock = threading.Lock()
        #: host -> (task, masked message) of the first task that failed there and was not
        #: ignored: what a RunResult tells callers (the fleet, `glmops up`) about each host.
        self.failures: dict[str, tuple[str, str]] = {}

    def _event(self, kind: str, **fields: Any) -> None:
        if self.json_events:
            line = event_line(kind, **fields)
            with self._lock:
                self.out.file.write(self.masker.mask(line) + "\n")
                self.out.file.flush()

    def play(self, name: str, hosts: list[str]) -> None:
        self._event("play", name=name, hosts=hosts)
        with self._lock:
            self.err.print(f"[bold]PLAY {name}[/] [dim]({len(hosts)} host(s))[/]")

    def batch(self, play: str, index: int, count: int, hosts: list[str]) -> None:
        """A serial batch of a play starts (`serial:`): which hosts, and which of how many."""
        self._event("batch", play=play, index=index, count=count, hosts=hosts)
        with self._lock:
            self.err.print(f"[bold]BATCH {index}/{count}[/] {_escape(', '.join(hosts))}")

    def note(self, message: str, host: str | None = None) -> None:
        self._event("note", host=host, msg=message)
        with self._lock:
            prefix = f"[{host}] " if host else ""
            self.err.print(f"[dim]{_escape(prefix + self.masker.mask(message))}[/]")

    def task_start(self, host: str, task: str, source: str, *, handler: bool = False) -> None:
        """A task starts on a host: a line now, so a long task is never silent."""
        self._event("task_start", host=host, task=task, source=source, handler=handler)
        with self._lock:
            kind = "handler " if handler else ""
            self.err.print(f"[dim]{'start':>12} {host} {kind}{_escape(task)}[/]")

    def task(
        self,
        host: str,
        task: str,
        result: TaskResult,
        *,
        handler: bool = False,
        source: str | None = None,
        duration: float | None = None,
    ) -> None:
        msg = self.masker.mask(result.msg)
        diff = self.masker.mask(result.diff) if result.diff else None
        if result.failed and not result.ignored:
            with self._lock:
                self.failures.setdefault(host, (task, msg))
        self._event(
            "handler" if handler else "task",
            host=host,
            delegate=result.delegate,
            task=task,
            status=result.status.value,
            msg=msg,
            diff=diff,
            ignored=result.ignored,
            explain=result.data.get("explain") or [],
            source=source,
            duration=None if duration is None else round(duration, 3),
            rc=result.data.get("rc"),
        )
        label = result.status.value + (" (ignored)" if result.ignored else "")
        if self.check and result.status is Status.CHANGED:
            label = "would change"
        kind = "handler " if handler else ""
        shown = f"{host} -> {result.delegate}" if result.delegate else host
        with self._lock:
            self.err.print(
                f"[{STYLE[result.status]}]{label:>12}[/] [bold]{_escape(shown)}[/] {kind}"
                f"{_escape(task)} [dim]— {_escape(msg)}[/]"
            )
            if self.explain or self.verbosity >= 1:
                for line in result.data.get("explain") or []:
                    self.err.print(f"{'':>12} [dim]because[/] {_escape(self.masker.mask(line))}")
            if self.verbosity >= 2:
                self._details(result.data)
            if diff and not self.json_events:
                self.out.print(f"--- diff: {_escape(shown)} / {_escape(task)}", style="bold")
                for line in diff.splitlines():
                    style = (
                        "green" if line.startswith("+") else "red" if line.startswith("-") else None
                    )
                    self.out.print(_escape(line), style=style)

    def item(self, host: str, task: str, label: str, result: TaskResult) -> None:
        """One loop item's line (`loop_control.label` or the item), as Ansible shows each."""
        msg = self.masker.mask(result.msg)
        shown_label = self.masker.mask(label)
        self._event(
            "item",
            host=host,
            task=task,
            item=shown_label,
            status=result.status.value,
            msg=msg,
            rc=result.data.get("rc"),
        )
        status = "would change" if self.check and result.status is Status.CHANGED else None
        with self._lock:
            self.err.print(
                f"[{STYLE[result.status]}]{status or result.status.value:>12}[/] [bold]"
                f"{_escape(host)}[/] {_escape(task)} [dim](item={_escape(shown_label)}) — "
                f"{_escape(msg)}[/]"
            )
            if self.verbosity >= 2:
                self._details(result.data)

    def _details(self, data: dict[str, Any]) -> None:
        """-vv: the command a task ran, its rc, stdout and stderr (and a bug's traceback)."""
        if data.get("cmd"):
            self.err.print(f"{'':>12} [dim]$[/] {_escape(self.masker.mask(str(data['cmd'])))}")
        if data.get("rc") is not None:
            self.err.print(f"{'':>12} [dim]rc={data['rc']}[/]")
        for key in ("stdout", "stderr", "traceback"):
            text = str(data.get(key) or "").rstrip()
            if text:
                self.err.print(f"{'':>12} [dim]{key}:[/]")
                for line in self.masker.mask(text).splitlines():
                    self.err.print(f"{'':>14}{_escape(line)}")

    def recap(
        self,
        tallies: dict[str, HostTally],
        run_dir: str,
        exit_code: int,
        *,
        interrupted: dict[str, str] | None = None,
        plays: list[PlayRecap] | None = None,
    ) -> None:
        self._event(
            "recap",
            hosts={h: vars(t) for h, t in tallies.items()},
            run_dir=run_dir,
            exit_code=exit_code,
            interrupted=interrupted or {},
            plays=[p.event() for p in plays or []],
        )
        for host, where in (interrupted or {}).items():
            with self._lock:
                self.err.print(f"[bold red]interrupted[/] [bold]{host}[/] {_escape(where)}")
        if self.json_events:
            return
        self._batches(plays or [])
        table = Table(
            title="RECAP" + (" (check mode: nothing was changed)" if self.check else ""),
            title_justify="left",
        )
        columns = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")
        for column in ("host", *columns):
            table.add_column(column, justify="left" if column == "host" else "right")
        for host, tally in tallies.items():
            row_style = "red" if tally.failed or tally.unreachable else None
            table.add_row(
                host,
                *(str(getattr(tally, c)) for c in columns),
                style=row_style,
            )
        self.out.print(table)
        self.err.print(f"[dim]logs: {run_dir}[/]")

    def _batches(self, plays: list[PlayRecap]) -> None:
        """Above the table: each play run in batches or stopped early, and why it stopped."""
        for play in plays:
            if len(play.batches) < 2 and not play.stopped:
                continue
            self.out.print(f"PLAY {_escape(play.name)}", style="bold")
            for index, hosts in enumerate(play.batches, 1):
                ran = play.stopped_by_batch is None or index <= play.stopped_by_batch
                state = "" if ran else " (not run)"
                self.out.print(f"  batch {index}/{len(play.batches)}: {', '.join(hosts)}{state}")
            if play.stopped:
                self.out.print(
                    f"  stopped by batch {play.stopped_by_batch}/{len(play.batches)}: "
                    f"{_escape(play.stopped)}",
                    style="red",
                )
                if play.not_reached:
                    self.out.print(f"  never reached: {', '.join(play.not_reached)}", style="red")


#: Characters a terminal acts on (C0 but newline and tab, DEL, C1): what a host or a Hub says
#: must not move the cursor, retitle the window or hide a line (`\x1b[2K`, `\r`).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every terminal control character shown as its Python escape (`\x1b`)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _escape(text: str) -> str:
    """For a rich console line: control characters shown as escapes, markup as text."""
    from rich.markup import escape

    return escape(printable(text))
