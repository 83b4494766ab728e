"""reboot: reboot a host and wait until it is back with a NEW boot_id.

Why this shape (pyinfra's reboot operation shows the failure modes): a reboot command over SSH
can kill the channel before it answers, so the reboot is scheduled detached; "SSH answers" is not
proof of a reboot (the host may not have gone down yet), so success needs a boot_id other than
the one recorded before. glmops never reboots the machine it runs on: `connection: local`, or a
host whose machine-id or boot_id equals the controller's, is refused.
Gate it with `when:` (e.g. on nvidia_driver's `reboot`); it always plans a change.
"""

from __future__ import annotations

import time
from pathlib import Path

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import CommandTimeout, GlmopsError, HostKeyChanged, ModuleError
from glmops.modules.base import Arg, Module, Plan, register

BOOT_ID = "/proc/sys/kernel/random/boot_id"
IDENTITY = f'printf \'%s\\n\' "$(cat /etc/machine-id 2>/dev/null)" "$(cat {BOOT_ID})"'
# systemd-run returns at once and the reboot happens a second later, outside our session;
# without systemd-run (containers, the H200 host without systemctl), a detached nohup.
REBOOT = (
    "if command -v systemd-run >/dev/null 2>&1 && [ -d /run/systemd/system ]; then "
    "systemd-run --quiet --on-active=1 --timer-property=AccuracySec=100ms systemctl reboot; "
    "else nohup sh -c 'sleep 1; systemctl reboot || reboot' >/dev/null 2>&1 & fi"
)


def controller_identity() -> tuple[str | None, str | None]:
    """This machine's machine-id and boot_id (None where the OS has none, e.g. macOS)."""
    values = []
    for path in ("/etc/machine-id", BOOT_ID):
        try:
            values.append(Path(path).read_text().strip() or None)
        except OSError:
            values.append(None)
    return values[0], values[1]


def refusal(
    connection: str, host_ids: tuple[str | None, str | None], local_ids: tuple[str | None, ...]
) -> str | None:
    """Why this host is the controller itself (so must not be rebooted), or None."""
    if connection == "local":
        return "connection: local is the machine glmops runs on"
    (h_mid, h_boot), (l_mid, l_boot) = host_ids, local_ids
    if h_boot and h_boot == l_boot:
        return f"the host's boot_id {h_boot} is the controller's: same running kernel"
    if h_mid and h_mid == l_mid:
        return f"the host's machine-id {h_mid} is the controller's"
    return None


@register
class Reboot(Module):
    """`reboot: {reason: "driver install"}` with `when: driver.reboot`."""

    name = "reboot"
    changes_facts = True
    args = {
        "reason": Arg(str, default="requested", doc="why (shown in the plan and the result)"),
        "timeout": Arg((int, float), default=600, doc="seconds to wait for a new boot_id"),
        "delay": Arg((int, float), default=2, doc="seconds between reconnect attempts"),
        "test_command": Arg(str, default="true", doc="must succeed once the host is back"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        ids = ctx.run(IDENTITY, check=True, what="read machine-id and boot_id").stdout.splitlines()
        host_ids = ((ids[0] if ids else "") or None, (ids[1] if len(ids) > 1 else "") or None)
        why_not = refusal(ctx.host.connection.connection, host_ids, controller_identity())
        if why_not:
            raise ModuleError(f"refusing to reboot {ctx.host.name}: {why_not}")
        if not host_ids[1]:
            raise ModuleError(f"cannot read {BOOT_ID} on {ctx.host.name}: no way to prove a reboot")
        return Plan(
            True,
            f"would reboot ({self.params['reason']}); boot_id now {host_ids[1]}",
            data={"boot_id": host_ids[1], "reason": self.params["reason"]},
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        old = plan.data["boot_id"]
        started = time.monotonic()
        deadline = started + float(self.params["timeout"])
        ctx.run(REBOOT, check=True, what="schedule the reboot", timeout=60)
        last = "no answer yet"
        time.sleep(1.5)
        while time.monotonic() < deadline:
            try:
                ctx.reopen()
                result = ctx.run(f"cat {BOOT_ID}", timeout=30)
                new = result.stdout.strip()
                if result.ok and new and new != old:
                    test = ctx.run(self.params["test_command"], timeout=120)
                    if not test.ok:
                        last = f"test command failed (rc={test.rc}): {test.stderr.strip()[-300:]}"
                    else:
                        took = time.monotonic() - started
                        return TaskResult(
                            Status.CHANGED,
                            f"rebooted ({self.params['reason']}) in {took:.0f} s: "
                            f"boot_id {old} -> {new}",
                            data={"boot_id": new, "previous_boot_id": old, "seconds": took},
                        )
                else:
                    last = "the host still answers with the old boot_id (not down yet)"
            except HostKeyChanged as error:
                return TaskResult(Status.FAILED, f"after the reboot: {error}")
            except (GlmopsError, CommandTimeout) as error:
                last = str(error)
            time.sleep(float(self.params["delay"]))
        return TaskResult(
            Status.FAILED,
            f"no new boot_id within {self.params['timeout']} s after the reboot "
            f"(was {old}); last: {last}",
        )
