"""`glmops model` on real testbed hosts: a real Hub server (olah), rsync over SSH between hosts.

The controller fetches a small synthetic GGUF split set and the base repo's config from olah,
then the hosts fill each other as a tree. Faults: one flipped byte on one host, a disk too small
(a tmpfs as model_dir's filesystem), and a seed host cut off while it serves another host.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from glmops.engine.connection import ConnectionSettings
from glmops.engine.output import Reporter
from glmops.engine.runlog import Masker, RunLog
from glmops.model.phase import ModelOptions, run_model_phase
from glmops.run import load_inventory
from glmops.testbed import Testbed
from tests.support.glmops_cli import run_cli, tasks_named
from tests.support.hub_server import HubRepo, olah_server
from tests.support.testbed import booted

pytestmark = pytest.mark.testbed

FIRST_INDEX = 161  # tb161..tb163: this file's own hosts
HOSTS = [f"tb{FIRST_INDEX + i}" for i in range(3)]
MODEL_DIR = "/srv/models/GLM-5"
TOKEN = "hf_fanouttesttoken_51c0aa9e"  # made up: must never show anywhere
SHARDS = {
    f"UD-Q4_K_XL/GLM-5-UD-Q4_K_XL-{i:05d}-of-00003.gguf": random.Random(i).randbytes(12_000_000)
    for i in (1, 2, 3)
}
CONFIG = {"config.json": b'{"model_type": "glm_moe_dsa"}\n', "tokenizer.json": b"{}" * 900}
SOURCE = {
    "repo": "unsloth-test/GLM-5-GGUF",
    "revision": "main",
    "include": ["UD-Q4_K_XL/*"],
    "config": {"repo": "zai-test/GLM-5"},
}
EXPECTED = {f"weights/{k}": v for k, v in SHARDS.items()} | {
    f"config/{k}": v for k, v in CONFIG.items()
}


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    # internet: forwarding between the hosts' namespaces, so the hosts reach each other
    with booted(tmp_path_factory.mktemp("model-bed"), FIRST_INDEX, 3, internet=True) as b:
        yield b


@pytest.fixture(scope="module")
def hub(bed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # on the first host's link, so that host can fetch from it too when it is the seed
    address = f"10.231.{FIRST_INDEX}.1"
    with olah_server(tmp_path_factory.mktemp("hub"), address) as (endpoint, mirrors):
        weights = HubRepo(mirrors, SOURCE["repo"])
        for name, data in SHARDS.items():
            weights.put(name, data)
        weights.commit()
        base = HubRepo(mirrors, SOURCE["config"]["repo"])
        for name, data in CONFIG.items():
            base.put(name, data)
        base.commit()
        yield endpoint


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The controller's glmops home and model cache, shared by the tests of this file."""
    return tmp_path_factory.mktemp("controller")


def inventory(bed: Testbed, home: Path, **host_vars: dict[str, Any]) -> Path:
    doc = yaml.safe_load(bed.inventory_path.read_text())
    doc["all"]["vars"].update(
        model_source=SOURCE,
        model_dir=MODEL_DIR,
        hf_token=TOKEN,
        gguf_needs_single_file=False,
        model_disk_margin_bytes=1_000_000,
    )
    for host, values in host_vars.items():
        hosts = next(g["hosts"] for g in _groups(doc) if host in (g.get("hosts") or {}))
        hosts[host] = {**hosts[host], **values}
    path = home / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _groups(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack = [doc["all"]]
    while stack:
        group = stack.pop()
        yield group
        stack.extend((group.get("children") or {}).values())


def env(hub: str, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_ENDPOINT": hub,
        "GLMOPS_HOME": str(home),
        "GLMOPS_MODEL_CACHE": str(home / "cache"),
        "GLMOPS_RUN_DIR": str(home / "runs"),
        "PYTHONPATH": str(Path.cwd()),
    }


def sha256_on(bed: Testbed, host: str, root: str = MODEL_DIR) -> dict[str, str]:
    out = bed.exec(host, ["sh", "-c", f"cd {root} && find weights config -type f | sort"])
    names = out.stdout.split()
    sums = bed.exec(host, ["sh", "-c", f"cd {root} && sha256sum {' '.join(names)}"]).stdout
    return {line.split()[1]: line.split()[0] for line in sums.splitlines()}


def expected_sums() -> dict[str, str]:
    return {path: hashlib.sha256(data).hexdigest() for path, data in EXPECTED.items()}


def no_keys_left(bed: Testbed) -> None:
    for host in HOSTS:
        keys = bed.exec(host, ["sh", "-c", "cat /root/.ssh/authorized_keys"]).stdout
        assert "glmops-fanout" not in keys, host
        assert bed.exec(host, ["test", "-e", "/run/glmops-fanout"]).returncode != 0, host


def run_model(hub: str, home: Path, inv: Path, *args: str, ok=(0,)):
    return run_cli(
        "model", "-i", str(inv), *args, env=env(hub, home), cwd=Path.cwd(), timeout=600, ok=ok
    )


def test_tree_fanout_verified_no_keys_left_and_second_run_changes_nothing(
    bed: Testbed, hub: str, home: Path
) -> None:
    inv = inventory(bed, home)
    code, events, stderr = run_model(hub, home, inv, "--check", ok=(3,))
    assert code == 3, stderr[-3000:]
    assert {e["status"] for e in tasks_named(events, "model files")} == {"changed"}
    for host in HOSTS:  # check mode: not a byte, not a key on any host
        assert bed.exec(host, ["test", "-e", MODEL_DIR]).returncode != 0, host
        assert bed.exec(host, ["test", "-e", "/run/glmops-fanout"]).returncode != 0, host

    code, events, stderr = run_model(hub, home, inv, "--per-source", "1")
    assert code == 0, stderr[-3000:]
    results = {e["host"]: e for e in tasks_named(events, "model files")}
    assert {h: results[h]["status"] for h in HOSTS} == dict.fromkeys(HOSTS, "changed")
    for host in HOSTS:
        assert sha256_on(bed, host) == expected_sums(), host
    sources = [e["msg"].split()[2].rstrip(":") for e in results.values()]
    assert "controller" in sources and any(s in HOSTS for s in sources), sources
    notes = " ".join(e["msg"] for e in events if e["event"] == "note")
    assert "fan-out: bytes each source sent" in notes
    no_keys_left(bed)
    # the token never shows: not in the output, the run directory or on the hosts
    run_files = [p for p in (home / "runs").rglob("*") if p.is_file()]
    assert run_files
    assert all(TOKEN not in p.read_text(errors="replace") for p in run_files)
    assert TOKEN not in stderr and TOKEN not in json.dumps(events)
    for host in HOSTS:
        grep = bed.exec(host, ["grep", "-rl", TOKEN, MODEL_DIR, "/root", "/run"])
        assert grep.stdout == "", host

    code, events, stderr = run_model(hub, home, inv)
    assert code == 0, stderr[-3000:]
    again = {e["host"]: e["status"] for e in tasks_named(events, "model files")}
    assert again == dict.fromkeys(HOSTS, "ok")
    assert "copying from" not in stderr


def test_a_flipped_byte_and_a_truncated_file_are_detected_and_fetched_again(
    bed: Testbed, hub: str, home: Path
) -> None:
    inv = inventory(bed, home)
    assert run_model(hub, home, inv)[0] == 0
    shard = f"{MODEL_DIR}/weights/{next(iter(SHARDS))}"
    flip = (
        f"import os; f = open({shard!r}, 'r+b'); f.seek(4096); b = f.read(1); f.seek(4096); "
        "f.write(bytes([b[0] ^ 1])); f.close()"
    )
    assert bed.exec(HOSTS[1], ["python3", "-c", flip]).returncode == 0
    assert sha256_on(bed, HOSTS[1]) != expected_sums()
    truncate = ["truncate", "-s", "100", f"{MODEL_DIR}/config/tokenizer.json"]
    assert bed.exec(HOSTS[2], truncate).returncode == 0
    code, events, stderr = run_model(hub, home, inv)
    assert code == 0, stderr[-3000:]
    status = {e["host"]: e["status"] for e in tasks_named(events, "model files")}
    assert status == {HOSTS[0]: "ok", HOSTS[1]: "changed", HOSTS[2]: "changed"}
    assert sha256_on(bed, HOSTS[1]) == expected_sums()
    assert sha256_on(bed, HOSTS[2]) == expected_sums()
    no_keys_left(bed)


def test_a_disk_too_small_is_refused_before_any_transfer(
    bed: Testbed, hub: str, home: Path
) -> None:
    """50 MB hold the 36 MB of files but not the merged file a single-file vLLM needs too."""
    small = "/srv/small"
    mount = f"mkdir -p {small} && mount -t tmpfs -o size=50m tmpfs {small}"
    assert bed.exec(HOSTS[2], ["sh", "-c", mount]).returncode == 0
    try:
        host_vars = {"model_dir": f"{small}/GLM-5", "gguf_needs_single_file": True}
        inv = inventory(bed, home, **{HOSTS[2]: host_vars})
        code, events, stderr = run_model(hub, home, inv, ok=(2,))
        assert code == 2
        result = next(e for e in tasks_named(events, "model files") if e["host"] == HOSTS[2])
        assert result["status"] == "failed"
        merged = sum(len(d) for d in SHARDS.values())
        for word in (HOSTS[2], small, "needs", "free", f"+ {merged} for the merged file"):
            assert word in result["msg"], result["msg"]
        assert "nothing was copied" in result["msg"]
        assert bed.exec(HOSTS[2], ["ls", "-A", small]).stdout == ""  # not a byte moved
        others = {e["host"]: e["status"] for e in tasks_named(events, "model files")}
        assert others[HOSTS[0]] == others[HOSTS[1]] == "ok"  # the others are not held back
    finally:
        bed.exec(HOSTS[2], ["umount", small])


def test_seed_cut_off_mid_fanout_others_finish_from_another_source(
    bed: Testbed, hub: str, home: Path, tmp_path: Path
) -> None:
    root = "/srv/models/fresh"
    inv = inventory(bed, home)
    hosts = load_inventory(inv, {"model_dir": root}).select("all")
    cut: list[str] = []

    def cut_when_bytes_arrive(source: str, target: str) -> None:
        """Take the source's link down once the target holds part of a shard: mid-file."""
        probe = f"ls -A {root}/weights/UD-Q4_K_XL 2>/dev/null | grep -q ."
        deadline = time.monotonic() + 60
        while bed.exec(target, ["sh", "-c", probe]).returncode != 0:
            if time.monotonic() > deadline:
                return
        link = f"vh{FIRST_INDEX + HOSTS.index(source)}"
        subprocess.run(["ip", "link", "set", link, "down"], check=True)

    def on_event(kind: str, host: str, source: str, **_: Any) -> None:
        if kind == "transfer" and source in HOSTS and not cut:  # the first peer-to-peer copy
            cut.append(source)
            threading.Thread(target=cut_when_bytes_arrive, args=(source, host)).start()

    masker = Masker()
    out, err = io.StringIO(), io.StringIO()
    reporter = Reporter(masker, json_events=True, stdout=out, stderr=err)
    options = ModelOptions(
        per_source=1,
        cache_root=home / "cache",
        on_event=on_event,
        connection=ConnectionSettings(known_hosts=home / "known_hosts"),
    )
    os.environ["HF_ENDPOINT"] = hub
    try:
        results = run_model_phase(hosts, reporter, RunLog(tmp_path, masker), masker, options)
    finally:
        os.environ.pop("HF_ENDPOINT")
        for source in cut:
            subprocess.run(["ip", "link", "set", f"vh{FIRST_INDEX + HOSTS.index(source)}", "up"])
    assert cut, "no host served another: the tree never formed"
    dead = cut[0]
    for host in HOSTS:
        assert results[host].status.value == "changed", (host, results[host].msg, err.getvalue())
        assert sha256_on(bed, host, root) == expected_sums(), host
    assert "trying another source" in err.getvalue(), err.getvalue()
    assert results[dead].data["source"] == "controller"  # it was the first, then the seed
    assert "could not remove this run's key from: " + dead in err.getvalue()
    # the next run removes the key the cut-off host kept, and changes nothing else
    code, events, stderr = run_model(hub, home, inv, "-e", f"model_dir={root}")
    assert code == 0, stderr[-3000:]
    assert {e["status"] for e in tasks_named(events, "model files")} == {"ok"}
    no_keys_left(bed)


def test_a_seed_host_fetches_from_the_hub_and_the_controller_sends_nothing(
    bed: Testbed, hub: str, home: Path
) -> None:
    root = "/srv/models/seeded"
    inv = inventory(bed, home)
    args = ("-e", f"model_dir={root}", "--seed", HOSTS[0], "--per-source", "1")
    code, events, stderr = run_model(hub, home, inv, *args)
    assert code == 0, stderr[-3000:]
    results = {e["host"]: e for e in tasks_named(events, "model files")}
    assert results[HOSTS[0]]["msg"].startswith("fetched from the Hub (seed)")
    for host in HOSTS[1:]:
        assert results[host]["status"] == "changed"
        assert "from controller" not in results[host]["msg"], results[host]["msg"]
    for host in HOSTS:
        assert sha256_on(bed, host, root) == expected_sums(), host
    note = next(e["msg"] for e in events if "bytes each source sent" in e.get("msg", ""))
    assert "controller" not in note and HOSTS[0] in note
    assert all(TOKEN not in p.read_text(errors="replace") for p in (home / "runs").rglob("*.log"))
    no_keys_left(bed)
