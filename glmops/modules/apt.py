"""apt: Debian packages present or absent; the package cache refreshed only when stale."""

from __future__ import annotations

import fnmatch

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.modules.base import Arg, Module, Plan, register

APT_ENV = "DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a"


@register
class Apt(Module):
    """`apt: {name: [curl, jq], state: present}`; refreshes the cache first when it is older
    than `cache_valid_time` seconds and something must be installed."""

    name = "apt"
    free_form = "name"
    changes_facts = True
    args = {
        "name": Arg(
            (str, list),
            required=True,
            doc="a package or a list of packages; name=version (or a glob) pins a version",
        ),
        "state": Arg(str, default="present", choices=("present", "absent")),
        "update_cache": Arg(bool, default=False, doc="refresh the cache even if it is fresh"),
        "cache_valid_time": Arg(int, default=3600, doc="seconds before the cache is stale"),
        "install_recommends": Arg(bool, default=False),
    }

    def packages(self) -> list[str]:
        names = self.params["name"]
        return [names] if isinstance(names, str) else [str(n) for n in names]

    def plan(self, ctx: TaskContext) -> Plan:
        names = self.packages()
        result = ctx.run(
            "dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' "
            + " ".join(quote(n.split("=")[0]) for n in names)
            + " 2>/dev/null"
        )
        installed = {}  # package -> version, for those installed
        for line in result.stdout.splitlines():
            package, version, status = (line.split("\t") + ["", ""])[:3]
            if status.startswith("ii"):
                installed[package] = version
        present = self.params["state"] == "present"
        wanted = [n for n in names if _is_installed(n, installed) != present]
        if not wanted:
            return Plan(False, f"{', '.join(names)}: already {self.params['state']}")
        verb = "install" if present else "remove"
        return Plan(True, f"would {verb} {', '.join(wanted)}", data={"packages": wanted})

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        packages = " ".join(quote(n) for n in plan.data["packages"])
        if self.params["state"] == "present":
            if self.params["update_cache"] or self._cache_stale(ctx):
                ctx.run(f"{APT_ENV} apt-get update -q", check=True, what="apt-get update")
            recommends = "" if self.params["install_recommends"] else " --no-install-recommends"
            result = ctx.run(f"{APT_ENV} apt-get install -y -q{recommends} {packages}")
        else:
            result = ctx.run(f"{APT_ENV} apt-get remove -y -q {packages}")
        if not result.ok:
            tail = (result.stderr.strip() or result.stdout.strip())[-800:]
            return TaskResult(Status.FAILED, f"apt-get failed (rc={result.rc}): {tail}")
        return TaskResult(
            Status.CHANGED,
            plan.reason.removeprefix("would ")
            .replace("install", "installed", 1)
            .replace("remove", "removed", 1),
        )

    def _cache_stale(self, ctx: TaskContext) -> bool:
        age = ctx.run(
            "echo $(( $(date +%s) - $(stat -c %Y /var/lib/apt/lists/partial "
            "/var/cache/apt/pkgcache.bin 2>/dev/null | sort -n | tail -1 || echo 0) ))"
        )
        try:
            return int(age.stdout.strip()) > self.params["cache_valid_time"]
        except ValueError:
            return True


def _is_installed(spec: str, installed: dict[str, str]) -> bool:
    """`name` is installed in any version; `name=version` (a glob, as apt takes it: `1.2*`)
    only in a matching one."""
    package, pinned, version = spec.partition("=")
    if package not in installed:
        return False
    return not pinned or fnmatch.fnmatchcase(installed[package], version)
