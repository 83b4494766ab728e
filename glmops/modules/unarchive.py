"""unarchive: unpack a tar (any compression tar knows) or zip archive into a folder."""

from __future__ import annotations

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.modules.base import Arg, Module, Plan, register


@register
class Unarchive(Module):
    """Unpack `src` (a controller file, or one on the host with `remote_src: true`) into the
    existing folder `dest`; done when every member of the archive is already there."""

    name = "unarchive"
    args = {
        "src": Arg(str, required=True, doc="the archive (.tar, .tar.gz, .tgz, .tar.xz, .zip)"),
        "dest": Arg(str, required=True, doc="an existing folder on the host"),
        "remote_src": Arg(bool, default=False, doc="src is already on the host"),
        "creates": Arg(str, doc="skip when this path exists"),
    }

    def _zip(self) -> bool:
        return self.params["src"].lower().endswith(".zip")

    def _archive(self, ctx: TaskContext) -> tuple[str, bool]:
        """The archive's path on the host, and whether it is a temporary upload."""
        if self.params["remote_src"]:
            return self.params["src"], False
        return ctx.upload_temp(ctx.find_file(self.params["src"], "files").read_bytes()), True

    def plan(self, ctx: TaskContext) -> Plan:
        dest, creates = self.params["dest"], self.params["creates"]
        if creates and ctx.run(f"test -e {quote(creates)}").ok:
            return Plan(False, f"{creates} exists")
        if not ctx.run(f"test -d {quote(dest)}").ok:
            raise ModuleError(f"unarchive: {dest} is not a folder on the host")
        archive, temporary = self._archive(ctx)
        try:
            lister = f"unzip -Z1 {quote(archive)}" if self._zip() else f"tar -tf {quote(archive)}"
            listed = ctx.run(lister, check=True, what=f"list {self.params['src']}")
            members = [m for m in listed.stdout.splitlines() if m and not m.endswith("/")]
            missing = ctx.run(
                f"cd {quote(dest)} && for m in {' '.join(quote(m) for m in members)}; do "
                '[ -e "$m" ] || echo "$m"; done'
            )
        finally:
            if temporary:
                ctx.run(f"rm -f {quote(archive)}")
        absent = missing.stdout.split()
        if not absent:
            return Plan(
                False, f"all {len(members)} member(s) of {self.params['src']} are in {dest}"
            )
        return Plan(True, f"would unpack {self.params['src']} into {dest} ({len(absent)} missing)")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        dest = quote(self.params["dest"])
        archive, temporary = self._archive(ctx)
        try:
            unpack = (
                f"unzip -o -q {quote(archive)} -d {dest}"
                if self._zip()
                else f"tar -xf {quote(archive)} -C {dest}"
            )
            ctx.run(unpack, check=True, what=f"unpack {self.params['src']}")
        finally:
            if temporary:
                ctx.run(f"rm -f {quote(archive)}")
        return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "))
