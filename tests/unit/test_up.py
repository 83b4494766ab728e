"""glmops.cli.up.converge: phases per host, a re-run continues where the last stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from glmops.cli.up import PHASES, Outcome, Progress, Recheck, converge, exit_code
from glmops.engine.context import run_helper_here
from glmops.engine.inventory import Host
from glmops.run import load_inventory
from tests.support.local_hosts import local_hosts


class Script:
    """A phase runner that answers from a table and records what it was asked to run."""

    def __init__(self, answers: dict[tuple[str, str], Outcome]):
        self.answers = answers
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, phase: str, hosts: list[Host]) -> dict[str, Outcome]:
        self.calls.append((phase, [h.name for h in hosts]))
        return {h.name: self.answers.get((phase, h.name), Outcome("ok")) for h in hosts}


def inventory(folder: Path, h2_x: int = 2) -> list[Host]:
    path = folder / "hosts.yml"
    path.write_text(
        "all:\n  hosts:\n"
        "    h1: {connection: local, x: 1}\n"
        f"    h2: {{connection: local, x: {h2_x}}}\n"
    )
    return load_inventory(path).select("all")


def test_failed_host_stops_and_resumes_where_it_stopped(tmp_path: Path) -> None:
    path = tmp_path / "up.json"
    first = Script({("patch", "h2"): Outcome("failed", "task 'x': boom")})
    summary = converge(inventory(tmp_path), PHASES, first, Progress.load(path))
    assert first.calls[:2] == [("provision", ["h1", "h2"]), ("patch", ["h1", "h2"])]
    assert ("deploy", ["h1"]) in first.calls
    assert summary["deploy"].keys() == {"h1"} and summary["patch"]["h2"].msg == "task 'x': boom"
    assert exit_code(summary) == 2

    again = Script({})
    summary = converge(inventory(tmp_path), PHASES, again, Progress.load(path))
    # h1 converged: only the read-only verify runs; h2 continues at patch
    assert again.calls == [
        ("patch", ["h2"]),
        ("model", ["h2"]),
        ("deploy", ["h2"]),
        ("verify", ["h1", "h2"]),
    ]
    assert summary["provision"]["h2"].status == "done" and exit_code(summary) == 0


def test_a_change_reruns_the_later_phases_and_new_variables_rerun_the_phase(
    tmp_path: Path,
) -> None:
    path = tmp_path / "up.json"
    converge(inventory(tmp_path), PHASES, Script({}), Progress.load(path))
    changed = inventory(tmp_path, h2_x=3)
    script = Script({("provision", "h2"): Outcome("changed", changed=2)})
    converge(changed, PHASES, script, Progress.load(path))
    assert script.calls == [(p, ["h2"]) for p in PHASES[:-1]] + [("verify", ["h1", "h2"])]


def test_check_mode_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "up.json"
    script = Script({("patch", "h1"): Outcome("changed", changed=1)})
    summary = converge(inventory(tmp_path), PHASES, script, Progress.load(path), record=False)
    assert not path.exists()
    assert exit_code(summary, check=True) == 3 and exit_code(summary) == 0


def test_a_run_of_selected_tasks_runs_every_phase_and_records_none_finished(
    tmp_path: Path,
) -> None:
    """--tags/--skip-tags: a converged host runs the phases again (the user asked for those
    tasks), nothing is recorded as finished, and a change still forgets the later phases."""
    path = tmp_path / "up.json"
    converge(inventory(tmp_path), PHASES, Script({}), Progress.load(path))
    before = Progress.load(path).hosts
    playbooks = ("provision", "patch", "deploy")
    script = Script({("patch", "h1"): Outcome("changed", changed=1)})
    converge(inventory(tmp_path), playbooks, script, Progress.load(path), partial=True)
    assert script.calls == [(p, ["h1", "h2"]) for p in playbooks]
    after = Progress.load(path).hosts
    assert after["h2"] == before["h2"]  # unchanged: still converged
    assert after["h1"] == {"provision": before["h1"]["provision"]}
    again = Script({})
    converge(inventory(tmp_path), PHASES, again, Progress.load(path))
    assert again.calls == [(p, ["h1"]) for p in PHASES[1:-1]] + [("verify", ["h1", "h2"])]


def test_a_change_forgets_the_later_phases_that_this_run_skips(tmp_path: Path) -> None:
    """`--skip deploy` with a changed patch: the deploy recorded earlier is stale."""
    path = tmp_path / "up.json"
    converge(inventory(tmp_path), PHASES, Script({}), Progress.load(path))
    progress = Progress.load(path)
    progress.forget("h1", ("patch",))  # as if the patch set had drifted
    script = Script({("patch", "h1"): Outcome("changed", changed=1)})
    converge(inventory(tmp_path), ("provision", "patch"), script, progress)
    assert script.calls == [("patch", ["h1"])]
    assert set(Progress.load(path).hosts["h1"]) == {"provision", "patch"}
    again = Script({})
    converge(inventory(tmp_path), PHASES, again, Progress.load(path))
    assert again.calls == [(p, ["h1"]) for p in ("model", "deploy")] + [("verify", ["h1", "h2"])]


@pytest.mark.parametrize(
    ("flag", "marker"),
    [
        ("--list-tasks", "    vLLM patch set  (vllm_patchset, line"),
        ("--list-hosts", "play 'deploy GLM-5' (1 host(s)):\n  here\n"),
        ("--syntax-check", "deploy.yml: syntax ok ("),
    ],
)
def test_listing_options_answer_for_each_playbook_phase_and_run_nothing(
    local_inventory: Path, tmp_path: Path, flag: str, marker: str
) -> None:
    """As for a playbook verb: each playbook phase lists for the hosts `up` selected, the
    model and verify phases say what they are, nothing runs and no progress is kept."""
    env = {**os.environ, "GLMOPS_HOME": str(tmp_path), "GLMOPS_RUN_DIR": str(tmp_path / "runs")}
    args = [sys.executable, "-m", "glmops.cli", "up", "here", "-i", str(local_inventory), flag]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    headers = [line for line in done.stdout.splitlines() if line.startswith("== glmops up: ")]
    assert headers == [f"== glmops up: {p} (hosts: here)" for p in PHASES]
    assert marker in done.stdout, done.stdout
    assert done.stdout.count("not a playbook, nothing to list") == 2
    assert not (tmp_path / "up").exists() and "UP " not in done.stdout


def test_the_verify_phase_runs_the_host_checks_and_names_those_that_fail(
    local_inventory: Path, tmp_path: Path
) -> None:
    """`glmops up` down to its verify phase, on this machine (no vLLM in a venv): the
    host checks run for real, fail, and the summary names them: with --json stdout is
    nothing but events of the one schema; without it, no JSON at all."""
    import json

    from glmops.engine.output import SCHEMA

    env = {**os.environ, "GLMOPS_HOME": str(tmp_path), "GLMOPS_RUN_DIR": str(tmp_path / "runs")}
    skip = "provision,patch,model,deploy"
    args = [sys.executable, "-m", "glmops.cli", "up", "here", "-i", str(local_inventory)]
    runs = [
        subprocess.run([*args, "--skip", skip, *json_flag], env=env, capture_output=True,
                       text=True, timeout=300)
        for json_flag in ((), ("--json",))
    ]  # fmt: skip
    plain, as_json = runs
    assert plain.returncode == as_json.returncode == 2, as_json.stderr[-3000:]
    assert plain.stdout.startswith("UP ") and "{" not in plain.stdout, plain.stdout
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert all(e["schema"] == SCHEMA and e["time"] > 0 for e in events), events
    [table] = [e for e in events if e.get("event") == "up"]
    assert table["phases"] == ["verify"]
    verify = table["hosts"]["here"]["verify"]
    assert verify["status"] == "failed", verify
    assert verify["msg"].startswith("host checks failed: test_"), verify
    assert "test_vllm_version_and_profile" in verify["msg"]
    assert "`glmops verify here`" in verify["msg"]


def test_a_fleet_router_host_runs_no_phase_gangs_deploy_whole_and_the_router_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`glmops up` on a fleet: the phases' playbooks are recorded instead of run; what runs
    where is the subject (the playbooks themselves run on the testbed)."""
    from glmops.cli import up_phases
    from glmops.cli.up_phases import run_up
    from glmops.errors import ExitCode
    from glmops.fleet.roll import RunOutcome

    monkeypatch.setenv("GLMOPS_RUN_DIR", str(tmp_path / "runs"))
    ran: list[tuple[str, list[str]]] = []

    def playbook(self: object, path: Path, hosts: list[Host], extra: tuple = ()) -> dict:
        ran.append((path.name, [h.name for h in hosts]))
        deploy = path.name == "deploy.yml"
        return {h.name: Outcome("failed" if deploy and h.name == "solo" else "ok") for h in hosts}

    def other(self: object, hosts: list[Host]) -> dict:
        return {h.name: Outcome("ok") for h in hosts}

    def verify(self: object, hosts: list[Host]) -> dict:
        return {h.name: Outcome("failed" if h.name == "g0" else "ok") for h in hosts}

    routed: list[tuple[str, str, dict]] = []
    router_code = [ExitCode.OK]

    def fleet_runner(base: object):
        def run(playbook: Path, limit: str, extra: dict, settings: dict) -> RunOutcome:
            routed.append((playbook.name, limit, extra))
            return RunOutcome(router_code[0])

        return run

    monkeypatch.setattr(up_phases.PhaseRunners, "playbook", playbook)
    monkeypatch.setattr(up_phases.PhaseRunners, "model", other)
    monkeypatch.setattr(up_phases.PhaseRunners, "verify", verify)
    monkeypatch.setattr(up_phases, "fleet_runner", fleet_runner)
    path = tmp_path / "hosts.yml"
    text = (
        "all:\n  vars: {router_host: rt}\n  hosts:\n"
        "    solo: {address: 10.0.0.1}\n"
        "    g0: {address: 10.0.1.1, replica: big}\n"
        "    g1: {address: 10.0.1.2, replica: big, x: %d}\n"
        "    rt: {connection: local}\n"
    )
    path.write_text(text % 1)
    assert run_up(path, "all", opts={}) == 2  # solo's deploy failed
    assert all("rt" not in hosts for _, hosts in ran), ran
    assert ("deploy.yml", ["solo", "g0", "g1"]) in ran
    assert [(r[0], r[1]) for r in routed] == [("router.yml", "rt")]
    # solo's deploy failed: out; g0's host checks failed after its deploy passed its gate: in
    assert routed[0][2]["fleet_workers"] == ["http://10.0.1.1:8000"]
    ran.clear()
    path.write_text(text % 2)  # only g1's variables changed: its gang deploys whole
    router_code[0] = 130  # and the router play is interrupted (SIGINT)
    assert run_up(path, "all", opts={}) == 130
    assert ("deploy.yml", ["solo", "g1", "g0"]) in ran, ran  # g0 was done: it comes along


@dataclass
class ModelHost:
    """A local host whose model phase is done: its files verified against a cached manifest
    and its split set merged, each written by its own writer."""

    hosts: list[Host]
    recheck: Recheck
    shards: list[Path]
    paths: list[str]  # the shards' paths in the manifest
    merge: dict[str, Any]  # gguf_split's arguments

    def merged(self) -> Path:
        return Path(self.merge["output"])


@pytest.fixture
def model_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModelHost:
    """The manifest is written to the controller's cache as `glmops model` writes it, the
    state file by model_files' verify and the merged file and its sidecar by gguf_split's
    merge (both run on this machine as a host runs them)."""
    pytest.importorskip("gguf", reason="gguf is in the test extras")
    from glmops.cli.up_phases import PhaseRunners
    from glmops.model.fetch import ModelCache
    from glmops.model.manifest import write_atomic
    from glmops.model.source import parse_source
    from tests.support.gguf_models import split_set
    from tests.support.model_state import manifest_of, verified

    monkeypatch.setenv("GLMOPS_MODEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GLMOPS_RUN_DIR", str(tmp_path / "runs"))
    source = {"repo": "up-recheck/GLM-5-GGUF", "revision": "c" * 40, "include": ["Q/*"]}
    root = tmp_path / "m"
    path = local_hosts(
        tmp_path,
        {"all": ["h"]},
        host_vars=lambda n: {"model_source": source, "model_dir": str(root)},
    )
    first = split_set(root / "weights" / "Q", split_max_tensors=7)
    shards = sorted(first.parent.glob("model-*-of-*.gguf"))
    manifest = manifest_of(root, shards, source["repo"])
    cache = ModelCache(tmp_path / "cache", parse_source(source, "test"))
    write_atomic(cache.manifest_path, manifest.to_json())
    assert verified(root, manifest)["complete"]
    merge = {"mode": "merge", "path": str(first), "output": str(first.parent / "model.gguf")}
    assert run_helper_here("gguf_split", merge)["changed"]
    runners = PhaseRunners(path, {}, Progress.load(tmp_path / "unused.json"))
    hosts = load_inventory(path).select("all")
    return ModelHost(hosts, runners.recheck, shards, [e.path for e in manifest.files], merge)


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_done_model_phase_is_looked_at_again_and_a_changed_merged_file_reruns_it(
    model_host: ModelHost, tmp_path: Path
) -> None:
    """On every `up`, a host whose model phase is done gets a stat-only look at its files
    (model_files' stat mode): each file as verified, the merged file as its sidecar
    recorded. What fails runs the model phase and the later ones again."""
    hosts, recheck = model_host.hosts, model_host.recheck
    progress = Progress.load(tmp_path / "up.json")
    converge(hosts, PHASES, Script({}), progress)
    again = Script({})
    converge(hosts, PHASES, again, progress, recheck=recheck)
    assert again.calls == [("verify", ["h"])]  # converged: the look found nothing

    flip_last_byte(model_host.merged())
    assert "model.gguf: size or mtime differ" in recheck("model", hosts)["h"]
    rerun = Script({})
    summary = converge(hosts, PHASES, rerun, progress, recheck=recheck)
    assert rerun.calls == [("model", ["h"]), ("deploy", ["h"]), ("verify", ["h"])]
    assert summary["patch"]["h"].status == "done"

    assert run_helper_here("gguf_split", model_host.merge)["changed"]  # as deploy merges anew
    assert recheck("model", hosts) == {}
    model_host.shards[0].unlink()
    assert recheck("model", hosts) == {"h": f"{model_host.paths[0]}: missing"}
    with model_host.shards[1].open("r+b") as f:  # same size, new mtime: the phase hashes it
        f.write(f.read(4))
    assert "not verified against this manifest" in recheck("model", hosts)["h"]


def test_shards_removed_after_the_merge_are_held_while_the_merged_file_is_unchanged(
    model_host: ModelHost,
) -> None:
    removed = run_helper_here("gguf_split", {**model_host.merge, "mode": "remove_shards"})
    assert removed["changed"] and not any(p.exists() for p in model_host.shards)
    assert model_host.recheck("model", model_host.hosts) == {}
    flip_last_byte(model_host.merged())
    why = model_host.recheck("model", model_host.hosts)["h"]
    assert "missing (merged into model.gguf, changed since)" in why


PASSWORD = "Sup3rPW-handed-1"


def up_asking(inventory: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`glmops up -K ARGS` with no terminal: getpass reads the password from stdin, once
    (a second prompt finds stdin at its end and aborts the run)."""
    env = {k: v for k, v in os.environ.items() if k != "GLMOPS_BECOME_PASSWORD"}
    env |= {"GLMOPS_HOME": str(tmp_path), "GLMOPS_RUN_DIR": str(tmp_path / "runs")}
    return subprocess.run(
        [sys.executable, "-m", "glmops.cli", "up", "here", "-i", str(inventory), "-K", *args],
        input=PASSWORD + "\n", env=env, capture_output=True, text=True, timeout=300,
        start_new_session=True,  # no controlling terminal
    )  # fmt: skip


def test_up_asks_the_sudo_password_once_for_all_its_playbook_phases(
    local_inventory: Path, tmp_path: Path
) -> None:
    done = up_asking(local_inventory, tmp_path, "--check", "--skip", "model,deploy,verify")
    assert "== glmops up: patch on here" in done.stderr, done.stderr[-3000:]
    assert done.stderr.count("sudo password:") == 1, done.stderr[-3000:]
    assert done.returncode != 130 and "Aborted" not in done.stderr


def test_up_hands_the_password_it_asked_to_the_verify_phase(tmp_path: Path) -> None:
    """The verify phase masks what its checks print with it: it has it. (`note` comes early
    in the hostvars a failed check shows, before pytest shortens the line.)"""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    here: {{connection: local, note: {PASSWORD}}}\n")
    done = up_asking(inventory, tmp_path, "--skip", "provision,patch,model,deploy")
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.count("sudo password:") == 1
    assert "'note': '********'" in done.stderr  # the hostvars of a failed check, masked
    assert PASSWORD not in done.stdout + done.stderr


def one_host(folder: Path, **variables: str) -> Host:
    path = folder / "one.yml"
    fields = ", ".join(f"{k}: {v}" for k, v in {"connection": "local", **variables}.items())
    path.write_text(f"all:\n  hosts:\n    h: {{{fields}}}\n")
    return load_inventory(path).select("all")[0]


def test_the_fingerprint_follows_every_variable_secrets_by_digest(tmp_path: Path) -> None:
    """`glm5_tokenizer` is no secret (runlog's one rule): a new tokenizer deploys again; a
    rotated secret too, without its value in the progress file."""
    from glmops.cli.up import fingerprint

    base = fingerprint(one_host(tmp_path, glm5_tokenizer="a/b", hf_token="hf_one"), "deploy")
    assert base == fingerprint(
        one_host(tmp_path, glm5_tokenizer="a/b", hf_token="hf_one"), "deploy"
    )
    assert base != fingerprint(
        one_host(tmp_path, glm5_tokenizer="a/c", hf_token="hf_one"), "deploy"
    )
    assert base != fingerprint(
        one_host(tmp_path, glm5_tokenizer="a/b", hf_token="hf_two"), "deploy"
    )


def test_the_fingerprint_follows_the_shipped_templates_and_glmops_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A phase finished under other templates (or another glmops) runs again; the files are
    found where paths finds them (a checkout, or an installed wheel's _shipped/)."""
    import shutil

    from glmops import paths
    from glmops.cli import up

    shipped = tmp_path / "shipped"
    for name in ("playbooks", "templates", "backend"):
        shutil.copytree(paths.root() / name, shipped / name)
    monkeypatch.setattr(paths, "root", lambda: shipped)
    host = one_host(tmp_path)
    before = up.fingerprint(host, "deploy")
    unit = shipped / "templates" / "systemd" / "vllm-glm5.service.j2"
    unit.write_text(unit.read_text() + "# changed\n")
    after = up.fingerprint(host, "deploy")
    assert before != after
    monkeypatch.setattr(up, "__version__", "999.0")
    assert up.fingerprint(host, "deploy") != after


def test_a_pattern_that_selects_only_the_router_host_is_refused(tmp_path: Path) -> None:
    from glmops.cli.up_phases import run_up
    from glmops.errors import InputError

    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n  vars: {router_host: rt}\n  hosts:\n"
        "    solo: {address: 10.0.0.1}\n    rt: {connection: local}\n"
    )
    with pytest.raises(InputError, match=r"'rt' selects only the router host \(rt\)") as error:
        run_up(path, "rt", opts={})
    assert str(path) in str(error.value)
