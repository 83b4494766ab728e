"""`glmops deploy` (playbooks/deploy.yml) against a real testbed host (rtx-pro-6000-x8 profile).

The host has a SIMULATED nvidia-smi (8x cc 12.0) and no vLLM: tests/support/vllm_standin.py, a
TEST STAND-IN that is NOT vLLM, is installed as <vllm_venv>/bin/vllm. It prints vLLM's journal
lines and serves /health, /v1/models and a one-token completion, so the unit, the restart-only-
on-change handlers, the backend check and the readiness wait all run for real. The GGUF split
set is synthetic, written with the gguf package; the merge happens on the host.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address
from tests.support.engine import Runner
from tests.support.glmops_cli import run_cli
from tests.support.testbed import booted, host_read

gguf = pytest.importorskip("gguf", reason="gguf is in the test extras")
from tests.support.gguf_models import split_set, write_model  # noqa: E402

pytestmark = pytest.mark.testbed

FIRST_INDEX = 51  # tb51..: this file's own hosts (tb1/tb11/tb31/tb101 belong to others)
HOST = f"tb{FIRST_INDEX}"
VENV = "/opt/glmops-test/vllm-venv"
MODELS = "/srv/models/GLM-5-synthetic"
HF = "/srv/models/GLM-5-hf"
API_KEY = "sk-testbed-4d1f9a7c"  # a throwaway key for a local test host
PROJECT = Path(__file__).resolve().parents[2]
PLAYBOOK = (PROJECT / "playbooks" / "deploy.yml").read_text()
UNIT = "/etc/systemd/system/vllm-glm5.service"
ENV = "/etc/glmops/vllm-glm5.env"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with booted(tmp_path_factory.mktemp("deploy-testbed"), FIRST_INDEX, 1, "rtx-pro-6000-x8") as b:
        yield b


@pytest.fixture(scope="module")
def model(bed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Synthetic split set on the host, and the sha256 of the same tensors written as one file."""
    local = tmp_path_factory.mktemp("gguf")
    first = split_set(local / "split", split_max_tensors=7)
    write_model(local / "ref.gguf")
    put(bed, f"{HF}/config.json", json.dumps({"model_type": "glm_moe_dsa"}).encode())
    put(bed, f"{HF}/tokenizer.json", b"{}")
    for shard in sorted(first.parent.glob("model-*-of-*.gguf")):
        put(bed, f"{MODELS}/{shard.name}", shard.read_bytes())
    put(bed, f"{VENV}/bin/vllm", (PROJECT / "tests/support/vllm_standin.py").read_bytes(), "755")
    bed.exec(HOST, ["ln", "-sf", "/usr/bin/python3", f"{VENV}/bin/python"])
    return {
        "first": f"{MODELS}/{first.name}",
        "merged": f"{MODELS}/model.gguf",
        "ref_sha256": hashlib.sha256((local / "ref.gguf").read_bytes()).hexdigest(),
    }


def put(bed: Testbed, path: str, data: bytes, mode: str = "644") -> None:
    script = f"mkdir -p {os.path.dirname(path)} && cat > {path} && chmod {mode} {path}"
    assert bed.exec(HOST, ["sh", "-c", script], input=data).returncode == 0


@pytest.fixture
def inventory(bed: Testbed, model: dict[str, str], tmp_path: Path) -> Path:
    doc = yaml.safe_load(bed.inventory_path.read_text())
    doc["all"]["vars"].update(
        vllm_venv=VENV,
        vllm_profile="v0_16",  # the stand-in is no real vLLM the facts could detect
        vllm_preflight=False,  # nor one whose selection code the preflight could ask
        gguf_shards=MODELS,
        glm5_hf_config_dir=HF,
        vllm_api_key=API_KEY,
        vllm_ready_timeout_s=60,
        vllm_backend_timeout_s=60,
        vllm_ready_interval_s=0.5,
    )
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def sh(bed: Testbed, script: str) -> str:
    return bed.exec(HOST, ["sh", "-c", script]).stdout.strip()


def main_pid(bed: Testbed) -> str:
    return sh(bed, "systemctl show -p MainPID --value vllm-glm5")


def test_deploy_check_real_then_idempotent(
    run_playbook: Runner, inventory: Path, bed: Testbed, model: dict[str, str]
) -> None:
    check = run_playbook(PLAYBOOK, inventory, check=True, diff=True)
    assert check.exit_code == 3, check.results()
    unit_diff = next(e["diff"] for e in check.results() if e["task"] == "vllm serve unit")
    assert "--tensor-parallel-size 8" in unit_diff and "--dtype float16" in unit_diff
    merge = next(e for e in check.results() if e["task"].startswith("GGUF model files"))
    assert merge["status"] == "changed" and "merge 3 shards" in merge["diff"]
    env_diff = next(e["diff"] for e in check.results() if e["task"].startswith("environment"))
    assert API_KEY not in env_diff and 'VLLM_API_KEY="********"' in env_diff
    assert host_read(bed, HOST, UNIT) is None and host_read(bed, HOST, model["merged"]) is None

    real = run_playbook(PLAYBOOK, inventory)
    assert real.exit_code == 0, real.results()
    unit = host_read(bed, HOST, UNIT) or ""
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start == (
        f"ExecStart={VENV}/bin/vllm serve {model['merged']} --served-model-name glm-5 "
        f"--host {host_address(FIRST_INDEX)} --port 8000 --tensor-parallel-size 8 --dtype float16 "
        f"--hf-config-path {HF} --tokenizer {HF} --max-model-len 32768"
    )
    assert API_KEY not in unit
    assert sh(bed, f"sha256sum {model['merged']}").split()[0] == model["ref_sha256"]
    assert sh(bed, f"stat -c '%a %U' {ENV}") == "600 root"
    assert f'VLLM_API_KEY="{API_KEY}"' in (host_read(bed, HOST, ENV) or "")
    assert sh(bed, "systemctl is-enabled vllm-glm5; systemctl is-active vllm-glm5") == (
        "enabled\nactive"
    )
    assert real.status("restart vllm") == "changed"
    backend = next(e for e in real.results() if e["task"].startswith("attention backend"))
    assert backend["status"] == "ok" and "TRITON_MLA_SPARSE" in backend["msg"], backend
    assert real.status("ready (/health, /v1/models lists the model, one token)") == "ok"
    assert API_KEY not in json.dumps(real.events)
    assert not [p for p in real.run_dir.rglob("*") if p.is_file() and API_KEY in p.read_text()]
    record = json.loads(host_read(bed, HOST, "/var/lib/glmops/deploy/vllm-glm5.last-deploy.json"))
    assert record["backend"] == "TRITON_MLA_SPARSE"

    pid = main_pid(bed)
    again = run_playbook(PLAYBOOK, inventory)
    assert again.exit_code == 0 and again.changed() == 0, [
        e for e in again.results() if e["status"] != "ok"
    ]
    assert main_pid(bed) == pid, "vLLM was restarted although nothing changed"


def test_restart_only_on_change(run_playbook: Runner, inventory: Path, bed: Testbed) -> None:
    assert run_playbook(PLAYBOOK, inventory).exit_code == 0
    pid = main_pid(bed)
    changed = run_playbook(PLAYBOOK, inventory, extra=["vllm_max_model_len=16384"])
    assert changed.exit_code == 0, changed.results()
    assert changed.status("vllm serve unit") == "changed"
    assert changed.status("restart vllm") == "changed"
    assert main_pid(bed) != pid
    assert "--max-model-len 16384" in (host_read(bed, HOST, UNIT) or "")
    pid = main_pid(bed)
    env_only = run_playbook(
        PLAYBOOK, inventory, extra=["vllm_max_model_len=16384", 'vllm_env={"EXTRA_SETTING": "1"}']
    )
    assert env_only.exit_code == 0 and env_only.changed() == 2, env_only.results()
    assert main_pid(bed) != pid
    pid = main_pid(bed)
    same = run_playbook(
        PLAYBOOK, inventory, extra=["vllm_max_model_len=16384", 'vllm_env={"EXTRA_SETTING": "1"}']
    )
    assert same.exit_code == 0 and same.changed() == 0 and main_pid(bed) == pid


def test_no_backend_stops_the_deploy_with_reasons_and_artifacts(
    run_playbook: Runner, inventory: Path, bed: Testbed
) -> None:
    failed = run_playbook(
        PLAYBOOK, inventory, extra=['vllm_env={"GLMOPS_STANDIN_NO_BACKEND": "1"}']
    )
    assert failed.exit_code == 2
    event = next(e for e in failed.results() if e["task"].startswith("attention backend"))
    assert event["status"] == "failed"
    assert "no valid attention backend" in event["msg"]
    assert "FLASHMLA_SPARSE: [compute capability not supported]" in event["msg"]
    folder = Path(event["msg"].rsplit("Artifacts in ", 1)[1])
    assert folder.is_relative_to(failed.run_dir)
    journal = (folder / "journal.txt").read_text()
    assert "No valid attention backend found" in journal
    assert "SIMULATED" in (folder / "nvidia-smi.txt").read_text().upper()
    assert (folder / "pip-freeze.txt").exists()
    assert API_KEY not in "".join(p.read_text() for p in folder.iterdir())
    assert "ready" not in {e["task"].split(" ")[0] for e in failed.results()}


def test_wrong_backend_fails(run_playbook: Runner, inventory: Path) -> None:
    wrong = run_playbook(
        PLAYBOOK, inventory, extra=['vllm_env={"GLMOPS_STANDIN_BACKEND": "TRITON_MLA"}']
    )
    assert wrong.exit_code == 2
    event = next(e for e in wrong.results() if e["task"].startswith("attention backend"))
    assert "selected TRITON_MLA, expected TRITON_MLA_SPARSE" in event["msg"], event


def test_preflight_refusal_stops_before_any_restart(
    run_playbook: Runner, inventory: Path, bed: Testbed
) -> None:
    """With the preflight on, the stand-in venv (no vLLM, no torch) picks no backend: refused."""
    assert run_playbook(PLAYBOOK, inventory).exit_code == 0
    pid = main_pid(bed)
    refused = run_playbook(
        PLAYBOOK, inventory, extra=["vllm_preflight=true", "vllm_max_model_len=8192"]
    )
    assert refused.exit_code == 2
    event = next(e for e in refused.results() if e["task"].startswith("selection preflight"))
    assert event["status"] == "failed" and "could not ask vLLM" in event["msg"]
    assert "restart vllm" not in {e["task"] for e in refused.results()}
    assert main_pid(bed) == pid and "--max-model-len 32768" in (host_read(bed, HOST, UNIT) or "")


def test_invalid_split_set_is_refused_before_anything_changes(
    run_playbook: Runner, inventory: Path, bed: Testbed, model: dict[str, str]
) -> None:
    sh(bed, f"mkdir -p /srv/broken && cp {MODELS}/model-0000[12]-of-00003.gguf /srv/broken/")
    broken = run_playbook(PLAYBOOK, inventory, extra=["gguf_shards=/srv/broken"])
    assert broken.exit_code == 2
    event = broken.results()[-1]
    assert event["task"].startswith("GGUF model files") and event["status"] == "failed"
    assert "missing 1 of 3 shards: model-00003-of-00003.gguf" in event["msg"]


def test_status_and_verify_report_truthfully(
    run_playbook: Runner,
    inventory: Path,
    bed: Testbed,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """status and verify on a deployed host, then on the same host drifted by hand."""
    from glmops.cli.status import collect

    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GLMOPS_RUN_DIR", str(tmp_path / "runs"))
    assert run_playbook(PLAYBOOK, inventory).exit_code == 0
    code, rows = collect(inventory, HOST)
    row = rows[0]
    assert code == 0 and row["host"] == HOST, rows
    assert row["gpus"] == "8× cc 12.0" and row["unit"] == "active/enabled"
    assert row["health"] == "200" and row["backend"] == "TRITON_MLA_SPARSE (expected)"
    assert row["model"] == "3 shards, merged + verified"
    assert row["patches"] == "missing" and row["last_deploy"] != "-"
    assert row["drift"] == [], row["drift"]

    verify = verify_cli(inventory, tmp_path)
    assert verify["test_unit_enabled_and_active"] == "passed"
    assert verify["test_port_listening"] == "passed"
    assert verify["test_health_200"] == "passed"
    assert verify["test_selected_backend_as_expected"] == "passed"
    assert verify["test_gpu_count"] == "passed"
    # Truthful about what the testbed lacks: no nvidia kernel module, no real vLLM, no patches.
    assert verify["test_driver_loaded"] == "failed"
    assert verify["test_vllm_version_and_profile"] == "failed"
    assert verify["test_patch_manifest_matches_files"] == "failed"

    sh(
        bed,
        f"sed -i 's/--max-model-len 32768/--max-model-len 4096/' {UNIT} && "
        "systemctl daemon-reload && systemctl stop vllm-glm5",
    )
    _code, rows = collect(inventory, HOST)
    drift = "\n".join(rows[0]["drift"])
    assert "unit flags: host has 4096; inventory wants 32768" in drift, drift
    assert "unit: inactive/enabled" in drift and rows[0]["health"] == "down"
    verify = verify_cli(inventory, tmp_path)
    assert verify["test_unit_enabled_and_active"] == "failed"
    assert verify["test_health_200"] == "failed"
    healed = run_playbook(PLAYBOOK, inventory)
    assert healed.exit_code == 0 and healed.status("vllm serve unit") == "changed"
    assert collect(inventory, HOST)[1][0]["drift"] == []


def verify_cli(inventory: Path, tmp_path: Path) -> dict[str, str]:
    """`glmops verify --json` in a subprocess (it runs pytest itself): {check: outcome}."""
    import subprocess
    import sys

    env = {**os.environ, "GLMOPS_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "glmops.cli", "verify", "-i", str(inventory), HOST, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            results[entry["check"].split("[")[0]] = entry["outcome"]
    assert results, proc.stdout + proc.stderr
    return results


def test_cleanup_standin_is_not_left_running(bed: Testbed) -> None:
    """Stop the stand-in so the module's testbed goes down clean (runs last in this file)."""
    sh(bed, "systemctl disable --now vllm-glm5 || true")
    assert sh(bed, "systemctl is-active vllm-glm5 || true") != "active"


def test_up_on_a_converged_host_changes_nothing(inventory: Path, tmp_path: Path) -> None:
    """`glmops up` runs the deploy phase to convergence; a second `up` finds it done, and
    after --restart the phase runs again and changes nothing."""
    env = {
        **os.environ,
        "GLMOPS_HOME": str(tmp_path / "home"),
        "GLMOPS_RUN_DIR": str(tmp_path / "runs"),
    }
    args = ("up", HOST, "-i", str(inventory), "--skip", "provision,patch,model,verify")

    def up(*more: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        code, events, stderr = run_cli(*args, *more, env=env, cwd=PROJECT, timeout=600)
        assert code == 0, stderr[-3000:]
        [summary] = [e for e in events if e.get("event") == "up"]
        return summary["hosts"][HOST], [e for e in events if e.get("event") == "task"]

    first, tasks = up()
    assert first["deploy"]["status"] in ("ok", "changed") and tasks, first
    again, tasks = up()
    assert again["deploy"]["status"] == "done" and tasks == [], again
    rerun, tasks = up("--restart")
    assert rerun["deploy"] == {"status": "ok", "changed": 0, "msg": ""}, rerun
    assert tasks and not [t for t in tasks if t["status"] == "changed"], tasks
