"""The case corpus: facts in, plan out, for the policy functions (tests/cases/<policy>/*.json).

Each case names a facts fixture (tests/fixtures/facts/<name>.json, one per GPU family), the
changes that make its host (`set`: dotted paths, `gpus.3` for one GPU, `gpus[]` for each) and the
whole plan expected. The expected plans were written from the rules, not copied from the output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from glmops.gpu import gpus
from glmops.gpu.driver_policy import DriverSettings, decide
from glmops.gpu.facts import HostFacts, parse_facts
from glmops.gpu.patchset import PROFILES
from glmops.gpu.serving import serve_flags

TESTS = Path(__file__).resolve().parents[1]
CASES = TESTS / "cases"
FIXTURES = TESTS / "fixtures" / "facts"


def cases(policy: str) -> list[Any]:
    paths = sorted((CASES / policy).glob("*.json"))
    assert paths, f"no cases in {CASES / policy}"
    return [pytest.param(json.loads(p.read_text()), id=p.stem) for p in paths]


def _set(data: Any, path: list[str], value: Any) -> None:
    head, rest = path[0], path[1:]
    if head.endswith("[]"):
        for item in data[head[:-2]]:
            _set(item, rest, value)
    else:
        key = int(head) if isinstance(data, list) else head
        if rest:
            _set(data[key], rest, value)
        else:
            data[key] = value


def host_facts(case: dict[str, Any]) -> HostFacts:
    """The case's fixture with its `set` changes applied, parsed as the engine parses it."""
    data = json.loads((FIXTURES / f"{case['facts']}.json").read_text())
    for dotted, value in case.get("set", {}).items():
        _set(data, dotted.split("."), value)
    return parse_facts(data)


def flags(required: bool, change: bool, error: bool) -> str:
    return " ".join(
        n for n, on in (("required", required), ("change", change), ("error", error)) if on
    )


@pytest.mark.parametrize("case", cases("driver_policy"))
def test_driver_policy(case: dict[str, Any]) -> None:
    settings = dict(case.get("settings", {}))
    if settings.get("expected_compute_cap"):
        settings["expected_compute_cap"] = tuple(settings["expected_compute_cap"])
    decisions = decide(host_facts(case), DriverSettings(**settings))
    got = [
        [
            d.key,
            list(d.value) if isinstance(d.value, tuple) else d.value,
            flags(d.required, d.change, d.error),
        ]
        for d in decisions
    ]
    assert got == case["plan"]
    for key, text in case.get("rules", {}).items():
        (decision,) = [d for d in decisions if d.key == key]
        assert text in decision.because, f"{key}: {decision.because}"


@pytest.mark.parametrize("case", cases("gpus"))
def test_gpu_table(case: dict[str, Any]) -> None:
    major, minor = (int(x) for x in case["cc"].split("."))
    family = gpus.family((major, minor), case.get("machine"))
    want = case["family"]
    got = {
        "key": family.key,
        "architecture": family.architecture,
        "modules": family.modules,
        "min_cuda": gpus.cc_text(family.min_cuda) if family.min_cuda else None,
        "min_branch": family.min_branch,
        "gguf_dtype": family.gguf_dtype,
        "backends": {
            layout.name: {
                "bf16": list(family.backends.names(layout.backends, True)),
                "other": list(family.backends.names(layout.backends, False)),
            }
            for layout in PROFILES
        },
        "simulated": family.simulated.profile if family.simulated else None,
    }
    assert got == want


@pytest.mark.parametrize("case", cases("serve_flags"))
def test_serve_flags(case: dict[str, Any]) -> None:
    config = serve_flags(host_facts(case), case["vars"])
    argv = config.argv
    for flag, value in case["argv"].items():
        if value is None:
            assert flag not in argv
        else:
            assert argv[argv.index(flag) + 1] == value, flag
    assert list(config.expectation.names) == case["expected_backends"]
    assert config.effective_dtype == case["effective_dtype"]
