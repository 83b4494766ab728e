"""The fan-out scheduler lays a failed pull at the right end: the target's own trouble fails that
target alone, and a source that still answers keeps seeding the others.

The scheduler (glmops.model.fanout.FanOut) runs as it does in `glmops model`; only the hosts'
command channel is scripted: each host answers rsync with the exit code and stderr that rsync
gives in that case, and the probe `true` as a host that is up (or down) answers it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from glmops.engine.connection import CommandResult
from glmops.engine.inventory import Host
from glmops.errors import HostUnreachable
from glmops.model.access import RunKey
from glmops.model.fanout import FanOut, Plan, Target
from glmops.model.manifest import FileEntry, Manifest
from glmops.run import load_inventory

DISK_FULL = (
    'rsync: [receiver] write failed on "/srv/m/weights/a.gguf": No space left on device (28)\n'
    "rsync: [sender] write error: Broken pipe (32)\n"
    "rsync error: error in rsync protocol data stream (code 12) at io.c(848) [receiver=3.2.7]\n"
)
CUT = "ssh: connect to host 10.0.0.2 port 22: Connection timed out\nrsync error: (code 255)\n"


class ScriptedHost:
    """A host's command channel: rsync pulls answer from `pulls` in turn, `true` answers
    while `up`; every command is recorded."""

    def __init__(self, host: Host, pulls: list[tuple[int, str]] | None = None, up: bool = True):
        self.host = host
        self.pulls = list(pulls or [])
        self.up = up
        self.commands: list[str] = []
        self._lock = threading.Lock()

    def run(self, command: str, **_: Any) -> CommandResult:
        with self._lock:
            self.commands.append(command)
            if command == "true":
                if not self.up:
                    raise HostUnreachable(f"{self.host.name}: no answer")
                return CommandResult(command, 0, "", "", 0.0)
            rc, stderr = self.pulls.pop(0) if self.pulls else (0, "")
        stdout = "Total bytes received: 1,000\n" if rc == 0 else ""
        return CommandResult(command, rc, stdout, stderr, 0.1)


def hosts(tmp_path: Path, names: list[str]) -> dict[str, Host]:
    inv = tmp_path / "hosts.yml"
    lines = [f"    {n}: {{address: 10.0.0.{i + 2}}}" for i, n in enumerate(names)]
    inv.write_text("all:\n  hosts:\n" + "\n".join(lines) + "\n")
    return {h.name: h for h in load_inventory(inv).select("all")}


def fan_out(tmp_path: Path, seed: ScriptedHost, targets: list[ScriptedHost]) -> FanOut:
    entry = FileEntry("weights/a.gguf", 1000, "0" * 64, "lfs")
    manifest = Manifest(({"part": "weights", "repo": "a/b", "commit": "c" * 40},), (entry,))
    plan = Plan(manifest, tmp_path, RunKey.generate(), tmp_path / "known_hosts", controller=False)
    seeds = [Target(seed.host.name, seed, "/srv/m", done=True)]  # type: ignore[arg-type]
    wanted = [Target(t.host.name, t, "/srv/m") for t in targets]  # type: ignore[arg-type]
    return FanOut(plan, wanted, seeds, lambda kind, **info: None)


def test_a_target_whose_disk_is_full_fails_alone_and_the_seed_keeps_seeding(
    tmp_path: Path,
) -> None:
    found = hosts(tmp_path, ["seed", "full", "fine"])
    seed = ScriptedHost(found["seed"])
    full = ScriptedHost(found["full"], [(12, DISK_FULL)])
    fine = ScriptedHost(found["fine"])
    fan = fan_out(tmp_path, seed, [full, fine])
    fan.plan.per_source = 1  # one at a time: "fine" pulls after "full" failed
    done = fan.run()
    assert "seed" not in fan.dead
    assert done["fine"].done and done["fine"].source == "seed"
    assert not done["full"].done and "full cannot take the files" in (done["full"].error or "")
    assert "No space left on device" in (done["full"].error or "")
    assert len([c for c in full.commands if "rsync" in c]) == 1  # a full disk is not retried


def test_a_pull_cut_off_on_the_targets_side_keeps_a_seed_that_still_answers(
    tmp_path: Path,
) -> None:
    found = hosts(tmp_path, ["seed", "cut", "fine"])
    seed = ScriptedHost(found["seed"])
    cut = ScriptedHost(found["cut"], [(255, CUT), (255, CUT), (255, CUT)])
    fine = ScriptedHost(found["fine"])
    fan = fan_out(tmp_path, seed, [cut, fine])
    done = fan.run()
    assert fan.dead == set()  # neither the seed nor "fine", once it seeds too
    probes = seed.commands.count("true") + fine.commands.count("true")
    assert probes == 3 and "true" in seed.commands  # each source asked after each cut-off
    assert done["fine"].done and done["fine"].source == "seed"
    assert not done["cut"].done and "gave up after 3 attempts" in (done["cut"].error or "")
    assert "still answers" in (done["cut"].error or "")


def test_a_seed_that_no_longer_answers_is_dropped(tmp_path: Path) -> None:
    found = hosts(tmp_path, ["seed", "a"])
    seed = ScriptedHost(found["seed"], up=False)
    target = ScriptedHost(found["a"], [(12, "rsync: connection unexpectedly closed\n")])
    fan = fan_out(tmp_path, seed, [target])
    done = fan.run()
    assert fan.dead == {"seed"}
    assert "no source left" in (done["a"].error or ""), done["a"]
