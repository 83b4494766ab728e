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
        for batch in batches([src / name for name in plan.data["push"]], chunk):
            self._push(ctx, batch, dest, chunk)
        return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "), plan.diff)

    def _push(self, ctx: TaskContext, batch: list[Path], dest: str, chunk: int) -> None:
        """Upload the batch's files in chunks, then assemble and check them all in one command
        (a wheelhouse is mostly small wheels: a command each cost more than their bytes)."""
        parts: list[str] = []
        steps = []
        try:
            for path in batch:
                own: list[str] = []
                with path.open("rb") as f:
                    for data in iter(lambda: f.read(chunk), b""):
                        own.append(ctx.upload_temp(data))
                parts += own
                steps.append(assemble(own, f"{dest}/{path.name}", sha256_file(path)))
            ctx.run(
                " ; ".join(steps),
                check=True,
                what=f"assemble {len(batch)} file(s) in {dest}",
                timeout=1800,
            )
        finally:
            if parts:
                ctx.conn.run(f"rm -f {' '.join(quote(p) for p in parts)}", timeout=120)


def batches(paths: list[Path], chunk: int, most: int = 64) -> list[list[Path]]:
    """Consecutive files in groups of up to `chunk` bytes (a larger file alone) and `most`
    files, so one command assembles many small wheels."""
    out: list[list[Path]] = []
    size = 0
    for path in paths:
        n = path.stat().st_size
        if not out or size + n > chunk or len(out[-1]) >= most:
            out.append([])
            size = 0
        out[-1].append(path)
        size += n
    return out


def assemble(parts: list[str], target: str, digest: str) -> str:
    """Shell that joins the uploaded parts beside the target, checks the SHA-256 and renames
    it in place; on any failure it removes the partial file and exits with its code."""
    tmp = quote(f"{target}.glmops-tmp")
    joined = " ".join(quote(p) for p in parts) or "/dev/null"
    return (
        f"{{ cat {joined} > {tmp} && "
        f"echo {quote(digest + '  ' + target + '.glmops-tmp')} | sha256sum -c --quiet - && "
        f"chmod 644 {tmp} && mv -f {tmp} {quote(target)}"
        f" || {{ rc=$?; rm -f {tmp}; exit $rc; }}; }}"
    )
