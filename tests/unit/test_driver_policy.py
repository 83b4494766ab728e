"""Driver policy: decisions (with their fact and rule) and the --explain text, per architecture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from glmops.gpu import gpus
from glmops.gpu.driver_policy import DriverSettings, decide, errors, explain, get, to_json
from glmops.gpu.facts import parse_facts

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "facts" / "h200.json"


def host(
    cc: str | None = "12.0",
    n: int = 8,
    driver: str | None = "580.95.05",
    flavour: str | None = "open",
    **over: Any,
):
    """Facts JSON as the probe prints it, derived from the real H200 fixture."""
    d = json.loads(FIXTURE.read_text())
    if cc is None:
        d.update(gpus=[], pci_gpus=[], driver_version=None, cuda_version=None)
        d["kernel_module"] = {"nvidia_loaded": False, "nouveau_loaded": False, "flavour": None}
    else:
        d["gpus"] = [
            {
                "index": i,
                "name": "GPU",
                "compute_cap": cc,
                "memory_total_mib": 1,
                "driver_version": driver,
                "persistence_mode": True,
            }
            for i in range(n)
        ]
        d["pci_gpus"] = [{"bus_id": str(i)} for i in range(n)]
        d["driver_version"] = driver
        d["kernel_module"] = {
            "nvidia_loaded": driver is not None,
            "nouveau_loaded": False,
            "flavour": flavour,
        }
    for k, v in over.items():
        if k in ("nouveau_loaded", "nvidia_loaded"):
            d["kernel_module"][k] = v
        elif k == "machine":
            d["kernel"]["machine"] = v
        elif k == "os":
            d["os"]["id"], d["os"]["version_id"] = v
        else:
            d[k] = v
    return parse_facts(d)


def values(decisions) -> dict[str, Any]:
    return {d.key: d.value for d in decisions}


def test_blackwell_workstation_12_0() -> None:
    ds = decide(host("12.0"))
    v = values(ds)
    assert v["architecture"] == "Blackwell" and v["kernel_modules"] == "open"
    km = get(ds, "kernel_modules")
    assert km and km.required
    assert km.because == "compute_cap 12.0 → open kernel modules required (Blackwell)"
    assert "CUDA ≥ 12.8 (driver ≥ R570)" in get(ds, "branch").because  # type: ignore[union-attr]
    assert v["packages"][-2:] == ("nvidia-driver-pinning-580", "nvidia-open-580")
    assert v["apt_repo"].endswith("/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb")
    assert v["driver_change"] == "keep" and v["reboot"] is False and v["nouveau"] == "leave"
    assert not errors(ds)
    text = explain(ds)
    assert "compute_cap 12.0 → open kernel modules required (Blackwell)" in text
    assert "driver 580.95.05 (open) → already on R580 with open modules" in text


def test_blackwell_datacenter_10_0_on_a_fresh_host_installs_and_reboots() -> None:
    f = host("10.0", driver=None, flavour=None, gpus=None, gpu_source=None)
    ds = decide(f, DriverSettings(expected_compute_cap=(10, 0)))
    v = values(ds)
    assert v["architecture"] == "Blackwell" and v["kernel_modules"] == "open"
    assert "inventory profile" in get(ds, "architecture").fact  # type: ignore[union-attr]
    assert v["driver_change"] == "install" and v["nouveau"] == "blacklist"
    assert v["reboot"] is True and "driver install" in get(ds, "reboot").fact  # type: ignore
    assert v["packages"][0].startswith("linux-headers-")


def test_hopper_9_0_x86_open_recommended_and_grace_hopper_required() -> None:
    ds = decide(host("9.0", n=1, driver="580.159.04"))
    km = get(ds, "kernel_modules")
    assert km and km.value == "open" and not km.required and "recommended" in km.rule
    assert values(ds)["architecture"] == "Hopper"
    gh = decide(host("9.0", n=1, machine="aarch64"))
    km = get(gh, "kernel_modules")
    assert km and km.required and "Grace Hopper" in km.rule
    assert values(gh)["apt_repo"].endswith("/ubuntu2404/sbsa/cuda-keyring_1.1-1_all.deb")


def test_h200_fixture_needs_nothing() -> None:
    ds = decide(parse_facts(FIXTURE.read_text()))
    v = values(ds)
    assert (v["driver_change"], v["reboot"], v["persistence_mode"]) == ("keep", False, "on")
    assert not any(d.change for d in ds)


def test_ampere_8_0_with_proprietary_modules_is_kept() -> None:
    ds = decide(host("8.0", flavour="proprietary"))
    assert values(ds)["architecture"] == "Ampere"
    dc = get(ds, "driver_change")
    assert dc and dc.value == "keep" and "recommended, not required" in dc.rule


def test_volta_7_0_proprietary_required() -> None:
    ds = decide(host("7.0", flavour="open", driver="580.95.05"))
    km = get(ds, "kernel_modules")
    assert km and km.value == "proprietary" and km.required and "GSP" in km.rule
    assert values(ds)["packages"][-1] == "cuda-drivers-580"
    assert values(ds)["driver_change"] == "switch-flavour" and values(ds)["reboot"] is True
    bad = decide(host("7.0", flavour="proprietary"), DriverSettings(branch="590"))
    assert errors(bad) and "last branch for Maxwell/Pascal/Volta" in errors(bad)[0].rule


def test_no_gpu_skips_driver_steps() -> None:
    ds = decide(host(None))
    assert len(ds) == 1 and ds[0].key == "driver" and ds[0].value == "skip"
    assert "no NVIDIA GPU" in ds[0].because and "driver steps skipped" in ds[0].because
    assert "no NVIDIA GPU" in explain(ds)
    assert decide(parse_facts({}))[0].value == "skip"


def test_proprietary_on_blackwell_is_switched() -> None:
    ds = decide(host("12.0", flavour="proprietary"))
    assert values(ds)["driver_change"] == "switch-flavour" and values(ds)["reboot"] is True


def test_other_branch_is_changed_and_nouveau_forces_a_reboot() -> None:
    ds = decide(host("12.0", driver="570.169", nouveau_loaded=True))
    v = values(ds)
    assert v["driver_change"] == "change-branch" and v["nouveau"] == "blacklist"
    assert get(ds, "nouveau").required  # type: ignore[union-attr]
    assert "nouveau loaded" in get(ds, "reboot").fact  # type: ignore[union-attr]


def test_version_mismatch_means_reboot_without_reinstall() -> None:
    ds = decide(host("12.0", driver_mismatch=True))
    assert values(ds)["driver_change"] == "keep" and values(ds)["reboot"] is True


def test_min_version_upgrades_within_the_branch() -> None:
    ds = decide(host("12.0", driver="580.65.06"), DriverSettings(min_version="580.95.05"))
    assert values(ds)["driver_change"] == "upgrade"


def test_branch_too_old_for_blackwell_is_an_error() -> None:
    ds = decide(host("12.0"), DriverSettings(branch="560"))
    (e,) = errors(ds)
    assert e.key == "branch" and "560 < 570" in e.rule and "CUDA ≥ 12.8" in e.fact


def test_unsuffixed_packages_from_590() -> None:
    ds = decide(host("12.0", driver="590.1"), DriverSettings(branch="590"))
    assert values(ds)["packages"][-2:] == ("nvidia-driver-pinning-590", "nvidia-open")


def test_unsupported_os_is_an_error() -> None:
    (e,) = errors(decide(host("12.0", os=("rocky", "9"))))
    assert e.key == "apt_repo"


def test_flavour_unknown_is_not_forced() -> None:
    """The testbed's simulated GPUs have nvidia-smi but no /proc/driver/nvidia."""
    dc = get(decide(host("12.0", flavour=None)), "driver_change")
    assert dc and dc.value == "keep" and "flavour unknown" in dc.rule


def test_torch_without_kernels_for_the_gpu_is_flagged() -> None:
    d = json.loads(FIXTURE.read_text())
    d["venv"]["torch_cuda_arch_list"] = ["sm_80", "sm_90"]
    d["gpus"][0]["compute_cap"] = "12.0"
    ta = get(decide(parse_facts(d)), "torch_arch")
    assert ta and ta.required and "sm_120 not in" in ta.fact


@pytest.mark.parametrize(
    "cc, machine, name, modules",
    [
        ((12, 1), "aarch64", "Blackwell", "open-required"),
        ((10, 3), "x86_64", "Blackwell", "open-required"),
        ((8, 9), "x86_64", "Ada Lovelace", "open-recommended"),
        ((7, 5), "x86_64", "Turing", "open-recommended"),
        ((6, 1), "x86_64", "Pascal", "proprietary-required"),
    ],
)
def test_arch_table(cc: tuple[int, int], machine: str, name: str, modules: str) -> None:
    a = gpus.family(cc, machine)
    assert (a.architecture, a.modules) == (name, modules)


def test_to_json_round_trips() -> None:
    js = to_json(decide(host("12.0")))
    assert json.loads(json.dumps(js))[1]["because"].startswith("compute_cap 12.0")
