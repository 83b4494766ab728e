"""The GPU table: consistent with itself, with the patch set's layouts, and with its fixtures."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from glmops.gpu import gpus
from glmops.gpu.facts import parse_facts
from glmops.gpu.patchset import PROFILES
from glmops.testbed import facts_fixtures
from glmops.testbed.profiles import GPU_PROFILES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"
BASE = FIXTURES / "h200.json"  # a real H200 host, probed through NVML
REAL_H200 = FIXTURES / "h200-nvidia-smi.json"  # the same host, probed through nvidia-smi


@pytest.mark.parametrize("entry", gpus.FAMILIES, ids=lambda f: f.key)
def test_every_backend_in_the_table_exists_in_some_layout(entry: gpus.GpuFamily) -> None:
    """A name no layout has (a typo, a renamed backend) could never be expected."""
    known = {name for layout in PROFILES for name in layout.backends}
    assert set(entry.backends.bf16 + entry.backends.other) <= known, entry.key


def test_a_layout_expects_only_the_backends_it_has() -> None:
    sm100 = gpus.family((10, 0))
    oldest, newest = PROFILES[0], PROFILES[-1]
    assert sm100.backends.names(oldest.backends, True) == ("FLASHMLA_SPARSE",)
    assert sm100.backends.names(newest.backends, True) == sm100.backends.bf16


def test_every_capability_up_to_12_9_has_one_family_and_firsts_are_unambiguous() -> None:
    starts = [(f.first, f.machine) for f in gpus.FAMILIES]
    assert len(set(starts)) == len(starts)
    for machine in ("x86_64", "aarch64"):
        for major in range(13):
            for minor in range(10):
                found = gpus.family((major, minor), machine)
                assert found in gpus.FAMILIES and found.first <= (major, minor)


def test_a_new_family_takes_over_from_its_first_capability() -> None:
    """Adding an entry is the whole change: its predecessor ends where it begins."""
    sm121 = dataclasses.replace(gpus.family((12, 0)), key="sm121", first=(12, 1))
    table = (*gpus.FAMILIES, sm121)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gpus, "FAMILIES", table)
        assert gpus.family((12, 0)).key == "sm120"
        assert gpus.family((12, 1)).key == gpus.family((12, 7)).key == "sm121"
        assert gpus.family((11, 0)).key == "sm110"


def test_keys_are_unique_and_driver_needs_come_in_pairs() -> None:
    assert len({f.key for f in gpus.FAMILIES}) == len(gpus.FAMILIES)
    for f in gpus.FAMILIES:
        assert (f.min_cuda is None) == (f.min_branch is None), f.key
        if f.modules == gpus.PROPRIETARY_REQUIRED:
            assert f.backends is gpus.NO_RULE and f.gguf_dtype is None, f.key


def test_a_capability_newer_than_the_table_keeps_the_newest_driver_needs_but_no_serving_rule() -> (
    None
):
    newer = gpus.family((13, 0))
    newest = max(gpus.FAMILIES, key=lambda f: f.first)
    assert (newer.modules, newer.min_cuda, newer.min_branch) == (
        newest.modules,
        newest.min_cuda,
        newest.min_branch,
    )
    assert newer.key == "sm130" and newer.backends is gpus.NO_RULE and newer.simulated is None


def test_grace_hopper_only_on_arm() -> None:
    assert gpus.family((9, 0), "aarch64").architecture == "Grace Hopper"
    assert gpus.family((9, 0), "x86_64").architecture == "Hopper"
    assert gpus.family((9, 0)).architecture == "Hopper"


def test_testbed_profiles_come_from_the_table() -> None:
    sims = gpus.simulated()
    assert set(GPU_PROFILES) == set(sims)
    for name, (family, sim) in sims.items():
        profile = GPU_PROFILES[name]
        assert profile.compute_cap == gpus.cc_text(family.first)
        assert (profile.gpu_name, profile.count) == (sim.gpu_name, sim.count)


@pytest.mark.parametrize("name", sorted(gpus.simulated()))
def test_each_simulated_family_has_its_current_facts_fixture(name: str) -> None:
    """The committed fixture is what the generator writes today (rerun it after a table edit)."""
    family, _ = gpus.simulated()[name]
    path = FIXTURES / f"{family.key}.json"
    assert path.is_file(), f"run python3 -m glmops.testbed.facts_fixtures {BASE} {FIXTURES}"
    base = json.loads(BASE.read_text())
    assert json.loads(path.read_text()) == facts_fixtures.fixture(family, base)
    facts = parse_facts(path.read_text())
    assert gpus.family(facts.compute_capability or (0, 0), facts.machine) is family


def test_the_simulated_h200_answers_like_the_real_one() -> None:
    """Same probe, same parser: only the GPU's identity (bus id, UUID) differs."""
    real = json.loads(REAL_H200.read_text())["gpus"]
    simulated = json.loads((FIXTURES / "sm90.json").read_text())["gpus"]
    identity = ("pci_bus_id", "uuid")
    assert [{k: v for k, v in g.items() if k not in identity} for g in simulated] == [
        {k: v for k, v in g.items() if k not in identity} for g in real
    ]
