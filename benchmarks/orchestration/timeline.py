#!/usr/bin/env python3
"""One glmops run's wall-clock timeline: where a no-op's time goes, per phase and per host.

Not a test: a profiling aid for benchmarks/orchestration (issue 48). Runs `glmops ARGS...`
in this process with the engine's phase functions wrapped to record when each started and
ended, on which thread; prints a summary and, with `--json PATH`, writes every span.
`GLMOPS_TIMELINE_T0` (the launcher's time.time() just before it started this process) makes
Python's own start-up visible; without it, time counts from this script's first line.

  python3 benchmarks/orchestration/timeline.py --json /tmp/t.json -- run play.yml -i hosts.yml
"""

from __future__ import annotations

import time

STARTED = time.time()

import argparse  # noqa: E402
import atexit  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

T0 = float(os.environ.get("GLMOPS_TIMELINE_T0") or STARTED)
SPANS: list[dict[str, Any]] = []
#: Every held command's text (the run lock's, with what rides along), to replay host-side.
COMMANDS: list[str] = []
MARKS: list[tuple[str, float]] = [("python started, script running", STARTED - T0)]


def now() -> float:
    return time.time() - T0


def mark(label: str) -> None:
    MARKS.append((label, now()))


def wrap(owner: Any, name: str, label: Callable[..., str]) -> None:
    """Record every call of `owner.name` as a span labelled `label(*args)`."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def traced(*args: Any, **kwargs: Any) -> Any:
        start = now()
        try:
            return original(*args, **kwargs)
        finally:
            SPANS.append(
                {
                    "what": label(*args, **kwargs),
                    "thread": threading.current_thread().name,
                    "start": round(start, 4),
                    "end": round(now(), 4),
                }
            )

    setattr(owner, name, traced)


def instrument() -> None:
    import glmops.cli.main  # noqa: F401

    mark("click and the CLI imported")
    import glmops.run as facade

    mark("the run facade imported (engine, jinja, yaml, rich)")
    from glmops.engine import prefetch, sessions
    from glmops.engine.connection import SSHConnection
    from glmops.engine.executor import Executor
    from glmops.engine.openssh import OpenSSHConnection

    def first(text: str) -> str:
        return " ".join(text.split())[:60]

    def keep(text: str) -> str:
        COMMANDS.append(text)
        return first(text)

    wrap(facade, "load_inventory", lambda *a, **k: "inventory load")
    wrap(facade, "load_playbook", lambda *a, **k: "playbook load")
    wrap(facade, "open_output", lambda *a, **k: "output open")
    wrap(Executor, "run", lambda *a, **k: "executor run")
    for cls in (SSHConnection, OpenSSHConnection):
        wrap(cls, "open", lambda self, *a, **k: f"connect {self.host}")
        wrap(cls, "run", lambda self, cmd, *a, **k: f"round trip {self.host}: {first(cmd)}")
        wrap(cls, "close", lambda self, *a, **k: f"close {self.host}")
        wrap(cls, "hold", lambda self, cmd, *a, **k: f"held {self.host}: {keep(cmd)}")
    wrap(sessions.SessionPool, "connect", lambda self, play, s, *a, **k: f"session {s.host.name}")
    wrap(prefetch, "run_ahead", lambda *a, **k: f"checks ahead {a[5].host.name}")


def report(path: str | None) -> None:
    mark("exit")
    if path:
        with open(path, "w") as out:
            json.dump({"marks": MARKS, "spans": SPANS, "held": COMMANDS}, out, indent=1)
    lines = [f"{at:7.3f}  {label}" for label, at in MARKS]
    lines += [
        f"{s['start']:7.3f} {s['end']:7.3f} {s['end'] - s['start']:6.3f}  {s['what']}"
        for s in sorted(SPANS, key=lambda s: s["start"])
    ]
    print("\n".join(lines), file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the spans here")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    instrument()
    atexit.register(report, options.json)
    from glmops.cli.main import main as command_line

    sys.argv = ["glmops", *args]
    command_line(prog_name="glmops")


if __name__ == "__main__":
    main()
