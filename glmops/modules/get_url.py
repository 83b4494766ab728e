"""get_url: download a URL on the host to `dest`, checked against a sha256 checksum."""

from __future__ import annotations

import json

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.modules.base import Arg, Module, Plan, mode_arg, register
from glmops.modules.file import _attribute_commands

# Run by the host's python3: arguments on stdin (a URL may carry a token). The download goes to
# a temp file of a fresh name beside dest, created exclusively (mkstemp: nobody can have placed
# a file or link there first); prints its path, then the sha256.
FETCH = """
import hashlib, json, os, sys, tempfile, urllib.request
a = json.loads(sys.stdin.read())
fd, tmp = tempfile.mkstemp(dir=a["folder"], prefix=a["prefix"], suffix=".glmops-download")
print(tmp, flush=True)
digest = hashlib.sha256()
with urllib.request.urlopen(a["url"], timeout=a["timeout"]) as reply, os.fdopen(fd, "wb") as out:
    while chunk := reply.read(1 << 20):
        digest.update(chunk)
        out.write(chunk)
print(digest.hexdigest())
"""


@register
class GetUrl(Module):
    """Download `url` to `dest` on the host; with `checksum: sha256:<hex>` a file that already
    matches is left alone and a download that does not match is refused."""

    name = "get_url"
    args = {
        "url": Arg(str, required=True),
        "dest": Arg(str, required=True, doc="the file on the host"),
        "checksum": Arg(str, doc="sha256:<hex>; without it an existing dest is kept"),
        "timeout": Arg(int, default=60, doc="seconds for the connection to answer"),
        "mode": mode_arg(),
        "owner": Arg(str),
        "group": Arg(str),
    }

    def wanted_sha(self) -> str | None:
        checksum = self.params["checksum"]
        if checksum is None:
            return None
        algorithm, _, value = checksum.partition(":")
        if algorithm != "sha256" or len(value) != 64:
            raise ModuleError(f"get_url: checksum must be sha256:<64 hex digits>, got {checksum!r}")
        return value.lower()

    def plan(self, ctx: TaskContext) -> Plan:
        dest, wanted = self.params["dest"], self.wanted_sha()
        current = ctx.stat(dest)
        if current is not None and current.kind != "file":
            raise ModuleError(f"{dest} is a {current.kind}, not a file")
        if current is not None and wanted is None:
            return Plan(False, f"{dest} exists (no checksum to compare)")
        if current is not None and current.sha256 == wanted:
            return Plan(False, f"{dest} has the wanted sha256 ({(wanted or '')[:12]})")
        verb = "download" if current is None else "replace"
        return Plan(True, f"would {verb} {dest} from {self.params['url']}")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        dest, wanted = self.params["dest"], self.wanted_sha()
        folder, _, base = dest.rpartition("/")
        prefix = f".{base}."
        args = {"url": self.params["url"], "timeout": self.params["timeout"]}
        args |= {"folder": folder or "/", "prefix": prefix}
        fetched = ctx.run(f"python3 -c {quote(FETCH)}", stdin=json.dumps(args))
        lines = fetched.stdout.splitlines()
        tmp = _temp_path(lines[0] if lines else "", folder, prefix)
        if not fetched.ok:
            if tmp:
                ctx.run(f"rm -f {quote(tmp)}")
            tail = fetched.stderr.strip().splitlines()[-1:] or ["no reason given"]
            raise ModuleError(f"cannot download {self.params['url']}: {tail[0]}")
        got = lines[-1].strip() if len(lines) > 1 else ""
        if not tmp:
            raise ModuleError(f"get_url: the host named no temp file beside {dest}: {lines[:1]}")
        if wanted is not None and got != wanted:
            ctx.run(f"rm -f {quote(tmp)}")
            raise ModuleError(
                f"{self.params['url']}: sha256 {got[:12]} is not the wanted {wanted[:12]}; "
                f"{dest} was left as it was"
            )
        steps = [*_attribute_commands(quote(tmp), self.params), f"mv -f {quote(tmp)} {quote(dest)}"]
        ctx.run(" && ".join(steps), check=True, what=f"put {dest} in place")
        return TaskResult(
            Status.CHANGED, plan.reason.removeprefix("would "), data={"sha256": got, "dest": dest}
        )


def _temp_path(reported: str, folder: str, prefix: str) -> str | None:
    """The temp file the host reported, if it is one FETCH could have made: directly in
    `folder`, with its prefix, no other part (the host's answer is data, checked like any)."""
    name = reported.removeprefix(f"{folder}/")
    ok = (
        name != reported
        and name.startswith(prefix)
        and name.endswith(".glmops-download")
        and "/" not in name
        and not any(ord(c) < 32 for c in name)
    )
    return reported if ok else None
