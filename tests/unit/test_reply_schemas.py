"""Each helper's reply schema against what the helper really answers: run here as a host runs
it (run_helper_here), every key of the reply must be one its TypedDict declares, and the keys
it requires must be there. mypy checks the controller's reads against the schema; this checks
the schema against the writer."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from glmops.engine.context import run_helper_here
from glmops.hosthelpers import (
    facts_probe,
    file_digests,
    gguf_split,
    model_fetch,
    model_files,
    python_venv,
    vllm_drain,
    wait_for,
)
from glmops.testbed.facts_fixtures import probe_simulated
from glmops.testbed.profiles import GPU_PROFILES
from tests.support.gguf_models import split_set

FACTS_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"


def conforms(reply: Mapping[str, Any], schema: Any, *, also: tuple[str, ...] = ()) -> None:
    """`reply` has only keys `schema` declares, all that it requires, and `also`."""
    declared = schema.__required_keys__ | schema.__optional_keys__
    assert set(reply) <= declared, f"{schema.__name__} lacks {sorted(set(reply) - declared)}"
    wanted = schema.__required_keys__ | set(also)
    assert wanted <= set(reply), f"reply lacks {sorted(wanted - set(reply))}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_facts_probe_reply_and_its_parts(tmp_path: Path) -> None:
    reply = probe_simulated(next(iter(GPU_PROFILES)))
    conforms(reply, facts_probe.FactsReply)
    conforms(reply["kernel"], facts_probe.KernelInfo)
    conforms(reply["python"], facts_probe.PythonInfo)
    conforms(reply["kernel_module"], facts_probe.KernelModuleInfo)
    for part, schema in (("os", facts_probe.OsRelease), ("disk", facts_probe.DiskInfo)):
        if reply[part] is not None:
            conforms(reply[part], schema)
    assert reply["gpus"], "the simulated nvidia-smi lists GPUs"
    for gpu in reply["gpus"]:
        conforms(gpu, facts_probe.GpuInfo)


@pytest.mark.parametrize("fixture", sorted(FACTS_FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_facts_fit_the_schema(fixture: Path) -> None:
    """The fixtures the GPU policy tests read were recorded from the probe on real hosts."""
    facts = json.loads(fixture.read_text())
    conforms(facts, facts_probe.FactsReply)
    if facts["venv"]:
        conforms(facts["venv"], facts_probe.VenvInfo)
    for gpu in facts["gpus"] or ():
        conforms(gpu, facts_probe.GpuInfo)


def test_small_helpers(tmp_path: Path) -> None:
    there = tmp_path / "a.json"
    there.write_text("{}")
    digests = run_helper_here("file_digests", {"paths": [str(there), str(tmp_path / "gone")]})
    conforms(digests, file_digests.DigestsReply)
    assert digests["digests"][str(tmp_path / "gone")] is None

    waited = run_helper_here("wait_for", {"port": closed_port(), "timeout": 0.2, "sleep": 0.1})
    conforms(waited, wait_for.WaitReply)
    assert waited["failed"]

    drained = run_helper_here("vllm_drain", {"port": closed_port(), "timeout": 1})
    conforms(drained, vllm_drain.DrainReply, also=("held", "waited_s"))
    assert drained["held"] is None

    fetched = run_helper_here("model_fetch", {"model_dir": str(tmp_path), "files": []})
    conforms(fetched, model_fetch.FetchReply)

    venv = {"venv": str(tmp_path / "venv"), "python": "3.12", "uv_version": "0.0.1"}
    planned = run_helper_here("python_venv", {**venv, "uv_dir": str(tmp_path), "check": True})
    conforms(planned, python_venv.VenvReply, also=tuple(python_venv.VenvReply.__annotations__))
    assert planned["changed"] and not (tmp_path / "venv").exists()


def test_model_files_modes(tmp_path: Path) -> None:
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "w.bin").write_bytes(b"weights")
    files = [["part/w.bin", 7]]
    room = run_helper_here(
        "model_files", {"mode": "preflight", "model_dir": str(tmp_path), "files": files}
    )
    conforms(room, model_files.RoomReply)
    manifest = {"files": [{"path": "part/w.bin", "size": 7, "sha256": "0" * 64}]}
    request = {"model_dir": str(tmp_path), "manifest": manifest, "digest": "d", "check": True}
    verified = run_helper_here("model_files", {"mode": "verify", **request})
    conforms(verified, model_files.VerifyReply)
    assert verified["bad"] == ["part/w.bin"]
    stat = {"mode": "stat", "model_dir": str(tmp_path), "files": files, "digest": "d"}
    conforms(run_helper_here("model_files", stat), model_files.StatReply)


def test_gguf_split_modes(tmp_path: Path) -> None:
    first = str(split_set(tmp_path / "in", split_max_tensors=7))
    output = str(tmp_path / "in" / "model.gguf")
    checked = run_helper_here("gguf_split", {"mode": "validate", "path": first})
    conforms(checked, gguf_split.ValidateReply, also=("first_shard", "shards", "merged_size"))
    for shard in checked["shards"]:
        conforms(shard, gguf_split.ShardInfo)
    merge = {"mode": "merge", "path": first, "output": output}
    planned = run_helper_here("gguf_split", {**merge, "check": True, "free_margin_bytes": 0})
    conforms(planned, gguf_split.MergeReply, also=("size", "free_bytes", "replaces_bytes"))
    merged = run_helper_here("gguf_split", merge)
    conforms(merged, gguf_split.MergeReply, also=("output", "copy_mode", "elapsed_s"))
    again = run_helper_here("gguf_split", merge)
    conforms(again, gguf_split.MergeReply, also=("skipped",))
    verify = {"mode": "verify", "path": output, "sha256": True}
    verified = run_helper_here("gguf_split", verify)
    conforms(verified, gguf_split.VerifyReply, also=("content_sha256", "tensor_count"))
    removal = {"mode": "remove_shards", "path": first, "output": output}
    conforms(run_helper_here("gguf_split", removal), gguf_split.RemoveReply, also=("freed_bytes",))
    kept = run_helper_here("gguf_split", {"mode": "merged_only", "path": first, "output": output})
    conforms(kept, gguf_split.MergedOnlyReply, also=("shards", "hashed_bytes"))
