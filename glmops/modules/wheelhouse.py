"""wheelhouse: push a controller-side folder of wheels to a host that has no internet.

Files are compared by SHA-256, so only missing or different wheels travel; a second run
uploads nothing. Large wheels (vLLM is ~350 MB) go in chunks, so the controller never holds
more than one chunk in memory; each file is checked on the host before it is renamed in place.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.hosthelpers._envelope import file_sha256
from glmops.modules.base import Arg, Module, Plan, register
from glmops.pins import WHEELHOUSE_DIR

_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, per process


def sha256_file(path: Path) -> str:
    """The file's SHA-256, remembered while it is unchanged (plan and apply both need it)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_sha256(str(path))
    return _DIGESTS[key]


def local_files(src: Path, patterns: list[str]) -> dict[str, Path]:
    if not src.is_dir():
        raise ModuleError(f"wheelhouse: {src} is not a folder on the controller")
    return {
        p.name: p
        for p in sorted(src.iterdir())
        if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in patterns)
    }


def parse_sha256sum(text: str) -> dict[str, str]:
    """`sha256sum` output -> {file name: digest}."""
    out = {}
    for line in text.splitlines():
        digest, _, path = line.partition("  ")
        if path:
            out[path.rsplit("/", 1)[-1]] = digest
    return out


@register
class Wheelhouse(Module):
    """`wheelhouse: {src: ~/.cache/glmops/wheelhouse/x, dest: /var/cache/glmops/wheelhouse}`."""

    name = "wheelhouse"
    args = {
        "src": Arg(str, required=True, doc="folder of wheels on the controller"),
        "dest": Arg(str, default=WHEELHOUSE_DIR, doc="folder on the host"),
        "patterns": Arg(list, default=["*.whl"], doc="file name globs to push"),
        "chunk_mib": Arg(int, default=64, doc="upload chunk size"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        src = Path(self.params["src"]).expanduser()
        files = local_files(src, [str(p) for p in self.params["patterns"]])
        dest = self.params["dest"]
        remote = ctx.run(
            f"[ -d {quote(dest)} ] && find {quote(dest)} -maxdepth 1 -type f "
            "-exec sha256sum {} + || true",
            check=True,
            what=f"list {dest}",
            timeout=600,
        )
        there = parse_sha256sum(remote.stdout)
        if not files:
            return Plan(False, f"no files matching {self.params['patterns']} in {src}")
        missing = [n for n, p in files.items() if there.get(n) != sha256_file(p)]
        if not missing:
            return Plan(False, f"{len(files)} file(s) already in {dest} (same SHA-256)")
        size = sum(files[n].stat().st_size for n in missing) / (1 << 20)
        return Plan(
            True,
            f"would push {len(missing)} of {len(files)} file(s) ({size:.0f} MiB) to {dest}: "
            + ", ".join(missing),
            diff="".join(f"+ {dest}/{n}\n" for n in missing),
            data={"push": missing, "dest": dest, "src": str(src)},
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        dest, src = plan.data["dest"], Path(plan.data["src"])
        ctx.run(f"mkdir -p -m 755 {quote(dest)}", check=True, what=f"mkdir {dest}")
        chunk = max(1, self.params["chunk_mib"]) << 20
        for name in plan.data["push"]:
            self._push(ctx, src / name, f"{dest}/{name}", chunk)
        return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "), plan.diff)

    def _push(self, ctx: TaskContext, path: Path, target: str, chunk: int) -> None:
        parts: list[str] = []
        tmp = f"{target}.glmops-tmp"
        try:
            with path.open("rb") as f:
                for data in iter(lambda: f.read(chunk), b""):
                    parts.append(ctx.upload_temp(data))
            digest = sha256_file(path)
            joined = " ".join(quote(p) for p in parts)
            ctx.run(
                f"cat {joined} > {quote(tmp)} && "
                f"echo {quote(digest + '  ' + tmp)} | sha256sum -c --quiet - && "
                f"chmod 644 {quote(tmp)} && mv -f {quote(tmp)} {quote(target)}"
                f" || {{ rc=$?; rm -f {quote(tmp)}; exit $rc; }}",
                check=True,
                what=f"assemble {target}",
                timeout=1800,
            )
        finally:
            if parts:
                ctx.conn.run(f"rm -f {' '.join(quote(p) for p in parts)}", timeout=120)
