"""Finding and signalling testbed processes through /proc (no systemd/machined to ask)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import TypeGuard


def alive(pid: int | None) -> TypeGuard[int]:
    """True for a live process; a zombie (PID 1 here may never reap it) counts as dead. True
    also tells the type checker that `pid` is an int."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def ppid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def is_ns_init(pid: int) -> bool:
    """PID 1 of a nested PID namespace (the container's systemd)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                ids = line.split()[1:]
                return len(ids) > 1 and ids[-1] == "1"
    except OSError:
        pass
    return False


def container_init(nspawn_pid: int | None) -> int | None:
    """The guest's PID 1: the child of nspawn that is init of a new PID namespace."""
    if not alive(nspawn_pid):
        return None
    for pid in all_pids():
        if ppid(pid) == nspawn_pid and is_ns_init(pid) and alive(pid):
            return pid
    return None


def find(match) -> list[int]:
    """Live pids whose argv satisfies `match`."""
    return [p for p in all_pids() if alive(p) and match(cmdline(p))]


def terminate(pids: list[int], timeout: float, sig: int = signal.SIGTERM) -> bool:
    """Signal, then wait; True when all are gone within the timeout."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return not any(alive(p) for p in pids)
