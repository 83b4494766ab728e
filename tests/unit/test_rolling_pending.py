"""A rolling deploy after an interrupted one: the restart the earlier run left pending on the
host (its notification, kept by the engine) takes the replica out of the router and drains it
before vLLM restarts, as a restart notified in this run does. Runs deploy.yml's own
"is a restart pending" expression through the real engine, on a local host."""

from __future__ import annotations

from pathlib import Path

import yaml

from glmops import paths
from glmops.engine.notifications import PENDING_FILE
from glmops.engine.playbook import load_playbook
from tests.support.engine import Runner
from tests.support.local_hosts import local_hosts


def restart_pending_fact() -> dict[str, str]:
    """The set_fact arguments of deploy.yml's "rolling: is a restart pending" task."""
    deploy = load_playbook(paths.playbooks() / "deploy.yml")[0]
    task = next(t for t in deploy.tasks if t.name == "rolling: is a restart pending")
    return dict(task.args)


def test_deploy_yml_decides_then_leaves_the_router_and_drains_before_its_restart() -> None:
    """The order rolling_play copies, read from deploy.yml itself: the decision, out of the
    router, the drain, then the handlers' flush (where `restart vllm` runs), then the gate."""
    deploy = load_playbook(paths.playbooks() / "deploy.yml")[0]
    names = [t.name if t.module != "meta" else "meta: " + str(t.args) for t in deploy.tasks]
    order = [
        "rolling: is a restart pending",
        "rolling: out of the router",
        "rolling: drain (no request running or waiting)",
    ]
    at = [names.index(name) for name in order]
    flush = next(i for i, n in enumerate(names) if n.startswith("meta") and "flush" in n)
    assert at == sorted(at) and at[-1] + 1 == flush, names
    assert names.index("rolling: back into the router") > flush
    assert any(h.name == "restart vllm" for h in deploy.handlers)


def rolling_play(unit_text: str) -> str:
    """deploy.yml's shape: the tasks that notify `restart vllm`, a run that may die before the
    handlers (`crash`), the pending decision, out of the router, drain, then the restart."""

    def log(word: str) -> str:
        return f"echo {word} >> {{{{ out }}}}/log"

    def notifying(name: str, register: str, dest: str, content: str) -> dict:
        return {
            "name": name,
            "copy": {"dest": f"{{{{ out }}}}/{dest}", "content": content},
            "register": register,
            "notify": "restart vllm",
        }

    play = {
        "name": "deploy GLM-5",
        "hosts": "all",
        "gather_facts": False,
        "vars": {"gang": {"member": False}},  # what deploy.yml's vllm_gang registers alone
        "tasks": [
            notifying("model files", "model", "model", "weights\n"),
            notifying("environment file", "env_file", "env", "A=1\n"),
            notifying("vllm serve unit", "unit_file", "unit", unit_text),
            notifying("inputs", "inputs_file", "inputs", "{}\n"),
            {"name": "the run dies here", "shell": "exit 1", "when": "crash | default(false)"},
            {"name": "rolling: is a restart pending", "set_fact": restart_pending_fact()},
            {"name": "out", "shell": log("out"), "when": "fleet_restart_pending"},
            {"name": "drain", "shell": log("drain"), "when": "fleet_restart_pending"},
            {"meta": "flush_handlers"},
        ],
        "handlers": [{"name": "restart vllm", "shell": log("restart")}],
    }
    return yaml.safe_dump([play], sort_keys=False)


def test_a_restart_left_pending_by_an_interrupted_run_leaves_the_router_and_drains_first(
    run_playbook: Runner, tmp_path: Path
) -> None:
    inventory = local_hosts(
        tmp_path, {"all": ["r1"]}, host_vars=lambda name: {"out": str(tmp_path)}
    )
    log = tmp_path / "log"
    run_playbook(rolling_play("v1\n"), inventory)
    log.unlink()

    # The unit file changes, then the run dies before the handler: the engine keeps the
    # notification on the host.
    died = run_playbook(rolling_play("v2\n"), inventory, extra=["crash=true"])
    assert died.exit_code == 2 and not log.exists()
    kept = (tmp_path / "state-r1" / PENDING_FILE).read_text()
    assert "restart vllm" in kept

    # The rolling run finds the files converged, but the restart is still owed.
    rolling = run_playbook(rolling_play("v2\n"), inventory, extra=["fleet_rolling=true"])
    assert rolling.exit_code == 0, rolling.stderr
    assert rolling.status("vllm serve unit") == "ok"
    assert log.read_text().split() == ["out", "drain", "restart"]
    assert not (tmp_path / "state-r1" / PENDING_FILE).exists()


def test_a_converged_replica_stays_in_rotation(run_playbook: Runner, tmp_path: Path) -> None:
    inventory = local_hosts(
        tmp_path, {"all": ["r1"]}, host_vars=lambda name: {"out": str(tmp_path)}
    )
    run_playbook(rolling_play("v1\n"), inventory)
    (tmp_path / "log").unlink()
    rolling = run_playbook(rolling_play("v1\n"), inventory, extra=["fleet_rolling=true"])
    assert rolling.exit_code == 0, rolling.stderr
    assert not (tmp_path / "log").exists(), "a converged replica was taken out or restarted"
