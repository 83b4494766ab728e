"""nvidia_driver: the NVIDIA driver the GPU's architecture needs, from NVIDIA's CUDA apt repo.

Every step comes from `driver_policy.decide(facts)`, so `--explain` shows the fact and the rule
behind it. The module installs (cuda-keyring, branch pinning, the open or proprietary meta
package), blacklists nouveau (initramfs regenerated only when that file changed) and turns
persistence mode on. It never reboots: it reports `reboot` in its data and the playbook runs
the `reboot` module when that is true. A host without an NVIDIA GPU is left alone (ok, why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.gpu import driver_policy as policy
from glmops.gpu.facts import HostFacts, parse_cc, parse_facts
from glmops.modules.base import Arg, Module, Plan, register

APT_ENV = "DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a"
NOUVEAU_CONF = "/etc/modprobe.d/blacklist-nouveau.conf"
NOUVEAU_TEXT = (
    "# written by glmops (nvidia_driver): the NVIDIA driver needs the GPU, nouveau must not load\n"
    "blacklist nouveau\noptions nouveau modeset=0\n"
)


@dataclass(frozen=True)
class Step:
    """One host change: what it is (for the plan's reason) and the shell commands it runs."""

    key: str
    what: str
    commands: tuple[str, ...] = ()


def keyring_commands(url: str) -> tuple[str, ...]:
    """Fetch cuda-keyring with python3 (always there; curl/wget may not be) and install it.
    The package lands in a fresh private folder (mktemp -d), never at a fixed /tmp name that
    another user could create first and so have root install their package."""
    fetch = (
        "python3 -c 'import sys, urllib.request; "
        "urllib.request.urlretrieve(sys.argv[1], sys.argv[2])'"
    )
    deb = '"$keyring_dir/cuda-keyring.deb"'
    return (
        f"keyring_dir=$(mktemp -d) || exit 1; {fetch} {quote(url)} {deb} && dpkg -i {deb}; "
        'rc=$?; rm -rf "$keyring_dir"; exit $rc',
        f"{APT_ENV} apt-get update -q",
    )


def install_commands(packages: tuple[str, ...]) -> tuple[str, ...]:
    """Pinning package first (it must precede the driver), then the driver meta package."""
    pin = [p for p in packages if p.startswith("nvidia-driver-pinning-")]
    rest = [p for p in packages if p not in pin]
    cmds = [f"{APT_ENV} apt-get install -y -q {' '.join(quote(p) for p in pin)}"] if pin else []
    cmds.append(f"{APT_ENV} apt-get install -y -q {' '.join(quote(p) for p in rest)}")
    return tuple(cmds)


INITRAMFS = (
    "if command -v update-initramfs >/dev/null 2>&1; then update-initramfs -u; "
    "elif command -v dracut >/dev/null 2>&1; then dracut -f; "
    "else echo 'no update-initramfs or dracut: initramfs not regenerated' >&2; fi"
)


def persistence_command(now: bool) -> str:
    """nvidia-persistenced through systemd when there is one, else the legacy `-pm 1`."""
    start = " --now" if now else ""
    legacy = "nvidia-smi -pm 1" if now else "true"
    return (
        "if command -v systemctl >/dev/null 2>&1; then "
        f"systemctl enable{start} nvidia-persistenced; else {legacy}; fi"
    )


def settings_from(params: dict[str, Any]) -> policy.DriverSettings:
    expected = parse_cc(params.get("expected_compute_cap"))
    kwargs: dict[str, Any] = {
        "branch": str(params.get("branch") or "580"),
        "min_version": params.get("min_version") or None,
        "expected_compute_cap": expected,
        "persistence_mode": bool(params.get("persistence_mode", True)),
    }
    if params.get("repo_base"):
        kwargs["repo_base"] = params["repo_base"]
    return policy.DriverSettings(**kwargs)


def plan_steps(
    decisions: list[policy.Decision], *, keyring_installed: bool, nouveau_current: bytes | None
) -> list[Step]:
    """Decisions + what is already on the host -> the steps to run, in order (pure)."""
    steps: list[Step] = []
    change = policy.get(decisions, "driver_change")
    installing = bool(change and change.change)
    repo = policy.get(decisions, "apt_repo")
    packages = policy.get(decisions, "packages")
    if installing and repo and repo.value:
        if not keyring_installed:
            what = f"add NVIDIA's CUDA repo ({repo.rule})"
            steps.append(Step("apt_repo", what, keyring_commands(repo.value)))
        else:
            update = (f"{APT_ENV} apt-get update -q",)
            steps.append(Step("apt_update", "refresh the CUDA repo", update))
    if installing and packages:
        steps.append(
            Step(
                "packages",
                f"driver {change.value if change else ''}: install {' '.join(packages.value)}",
                install_commands(tuple(packages.value)),
            )
        )
    nouveau = policy.get(decisions, "nouveau")
    if nouveau and nouveau.value == "blacklist" and nouveau_current != NOUVEAU_TEXT.encode():
        steps.append(Step("nouveau", f"blacklist nouveau in {NOUVEAU_CONF}, then the initramfs"))
    pm = policy.get(decisions, "persistence_mode")
    if pm and pm.change:
        reboot = policy.get(decisions, "reboot")
        now = not (reboot and reboot.value)
        steps.append(Step("persistence", "enable nvidia-persistenced", (persistence_command(now),)))
    return steps


@register
class NvidiaDriver(Module):
    """`nvidia_driver: {branch: "580"}`: plan from facts + driver_policy, then apply the steps.

    Data: `reboot` (bool) and `reboot_reason`, `explain` (the decisions), `packages`, `steps`.
    """

    name = "nvidia_driver"
    changes_facts = True
    args = {
        "branch": Arg(str, default="580", doc="driver branch to pin (R580: LTS, CUDA 13.x)"),
        "min_version": Arg(str, doc="upgrade within the branch below this, e.g. 580.95.05"),
        "expected_compute_cap": Arg(
            str, doc="compute capability for a GPU host with no driver yet, e.g. '12.0'"
        ),
        "persistence_mode": Arg(bool, default=True, doc="keep nvidia-persistenced running"),
        "repo_base": Arg(str, doc="mirror of developer.download.nvidia.com/compute/cuda/repos"),
    }

    def facts(self, ctx: TaskContext) -> HostFacts:
        facts = ctx.facts
        if not facts.raw:  # play without gather_facts: ask the host now (one round trip)
            from glmops.engine.facts_gather import gather

            # GPU, driver and OS facts only: no venv or model folder to look at
            facts = parse_facts(gather(ctx, {}))
        return facts

    def plan(self, ctx: TaskContext) -> Plan:
        facts = self.facts(ctx)
        decisions = policy.decide(facts, settings_from(self.params))
        explain = policy.explain(decisions).splitlines()
        data: dict[str, Any] = {
            "explain": explain,
            "decisions": policy.to_json(decisions),
            "reboot": False,
            "reboot_reason": "",
        }
        skip = policy.get(decisions, "driver")
        if skip is not None:
            return Plan(False, f"{skip.because}", data=data)
        bad = policy.errors(decisions)
        if bad:
            raise ModuleError("driver policy: " + "; ".join(d.because for d in bad))
        keyring = ctx.run("dpkg-query -W -f='${db:Status-Abbrev}' cuda-keyring 2>/dev/null")
        nouveau = policy.get(decisions, "nouveau")
        current = ctx.read(NOUVEAU_CONF) if nouveau and nouveau.value == "blacklist" else None
        steps = plan_steps(
            decisions,
            keyring_installed=keyring.ok and keyring.stdout.startswith("ii"),
            nouveau_current=current,
        )
        reboot = policy.get(decisions, "reboot")
        packages = policy.get(decisions, "packages")
        data.update(
            _steps=steps,
            steps=[s.what for s in steps],
            packages=list(packages.value) if packages else [],
            reboot=bool(reboot and reboot.value),
            reboot_reason=reboot.fact if reboot else "",
        )
        if not steps:
            change = policy.get(decisions, "driver_change")
            why = change.because if change else "nothing to do"
            pending = f"; reboot still needed ({data['reboot_reason']})" if data["reboot"] else ""
            return Plan(False, f"{why}; nouveau and persistence mode as wanted{pending}", data=data)
        reason = "would " + "; ".join(s.what for s in steps)
        if data["reboot"]:
            reason += f"; then reboot ({data['reboot_reason']})"
        return Plan(True, reason, diff="\n".join(f"+ {s.what}" for s in steps) + "\n", data=data)

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        done = []
        for step in plan.data["_steps"]:  # as planned: the host was asked once, by plan()
            if step.key == "nouveau":
                ctx.run("mkdir -p /etc/modprobe.d", check=True, what="mkdir /etc/modprobe.d")
                ctx.write_file(
                    NOUVEAU_CONF,
                    NOUVEAU_TEXT.encode(),
                    mode="0644",
                    owner="root",
                    group="root",
                    backup=True,
                )
                ctx.run(INITRAMFS, check=True, what="regenerate the initramfs", timeout=900)
            for command in step.commands:
                ctx.run(command, check=True, what=step.what, timeout=1800)
            done.append(step.what)
        msg = "; ".join(done) or plan.reason
        if plan.data.get("reboot"):
            msg += f"; reboot needed ({plan.data['reboot_reason']})"
        return TaskResult(Status.CHANGED, msg, plan.diff, plan.data_public())
