"""`glmops up` with `gguf_remove_shards: true`, from the Hub to a served host, on one testbed host.

tb231 has the rtx-pro-6000-x8 profile (a SIMULATED nvidia-smi) and, as its vLLM, the TEST
STAND-IN tests/support/vllm_standin.py (NOT vLLM: it checks the model file is a GGUF and
serves). A real Hub server (olah, tests/hub_server.py) serves a real split GGUF set. The model
phase fetches and copies it, deploy merges (layout v0_16 reads one file), verifies the merged
file's sha256 against the shards' merge and only then removes the shards. A re-run that runs
every phase again (`--restart`) fetches nothing and changes nothing; a merged file corrupted
after the shards went is found by a plain re-run (its size and mtime no longer match its
sidecar), deleted by the model phase, the shards are fetched and copied again, and deploy
merges and removes them anew. The verify phase runs the host checks, which fail on
this host (the stand-in is no vLLM the facts can see), and says which.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glmops.testbed import Testbed
from tests.support.glmops_cli import run_cli, tasks_named
from tests.support.model_hub import hub_env, hub_inventory, split_gguf_hub
from tests.support.testbed import booted

gguf = pytest.importorskip("gguf", reason="gguf is in the test extras")

pytestmark = pytest.mark.testbed

PROJECT = Path(__file__).resolve().parents[2]
FIRST_INDEX = 231  # tb231: this file's own host
HOST = f"tb{FIRST_INDEX}"
VENV = "/opt/glmops-test/vllm-venv"
MODEL_DIR = "/srv/models/GLM-5"
SHARDS = f"{MODEL_DIR}/weights/UD-Q4_K_XL"
MERGED = f"{SHARDS}/GLM-5-UD-Q4_K_XL.gguf"
SOURCE = {
    "repo": "unsloth-shards/GLM-5-GGUF",
    "revision": "main",
    "include": ["UD-Q4_K_XL/*"],
    "config": {"repo": "zai-shards/GLM-5"},
}


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with booted(tmp_path_factory.mktemp("shards-bed"), FIRST_INDEX, 1, "rtx-pro-6000-x8") as b:
        standin = (Path(__file__).parents[1] / "support" / "vllm_standin.py").read_bytes()
        script = f"mkdir -p {VENV}/bin && cat > {VENV}/bin/vllm && chmod 755 {VENV}/bin/vllm"
        assert b.exec(HOST, ["sh", "-c", script], input=standin).returncode == 0
        b.exec(HOST, ["ln", "-sf", "/usr/bin/python3", f"{VENV}/bin/python"])
        yield b


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """olah serving a 3-shard split set and the base repo's config; (endpoint, shard names)."""
    base = {
        "config.json": json.dumps({"model_type": "glm_moe_dsa"}).encode(),
        "tokenizer.json": b"{}",
    }
    work = tmp_path_factory.mktemp("hub-work")
    with split_gguf_hub(work, SOURCE, base, split_max_tensors=7) as (endpoint, shards):
        yield endpoint, [s.name for s in shards]


def inventory(bed: Testbed, home: Path) -> Path:
    return hub_inventory(
        bed,
        home,
        SOURCE,
        model_dir=MODEL_DIR,
        gguf_remove_shards=True,
        vllm_venv=VENV,
        vllm_profile="v0_16",  # the stand-in is no real vLLM the facts could detect
        vllm_preflight=False,  # nor one whose selection code the preflight could ask
        vllm_ready_timeout_s=60,
        vllm_backend_timeout_s=60,
        vllm_ready_interval_s=0.5,
    )


def up(endpoint: str, home: Path, inv: Path, *extra: str) -> tuple[dict[str, Any], list[Any]]:
    args = ("up", "-i", str(inv), "--skip", "provision,patch", *extra)
    env = hub_env(endpoint, home)
    code, events, stderr = run_cli(*args, env=env, cwd=PROJECT, timeout=600, ok=(2,))
    assert code == 2, stderr[-3000:]  # the verify phase fails: see test_ below
    [table] = [e for e in events if e.get("event") == "up"]
    return table["hosts"][HOST], events


def sh(bed: Testbed, script: str) -> str:
    return bed.exec(HOST, ["sh", "-c", script]).stdout.strip()


def cached_files(home: Path) -> list[Path]:
    return [p for p in (home / "cache").rglob("files/**/*") if p.is_file()]


def test_shards_removed_after_a_verified_merge_then_nothing_refetched_until_corrupt(
    bed: Testbed, hub: tuple[str, list[str]], tmp_path: Path
) -> None:
    endpoint, names = hub
    inv = inventory(bed, tmp_path)
    row, events = up(endpoint, tmp_path, inv)
    assert (row["model"]["status"], row["deploy"]["status"]) == ("changed", "changed"), row
    [merge] = tasks_named(events, "GGUF model files")
    assert f"removed {len(names)} shards after verifying" in merge["msg"], merge
    assert sh(bed, f"ls {SHARDS}") == "GLM-5-UD-Q4_K_XL.gguf\nGLM-5-UD-Q4_K_XL.gguf.glmops.json"
    sidecar = json.loads(sh(bed, f"cat {MERGED}.glmops.json"))
    merged_sha = sh(bed, f"sha256sum {MERGED}").split()[0]
    assert sidecar["output"]["sha256"] == merged_sha and sidecar["shards_removed"] == names
    assert f"ExecStart={VENV}/bin/vllm serve {MERGED} " in sh(bed, "systemctl cat vllm-glm5")
    # the verify phase ran the host checks and says which failed
    assert row["verify"]["status"] == "failed", row
    assert row["verify"]["msg"].startswith("host checks failed: test_"), row["verify"]
    assert "test_vllm_version_and_profile" in row["verify"]["msg"]  # the stand-in is no vLLM
    assert f"`glmops verify {HOST}`" in row["verify"]["msg"]
    pid = sh(bed, "systemctl show -p MainPID --value vllm-glm5")

    row, events = up(endpoint, tmp_path, inv)  # continues: only the verify phase runs
    assert (row["model"]["status"], row["deploy"]["status"]) == ("done", "done"), row

    shutil.rmtree(tmp_path / "cache" / next(iter(os.listdir(tmp_path / "cache"))) / "files")
    row, events = up(endpoint, tmp_path, inv, "--restart")  # every phase checks again
    assert row["model"]["status"] == "ok", row
    assert f"{len(names)} shards held by their verified merge" in row["model"]["msg"], row
    assert row["deploy"]["status"] == "ok", row
    tasks = [e for e in events if e.get("event") in ("task", "handler")]
    changed = [e for e in tasks if e["status"] == "changed"]
    assert changed == [], changed
    assert cached_files(tmp_path) == []  # nothing fetched from the Hub
    assert sh(bed, f"ls {SHARDS} | grep -c -- -of-") == "0"  # nor copied to the host
    assert sh(bed, "systemctl show -p MainPID --value vllm-glm5") == pid  # nor restarted

    sh(bed, f"printf '\\377' | dd of={MERGED} bs=1 seek=$(($(stat -c %s {MERGED})-1)) conv=notrunc")
    assert sh(bed, f"sha256sum {MERGED}").split()[0] != merged_sha
    row, events = up(endpoint, tmp_path, inv)  # a plain re-run looks at the files again
    model = row["model"]
    assert model["status"] == "changed" and "copied from controller" in model["msg"], row
    [dropped] = [e for e in events if e.get("event") == "note" and "no longer matches" in e["msg"]]
    assert MERGED in dropped["msg"] and dropped["host"] == HOST, dropped
    assert len(cached_files(tmp_path)) == len(names) + 2  # fetched again: shards and config
    assert row["deploy"]["status"] == "changed", row
    [merge] = tasks_named(events, "GGUF model files")
    assert merge["msg"].startswith("merged ") and f"removed {len(names)} shards" in merge["msg"]
    assert sh(bed, f"sha256sum {MERGED}").split()[0] == merged_sha
    assert sh(bed, f"ls {SHARDS} | grep -c -- -of-") == "0"
