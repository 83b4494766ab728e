"""NVIDIA driver policy: host facts + settings -> decisions, each with the fact and the rule.

Pure logic (no I/O) so `glmops provision --explain` and the tests see exactly what the engine does.
What each GPU family needs comes from glmops.gpu.gpus. Package names follow NVIDIA's CUDA apt
repository: `nvidia-open-<br>` / `cuda-drivers-<br>` up to R580, unsuffixed names plus
`nvidia-driver-pinning-<br>` from R590 (check with `apt-cache policy` on the target).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from glmops.gpu import gpus
from glmops.gpu.facts import HostFacts
from glmops.gpu.gpus import CC

REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
KEYRING_DEB = "cuda-keyring_1.1-1_all.deb"
# (os id, version) -> CUDA repo directory; machine -> repo arch (aarch64 servers are "sbsa").
OS_REPOS = {
    ("ubuntu", "22.04"): "ubuntu2204",
    ("ubuntu", "24.04"): "ubuntu2404",
    ("debian", "12"): "debian12",
    ("debian", "13"): "debian13",
}
REPO_ARCH = {"x86_64": "x86_64", "aarch64": "sbsa"}
LAST_BRANCH_PRE_TURING = 580  # R580 is the last branch for Maxwell, Pascal and Volta
UNSUFFIXED_FROM = 590  # CUDA repo packages drop the "-<branch>" suffix from R590


@dataclass(frozen=True)
class DriverSettings:
    branch: str = "580"  # R580: long-term support branch, EOL Aug 2028, CUDA 13.x
    min_version: str | None = None  # upgrade within the branch below this, e.g. "580.95.05"
    expected_compute_cap: CC | None = None  # from the inventory profile, for driverless hosts
    persistence_mode: bool = True
    repo_base: str = REPO_BASE


@dataclass(frozen=True)
class Decision:
    key: str
    value: Any
    fact: str
    rule: str
    required: bool = False  # a hard requirement rather than a recommendation or a note
    change: bool = False  # implies a step that changes the host
    error: bool = False  # provisioning must stop here

    @property
    def because(self) -> str:
        return f"{self.fact} → {self.rule}"


def _ver(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".") if p.isdigit())


def decide(facts: HostFacts, settings: DriverSettings | None = None) -> list[Decision]:
    """All driver decisions for one host, in the order the steps run; stops at an error."""
    s = settings or DriverSettings()
    skip = _skip(facts)
    if skip:
        return [skip]
    ccs, cc_fact = _capabilities(facts, s)
    families = {c: gpus.family(c, facts.machine) for c in ccs}
    out: list[Decision] = []
    if families:
        names = ", ".join(sorted({f.architecture for f in families.values()}))
        out.append(Decision("architecture", names, cc_fact, f"{names} ({facts.gpu_count} GPU(s))"))
    flavour = _flavour(facts, families, cc_fact)
    out.append(flavour)
    if flavour.error:
        return out
    for section in (
        lambda: [_branch(s, families, flavour, ccs, cc_fact)],
        lambda: _repo_packages(facts, s, flavour),
    ):
        out += section()
        if out[-1].error:
            return out
    change = _change(facts, s, flavour)
    out.append(change)
    installing = change.value in ("install", "upgrade", "change-branch", "switch-flavour")
    out.append(_nouveau(facts, change.value, installing))
    if s.persistence_mode:
        out.append(_persistence(facts))
    out.append(_reboot(facts, change.value, installing))
    if facts.secure_boot and installing:
        out.append(
            Decision(
                "secure_boot",
                "mok",
                "Secure Boot enabled",
                "DKMS-built modules must be signed with an enrolled MOK key or they will not load",
            )
        )
    add_torch(out, facts, ccs)
    return out


def _skip(facts: HostFacts) -> Decision | None:
    """No driver steps at all: no NVIDIA GPU, or DGX OS, which manages its own driver."""
    if not facts.has_nvidia_gpu:
        why = facts.reason("gpus") or "no NVIDIA display controller on the PCI bus"
        return Decision("driver", "skip", f"no NVIDIA GPU ({why})", "driver steps skipped")
    if facts.dgx_release:
        return Decision("driver", "skip", "/etc/dgx-release present", "DGX OS manages its driver")
    return None


def _capabilities(facts: HostFacts, s: DriverSettings) -> tuple[tuple[CC, ...], str]:
    """Which compute capabilities: from the driver if it answers, else the inventory profile."""
    ccs = facts.compute_capabilities
    if not ccs and s.expected_compute_cap:
        cc = s.expected_compute_cap
        return (cc,), f"compute_cap {_dotted(cc)} (inventory profile; no driver to ask)"
    return ccs, "compute_cap " + ", ".join(_dotted(c) for c in ccs)


def _flavour(facts: HostFacts, families: dict[CC, gpus.GpuFamily], cc_fact: str) -> Decision:
    """Kernel module flavour: open, proprietary, or an error for a host that needs both."""
    kinds = {f.modules for f in families.values()}
    if gpus.OPEN_REQUIRED in kinds and gpus.PROPRIETARY_REQUIRED in kinds:
        return Decision(
            "kernel_modules",
            None,
            cc_fact,
            "mixed GPUs need both flavours: unsupported on one host",
            required=True,
            error=True,
        )
    if gpus.OPEN_REQUIRED in kinds:
        names = "/".join(
            sorted({f.architecture for f in families.values() if f.modules == gpus.OPEN_REQUIRED})
        )
        return Decision(
            "kernel_modules", "open", cc_fact, f"open kernel modules required ({names})", True
        )
    if gpus.PROPRIETARY_REQUIRED in kinds:
        return Decision(
            "kernel_modules",
            "proprietary",
            cc_fact,
            "older than Turing (7.5): open modules need the GSP, proprietary required",
            required=True,
        )
    if kinds:
        return Decision(
            "kernel_modules",
            "open",
            cc_fact,
            "Turing (7.5) or newer: open kernel modules recommended (R560+ default)",
        )
    return Decision(
        "kernel_modules",
        "open",
        f"{facts.gpu_count} NVIDIA GPU(s) on PCI, "
        "compute capability unknown (no driver, no profile)",
        "assume Turing or newer: open modules (R560+ default)",
    )


def _branch(
    s: DriverSettings,
    families: dict[CC, gpus.GpuFamily],
    flavour: Decision,
    ccs: tuple[CC, ...],
    cc_fact: str,
) -> Decision:
    """The pinned branch, checked against the newest CUDA the GPUs need and the oldest GPUs."""
    branch = int(s.branch)
    need = [f for f in families.values() if f.min_branch]
    floor = max(need, key=lambda f: f.min_branch or 0) if need else None
    if floor and floor.min_cuda and floor.min_branch and branch < floor.min_branch:
        return Decision(
            "branch",
            s.branch,
            f"{cc_fact} needs CUDA ≥ {_dotted(floor.min_cuda)}",
            f"branch {branch} < {floor.min_branch}: too old",
            True,
            error=True,
        )
    if flavour.value == "proprietary" and branch > LAST_BRANCH_PRE_TURING:
        return Decision(
            "branch",
            s.branch,
            cc_fact,
            f"R{LAST_BRANCH_PRE_TURING} is the last branch for Maxwell/Pascal/Volta",
            True,
            error=True,
        )
    if any(c < (5, 0) for c in ccs):
        return Decision(
            "branch",
            s.branch,
            cc_fact,
            "Kepler and older: unsupported after R470",
            True,
            error=True,
        )
    cuda_rule = (
        f"; CUDA ≥ {_dotted(floor.min_cuda)} (driver ≥ R{floor.min_branch})"
        if (floor and floor.min_cuda)
        else ""
    )
    return Decision(
        "branch",
        s.branch,
        f"settings.branch = {s.branch}",
        f"pinned driver branch R{s.branch}{cuda_rule}",
        required=True,
    )


def _repo_packages(facts: HostFacts, s: DriverSettings, flavour: Decision) -> list[Decision]:
    """NVIDIA's CUDA apt repository for this OS and CPU, then the packages to install from it."""
    repo = OS_REPOS.get((facts.os_id or "", facts.os_version_id or ""))
    rarch = REPO_ARCH.get(facts.machine or "")
    os_fact = f"os {facts.os_id} {facts.os_version_id} {facts.machine}"
    if not repo or not rarch:
        supported = sorted(OS_REPOS.values())
        rule = f"no NVIDIA CUDA apt repository for this OS/arch (supported: {supported})"
        return [Decision("apt_repo", None, os_fact, rule, True, error=True)]
    url = f"{s.repo_base}/{repo}/{rarch}/{KEYRING_DEB}"
    rule = f"CUDA repo {repo}/{rarch} via cuda-keyring"
    branch = int(s.branch)
    suffix = "" if branch >= UNSUFFIXED_FROM else f"-{branch}"
    meta = ("nvidia-open" if flavour.value == "open" else "cuda-drivers") + suffix
    pkgs = [f"nvidia-driver-pinning-{branch}", meta]
    if facts.kernel_release:
        pkgs.insert(0, f"linux-headers-{facts.kernel_release}")
    return [
        Decision("apt_repo", url, os_fact, rule, required=True),
        Decision(
            "packages",
            tuple(pkgs),
            f"branch {branch}, {flavour.value} modules",
            f"pin the branch, then {meta} (DKMS builds need the running kernel's headers)",
        ),
    ]


def _change(facts: HostFacts, s: DriverSettings, flavour: Decision) -> Decision:
    """Install, upgrade, reinstall or keep the driver."""
    change, fact, rule = _driver_change(facts, s, flavour)
    return Decision("driver_change", change, fact, rule, change=change != "keep")


def _nouveau(facts: HostFacts, change: str, installing: bool) -> Decision:
    """nouveau holds the GPU until a reboot: blacklist it whenever the driver goes in."""
    if facts.nouveau_loaded:
        return Decision(
            "nouveau",
            "blacklist",
            "nouveau loaded (/proc/modules)",
            "blacklist nouveau and regenerate the initramfs; it holds the GPU until a reboot",
            required=True,
            change=True,
        )
    if installing:
        return Decision(
            "nouveau",
            "blacklist",
            f"driver {change} planned",
            "ensure nouveau is blacklisted (initramfs regenerated only if the file changed)",
            change=True,
        )
    return Decision(
        "nouveau", "leave", f"nouveau_loaded = {facts.nouveau_loaded}", "nothing to blacklist"
    )


def _persistence(facts: HostFacts) -> Decision:
    pm = [g.persistence_mode for g in facts.gpus or ()]
    off = not pm or not all(pm)
    return Decision(
        "persistence_mode",
        "on",
        "persistence " + ("on for every GPU" if not off else "off or unknown on some GPU"),
        "enable nvidia-persistenced" if off else "already on",
        change=off,
    )


def _reboot(facts: HostFacts, change: str, installing: bool) -> Decision:
    """A reboot when a module must be (un)loaded; a pending reboot-required alone is no reason."""
    reasons = []
    if facts.nouveau_loaded:
        reasons.append("nouveau loaded")
    if facts.driver_mismatch:
        reasons.append("driver/library version mismatch")
    if installing:
        reasons.append(f"driver {change}")
    if facts.reboot_required and reasons:
        reasons.append("/var/run/reboot-required set")
    return Decision(
        "reboot",
        bool(reasons),
        ", ".join(reasons) or "driver unchanged",
        "reboot (record boot_id, wait for a new one)" if reasons else "no reboot",
        change=bool(reasons),
    )


def _dotted(v: tuple[int, int]) -> str:
    """(12, 0) -> "12.0": a compute capability or CUDA version as people write it."""
    return f"{v[0]}.{v[1]}"


def _driver_change(facts: HostFacts, s: DriverSettings, flavour: Decision) -> tuple[str, str, str]:
    cur, cur_flavour = facts.driver_version, facts.kernel_module
    if not cur:
        return "install", "no driver (nvidia-smi/NVML absent)", f"install R{s.branch}"
    fact = f"driver {cur} ({cur_flavour or 'flavour not reported'})"
    if facts.driver_branch != s.branch:
        return "change-branch", fact, f"branch {facts.driver_branch} ≠ R{s.branch}: reinstall"
    if flavour.required and cur_flavour and cur_flavour != flavour.value:
        return "switch-flavour", fact, f"{flavour.value} modules required: reinstall"
    if s.min_version and _ver(cur) < _ver(s.min_version):
        return "upgrade", fact, f"below the minimum {s.min_version}: upgrade within R{s.branch}"
    if cur_flavour is None:
        return (
            "keep",
            fact,
            f"on R{s.branch}; flavour unknown (/proc/driver/nvidia absent), "
            "not forcing a reinstall",
        )
    if cur_flavour != flavour.value:
        return "keep", fact, f"on R{s.branch}; {flavour.value} recommended, not required: keep"
    return "keep", fact, f"already on R{s.branch} with {cur_flavour} modules"


def add_torch(out: list[Decision], facts: HostFacts, ccs: Iterable[CC]) -> None:
    """Notes on the venv's torch vs the GPU and the driver's CUDA (the venv step acts on them)."""
    v = facts.venv
    if not v or not v.torch_version:
        return
    for cc in ccs:
        ok = v.torch_supports(cc)
        if ok is False:
            add = f"sm_{cc[0]}{cc[1]} not in {list(v.torch_cuda_arch_list or ())}"
            out.append(
                Decision(
                    "torch_arch",
                    False,
                    f"torch {v.torch_version}: {add}",
                    "torch has no kernels for this GPU: reinstall a newer build",
                    required=True,
                    change=True,
                )
            )
    tc, dc = v.torch_cuda_version, facts.cuda_version
    if tc and dc and _ver(tc)[:2] > _ver(dc)[:2]:
        out.append(
            Decision(
                "torch_cuda",
                False,
                f"torch CUDA {tc} > driver CUDA {dc}",
                "torch must match the CUDA version the driver supports",
                required=True,
                change=True,
            )
        )


def get(decisions: Iterable[Decision], key: str) -> Decision | None:
    return next((d for d in decisions if d.key == key), None)


def errors(decisions: Iterable[Decision]) -> list[Decision]:
    return [d for d in decisions if d.error]


def explain(decisions: Iterable[Decision]) -> str:
    """One line per decision for `--explain`: key, value, flags, then fact → rule."""
    lines = []
    for d in decisions:
        val = " ".join(d.value) if isinstance(d.value, tuple) else str(d.value)
        flags = "".join(
            f" [{n}]"
            for n, on in (("required", d.required), ("change", d.change), ("ERROR", d.error))
            if on
        )
        lines.append(f"{d.key:<17}{val}{flags}\n{'':<17}{d.because}")
    return "\n".join(lines)


def to_json(decisions: Iterable[Decision]) -> list[dict[str, Any]]:
    return [
        dict(
            key=d.key,
            value=list(d.value) if isinstance(d.value, tuple) else d.value,
            fact=d.fact,
            rule=d.rule,
            because=d.because,
            required=d.required,
            change=d.change,
            error=d.error,
        )
        for d in decisions
    ]
