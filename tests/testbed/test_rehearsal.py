"""The dress rehearsal: `glmops up` from the Hub to a started vLLM, on two simulated GPU hosts.

Two testbed hosts with the rtx-pro-6000-x8 profile (a SIMULATED nvidia-smi: 8x compute
capability 12.0; no real GPU, no NVIDIA driver). tb141's venv holds the real vLLM 0.16.0
wheel, tb142's vLLM 0.33.0 with vllm-gguf-plugin, each beside the CPU torch
(tests/support/vllm_venvs.py) and the few packages `vllm serve` imports that the CPU
wheelhouse lacks (vllm_wheels.SERVE_DEPS), so vLLM's own code runs until it looks for the
GPU. A real Hub server (olah, tests/support/hub_server.py) serves a synthetic GLM-5 GGUF in 10
shards with glm-dsa tensor names, and a base repo with the config and tokenizer files. One
`glmops up` (provision left out: the venvs are built above) fetches, fans out, patches,
merges on the 0.16 host only, asks vLLM's own selector for (12.0, float16), renders the unit
with the seeds' flags and starts it; vLLM then stops for lack of a GPU, and glmops says so
with the journal's tail. A second `glmops up` changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glmops.testbed import Testbed
from tests.support.engine import Runner
from tests.support.glmops_cli import run_cli, tasks_named
from tests.support.model_hub import hub_env, hub_inventory, split_gguf_hub
from tests.support.testbed import booted
from tests.support.vllm_venvs import install_with_torch
from tests.support.vllm_wheels import PLUGIN, PLUGIN_VERSION, fetch_serve_deps, fetch_wheel

gguf = pytest.importorskip("gguf", reason="gguf is in the test extras")

pytestmark = [pytest.mark.testbed, pytest.mark.wheels]

PROJECT = Path(__file__).resolve().parents[2]
FIRST_INDEX = 141  # tb141, tb142: this file's own hosts
V016, V033 = f"tb{FIRST_INDEX}", f"tb{FIRST_INDEX + 1}"
VERSIONS = {V016: "0.16.0", V033: "0.33.0"}
LAYOUTS = {V016: "v0_16", V033: "v0_33"}
VENV = "/opt/vllm"
MODEL_DIR = "/srv/models/GLM-5"
SHARDS = f"{MODEL_DIR}/weights/UD-Q4_K_XL"
FIRST = f"{SHARDS}/GLM-5-UD-Q4_K_XL-00001-of-00010.gguf"
MERGED = f"{SHARDS}/GLM-5-UD-Q4_K_XL.gguf"
CONFIG_DIR = f"{MODEL_DIR}/config"
UNIT = "/etc/systemd/system/vllm-glm5.service"
MANIFEST = f"{VENV}/lib/python3.11/.glmops-patch/manifest.json"
SOURCE = {
    "repo": "unsloth-rehearsal/GLM-5-GGUF",
    "revision": "main",
    "include": ["UD-Q4_K_XL/*"],
    "config": {"repo": "zai-rehearsal/GLM-5"},
}
#: GLM-5's attention and MoE shape as vLLM reads it from the base repo's config.json.
HF_CONFIG = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "kv_lora_rank": 512,
    "q_lora_rank": 2048,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "index_topk": 2048,
    "num_hidden_layers": 3,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    # internet: forwarding between the hosts' namespaces, so the hosts seed each other
    with booted(
        tmp_path_factory.mktemp("rehearsal"), FIRST_INDEX, 2, "rtx-pro-6000-x8", internet=True
    ) as b:
        yield b


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """olah serving the 10 shards and the base repo's config and tokenizer; (its endpoint,
    {shard name: sha256})."""
    base = {
        "config.json": json.dumps(HF_CONFIG).encode(),
        "tokenizer.json": json.dumps({"model": {"type": "BPE"}}).encode(),
        "tokenizer_config.json": b'{"tokenizer_class": "PreTrainedTokenizerFast"}',
    }
    work = tmp_path_factory.mktemp("hub-work")
    with split_gguf_hub(work, SOURCE, base, split_max_tensors=2) as (endpoint, shards):
        assert len(shards) == 10
        yield endpoint, {s.name: hashlib.sha256(s.read_bytes()).hexdigest() for s in shards}


def inventory(bed: Testbed, home: Path) -> Path:
    # vLLM cannot start without a GPU: systemd would retry it in an hour, not in 30 s
    return hub_inventory(
        bed, home, SOURCE, model_dir=MODEL_DIR, vllm_venv=VENV, vllm_restart_sec=3600
    )


def up(hub: str, home: Path, inv: Path) -> tuple[int, list[dict[str, Any]], str]:
    args = ("up", "-i", str(inv), "--skip", "provision")
    return run_cli(*args, env=hub_env(hub, home), cwd=PROJECT, timeout=1200, ok=(2,))


def summary(events: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    [event] = [e for e in events if e.get("event") == "up"]
    return event["hosts"]


def host_text(bed: Testbed, host: str, path: str) -> str:
    out = bed.exec(host, ["cat", path])
    assert out.returncode == 0, f"{host}: {path}: {out.stderr}"
    return out.stdout


def test_up_from_the_hub_to_a_started_vllm_that_stops_for_lack_of_a_gpu(
    bed: Testbed,
    hub: tuple[str, dict[str, str]],
    cpu_wheelhouse: Path,
    run_playbook: Runner,
    tmp_path: Path,
) -> None:
    endpoint, shard_sums = hub
    serve_deps = tuple(fetch_serve_deps())
    plugin = fetch_wheel(PLUGIN, PLUGIN_VERSION)
    for host, version in VERSIONS.items():
        extra = (*serve_deps, plugin) if host == V033 else serve_deps
        install_with_torch(
            run_playbook,
            bed.inventory_path,
            cpu_wheelhouse,
            version,
            host=host,
            venv=VENV,
            extra=extra,
        )
    inv = inventory(bed, tmp_path)
    code, events, stderr = up(endpoint, tmp_path, inv)
    assert code == 2, stderr[-4000:]
    table = summary(events)
    for host in (V016, V033):
        row = table[host]
        assert [row[p]["status"] for p in ("patch", "model")] == ["changed", "changed"], row
        assert row["deploy"]["status"] == "failed" and "verify" not in row, row
        msg = row["deploy"]["msg"]
        print(f"{host}: deploy failed as it should: {msg}")  # shown with pytest -s
        assert msg.startswith("task 'attention backend vLLM selected"), msg
        assert "vLLM stopped for lack of a GPU: " in msg, msg
        assert "journal tail:" in msg, msg
        # patched for its own layout, and the manifest says which
        manifest = json.loads(host_text(bed, host, MANIFEST))
        assert manifest["profile"] == LAYOUTS[host]
        # vLLM's own selector, asked before the start, picked the patched backend
        [pre] = [e for e in tasks_named(events, "selection preflight") if e["host"] == host]
        assert pre["status"] == "ok" and "would select TRITON_MLA_SPARSE" in pre["msg"], pre
        # the seeds' flags on the unit's command line
        unit = host_text(bed, host, UNIT)
        exec_start = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
        model = MERGED if host == V016 else FIRST
        assert exec_start.startswith(f"ExecStart={VENV}/bin/vllm serve {model} "), exec_start
        for flag in (
            "--tensor-parallel-size 8",
            "--dtype float16",
            f"--hf-config-path {CONFIG_DIR}",
            f"--tokenizer {CONFIG_DIR}",
        ):
            assert flag in exec_start, (flag, exec_start)
        # the 10 shards from the Hub, verified on arrival
        sums = bed.exec(host, ["sh", "-c", f"cd {SHARDS} && sha256sum *-of-00010.gguf"]).stdout
        assert {ln.split()[1]: ln.split()[0] for ln in sums.splitlines()} == shard_sums
        # vLLM itself ran and said why it stopped
        journal = bed.exec(host, ["journalctl", "-u", "vllm-glm5", "--no-pager"]).stdout
        assert "RuntimeError: Failed to infer device type" in journal
        assert "for lack of a GPU" not in journal  # glmops' words, not vLLM's
        assert any(line.strip() in journal for line in msg.splitlines()[-3:]), msg
    # merged only where the 0.16 loader needs one file
    merged = [bed.exec(h, ["test", "-f", MERGED]).returncode == 0 for h in (V016, V033)]
    assert merged == [True, False]
    assert "TRITON_MLA_SPARSE" in json.dumps(events)

    code, events, stderr = up(endpoint, tmp_path, inv)
    assert code == 2, stderr[-4000:]
    again = summary(events)
    for host in (V016, V033):
        assert {p: again[host][p]["status"] for p in ("patch", "model")} == {
            "patch": "done",
            "model": "done",
        }, again[host]
        assert again[host]["deploy"]["status"] == "failed"
        assert "vLLM stopped for lack of a GPU" in again[host]["deploy"]["msg"]
    tasks = [e for e in events if e.get("event") in ("task", "handler")]
    assert tasks and [e for e in tasks if e["status"] == "changed"] == [], tasks
