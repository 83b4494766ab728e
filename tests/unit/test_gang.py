"""A gang restarts as one: the verdict from its members' states, the serve flags of a member,
and `glmops status` on a gang with a dead member (pure: no host)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from glmops.cli.status import GangSeen, gang_status
from glmops.errors import ModuleError
from glmops.fleet.gang import (
    Board,
    MemberState,
    composition,
    observe_command,
    parse_observation,
    verdict,
)
from glmops.fleet.multinode import member_plan
from glmops.gpu.facts import parse_facts
from glmops.gpu.serving import ServeError, serve_flags
from glmops.gpu.serving.flags import CPU_CLI
from glmops.modules.vllm_gang_restart import VllmGangRestart
from glmops.run import load_inventory

INVENTORY = """
all:
  children:
    serving:
      hosts:
        solo: {address: 10.0.0.9}
        w1: {address: 10.0.1.2, replica: big, node_rank: 1}
        h0: {address: 10.0.1.1, replica: big}
"""
CPU = {
    "vllm_venv": "/opt/vllm",
    "glm5_hf_config_dir": "/m",
    "vllm_model": "/m",
    "vllm_device": "cpu",
}


@pytest.fixture
def replica(tmp_path: Path) -> dict:
    path = tmp_path / "hosts.yml"
    path.write_text(textwrap.dedent(INVENTORY))
    inventory = load_inventory(path)
    assert inventory.hosts["solo"].vars["fleet_replica"]["members"] == [
        {"host": "solo", "address": "10.0.0.9", "rank": 0}
    ]
    return inventory.hosts["w1"].vars["fleet_replica"]


def started(replica: dict, host: str, rank: int, **change: object) -> MemberState:
    """A member running the process its gang restart started (then `change`d)."""
    record = {
        "invocation": f"inv-{host}",
        "config": "c1",
        "generation": "run1",
        "members": composition(replica),
    }
    fields = {
        "host": host,
        "rank": rank,
        "active": "active/running",
        "invocation": f"inv-{host}",
        "record": record,
        "config": "c1",
    }
    fields.update(change)
    return MemberState(**fields)  # type: ignore[arg-type]


def test_inventory_gives_each_member_its_replica(replica: dict) -> None:
    assert replica["name"] == "big" and composition(replica) == [
        "0:h0@10.0.1.1",
        "1:w1@10.0.1.2",
    ]
    head, worker = member_plan(replica, "h0", 29501), member_plan(replica, "w1", 29501)
    assert head["is_head"] and head["nodes"] == 2 and "--headless" not in head["args"]
    assert worker["args"][-1] == "--headless" and worker["rank"] == 1


def test_a_whole_gang_needs_no_restart_and_a_dead_member_degrades_it(replica: dict) -> None:
    whole = {"h0": started(replica, "h0", 0), "w1": started(replica, "w1", 1)}
    assert not verdict(replica, whole).needs_restart
    dead = {**whole, "w1": started(replica, "w1", 1, active="failed/failed")}
    judged = verdict(replica, dead)
    assert judged.needs_restart and judged.degraded == (
        "w1 (rank 1): not running (unit failed/failed)",
    )
    alone = {**whole, "w1": started(replica, "w1", 1, invocation="inv-new")}
    assert "restarted on its own" in verdict(replica, alone).degraded[0]
    changed = {**whole, "h0": started(replica, "h0", 0, config="c2")}
    judged = verdict(replica, changed)
    assert judged.needs_restart and not judged.degraded and judged.stale
    fresh = {h: started(replica, h, r, record=None) for h, r in (("h0", 0), ("w1", 1))}
    assert len(verdict(replica, fresh).degraded) == 2
    other_run = dict(whole["w1"].record or {}, generation="run0")
    split = {**whole, "w1": started(replica, "w1", 1, record=other_run)}
    assert verdict(replica, split).needs_restart
    assert verdict(replica, {"h0": whole["h0"]}).unobserved == ("w1",)


def test_observation_round_trip_and_board(tmp_path: Path, replica: dict) -> None:
    command = observe_command("vllm-glm5", "/d/vllm-glm5.gang.json", ["/etc/u", "/etc/e"])
    assert "systemctl show vllm-glm5" in command and "sha256sum /etc/u /etc/e" in command
    output = (
        "ActiveState=active\nSubState=running\nInvocationID=abc\nNeedDaemonReload=no\n"
        '--- glmops gang ---\n{"invocation": "abc", "config": "x"}\n\n--- glmops gang ---\n'
        "1111  /etc/u\n2222  /etc/e\n"
    )
    state = parse_observation("w1", 1, output, with_config=True)
    assert (
        state.running
        and state.invocation == "abc"
        and state.record
        == {
            "invocation": "abc",
            "config": "x",
        }
    )
    again = parse_observation("w1", 1, output.replace("2222", "3333"), with_config=True)
    assert again.config != state.config, "a changed file changes the digest"
    broken = parse_observation("w1", 1, output.replace('{"inv', "{inv"), with_config=False)
    assert broken.record is None and broken.config is None
    board = Board(tmp_path)
    board.publish("big", state)
    assert board.read("big") == {"w1": state} and board.read("other") == {}


def test_tensor_parallel_may_span_the_gang() -> None:
    gang = {"nodes": 2, "rank": 1, "args": ["--nnodes", "2", "--headless"], "env": {"A": "1"}}
    config = serve_flags(
        parse_facts({}), {**CPU, "vllm_tensor_parallel_size": 2, "vllm_gang": gang}
    )
    argv = " ".join(config.argv)
    assert "--tensor-parallel-size 2" in argv and argv.endswith("--nnodes 2 --headless")
    assert config.argv[1:4] == ["-c", CPU_CLI, "serve"], "--headless needs vLLM's own CLI"
    assert config.env["A"] == "1"
    with pytest.raises(ServeError, match="only 1"):
        serve_flags(parse_facts({}), {**CPU, "vllm_tensor_parallel_size": 4, "vllm_gang": gang})
    with pytest.raises(ServeError, match="do not split evenly"):
        serve_flags(parse_facts({}), {**CPU, "vllm_tensor_parallel_size": 3, "vllm_gang": gang})
    default = serve_flags(parse_facts({}), {**CPU, "vllm_gang": gang})
    assert default.tensor_parallel == 2, "the gang's devices by default"


def test_gpu_gang_share_per_host() -> None:
    facts = parse_facts(
        {"gpus": [{"name": "H200", "compute_cap": "9.0"} for _ in range(8)], "driver": {}}
    )
    gpu = {**CPU, "vllm_device": "cuda", "vllm_dtype": "bfloat16"}
    gang = {"nodes": 2, "args": []}
    assert serve_flags(facts, {**gpu, "vllm_gang": gang}).tensor_parallel == 16
    pp = serve_flags(
        facts,
        {**gpu, "vllm_gang": gang, "vllm_tensor_parallel_size": 8,
         "vllm_pipeline_parallel_size": 2},
    )  # fmt: skip
    assert "--pipeline-parallel-size" in pp.argv
    with pytest.raises(ServeError, match="> 8 GPUs"):
        serve_flags(facts, {**gpu, "vllm_gang": gang, "vllm_tensor_parallel_size": 32})


def test_status_marks_every_member_of_a_gang_with_a_dead_worker(replica: dict) -> None:
    record = {
        "invocation": "inv-h0",
        "config": None,
        "generation": "run1",
        "members": composition(replica),
    }
    head = {"unit": {"ActiveState": "active", "SubState": "running", "InvocationID": "inv-h0"}}
    worker = {"unit": {"ActiveState": "failed", "SubState": "failed", "InvocationID": "inv-w1"}}
    rows = [{"host": "h0", "drift": []}, {"host": "w1", "drift": []}]
    gang_status(
        rows,
        {
            "h0": GangSeen(replica, {**head, "gang_record": record}),
            "w1": GangSeen(replica, {**worker, "gang_record": {**record, "invocation": "inv-w1"}}),
        },
    )
    assert [r["gang"]["state"] for r in rows] == ["degraded", "degraded"]
    assert rows[0]["gang"]["why"] == ["w1 (rank 1): not running (unit failed/failed)"]
    assert rows[1]["gang"]["role"] == "worker" and "glmops deploy" in rows[1]["drift"][0]


def test_one_restart_decision_for_the_whole_gang(tmp_path: Path, replica: dict) -> None:
    """Every member's restart task reads the same board: a whole gang restarts nobody, a dead
    member restarts every member, and a member outside the run stops the restart, named."""
    ctx = SimpleNamespace(log=SimpleNamespace(path=tmp_path))
    board = Board(tmp_path)
    params = {"step": "stop", "replica": replica, "unit": "u", "state_dir": "/d", "user": "v"}
    module = VllmGangRestart({**params, "files": []})
    board.publish("big", started(replica, "h0", 0))
    with pytest.raises(ModuleError, match="w1 is not in this run"):
        board.publish("big", started(replica, "h0", 0, active="failed/failed"))
        module.plan(ctx)  # type: ignore[arg-type]
    board.publish("big", started(replica, "h0", 0))
    board.publish("big", started(replica, "w1", 1))
    assert module.plan(ctx).change is False  # type: ignore[arg-type]
    board.publish("big", started(replica, "w1", 1, active="activating/auto-restart"))
    plan = module.plan(ctx)  # type: ignore[arg-type]
    assert plan.change is True and "w1 (rank 1): not running" in plan.reason
