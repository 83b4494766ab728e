"""The host's run lock, on this machine (`connection: local`), with real flock(1)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.engine import runlock
from glmops.engine.connect import open_connection
from glmops.engine.connection import ConnectionSettings
from glmops.engine.context import RemoteInfo, TaskContext
from glmops.engine.inventory import load_inventory
from glmops.engine.runlog import Masker, RunLog

RUN = {"pid": 4242, "controller": "ctl", "user": "ops", "started": "t0", "run": "/runs/a"}


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[TaskContext]:
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"all:\n  hosts:\n    me: {{connection: local, state_dir: {tmp_path}/s}}\n")
    [host] = load_inventory(inv).select("all")
    conn = open_connection(host.name, host.connection, ConnectionSettings())
    masker = Masker(set())
    remote = RemoteInfo(uid=os.getuid(), home=str(Path.home()), python=None)
    yield TaskContext(host, conn, remote, RunLog(tmp_path / "runs", masker), masker)
    conn.close()


def test_a_holder_not_yet_named_is_waited_for_not_mistaken_for_a_stranger(
    ctx: TaskContext, tmp_path: Path
) -> None:
    """The moment between a run taking the lock and writing who it is: a second connection of
    the same run, asking then, must not be refused (nor told the previous holder's name)."""
    lock = tmp_path / "s" / "run-me.lock"
    lock.parent.mkdir()
    about = Path(f"{lock}.info")
    about.write_text('{"pid": 1, "controller": "old", "run": "/runs/old"}\n')  # the last holder
    # The first connection of run RUN, caught between taking the lock and naming itself, as
    # acquire's own script does it: the guard, the lock, then (one second later) the info.
    holder = subprocess.Popen(
        [
            "sh",
            "-c",
            f"exec 9>>{lock} 8>>{about}; flock 8; flock 9; echo taken; sleep 1; "
            f"printf '%s\\n' '{runlock.json.dumps(RUN)}' > {about}; exec 8>&-; exec sleep 60",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "taken\n"
        release = runlock.acquire(ctx, RUN)  # the same run: let through, holds nothing
        release()
        stranger = {**RUN, "pid": 77, "run": "/runs/b"}
        with pytest.raises(runlock.HostLocked, match="pid 4242 on controller ctl"):
            runlock.acquire(ctx, stranger)
    finally:
        holder.kill()
        holder.wait()
    taken = runlock.acquire(ctx, {**RUN, "pid": 77})  # the holder gone: the lock is free
    try:
        assert '"pid": 77' in about.read_text()
    finally:
        taken()
