"""Real vLLM wheels from PyPI for CPU tests, cached outside the repo (never commit vLLM code).

fetch_vllm_source(v)   -> ~/.cache/glmops/vllm-src/<v>/ holding the wheel's `vllm/` package
                          (compiled .so files left out: they need CUDA; see cpu_stub.py)
fetch_vllm_deps(v)     -> ~/.cache/glmops/vllm-deps/<v>/: the pure-Python packages vLLM's
                          selection code imports, at the versions the wheel's METADATA pins
compiled_modules(v)    -> the dotted names of the wheel's compiled extension modules
fetch_plugin_source()  -> ~/.cache/glmops/plugin-src/<v>/ holding vllm-gguf-plugin's package
                          (the same way; install_plugin copies it into a scratch site-packages)
Torch is not installed here: the test environment's CPU torch is used. Each entry is filled
under its cache lock, so test tiers running side by side on a fresh machine wait for one
download instead of racing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from glmops.gpu.wheelcache import cache_lock

CACHE = Path(os.environ.get("GLMOPS_CACHE", Path.home() / ".cache" / "glmops"))
WHEELS = CACHE / "wheels"
SOURCES = CACHE / "vllm-src"
DEPS = CACHE / "vllm-deps"
PLUGIN_SOURCES = CACHE / "plugin-src"
# vLLM 0.24+ loads GGUF through this out-of-tree package (item 2d patches it too).
PLUGIN, PLUGIN_PACKAGE, PLUGIN_VERSION = "vllm-gguf-plugin", "vllm_gguf_plugin", "0.0.5"

# Imported (transitively) by vllm.platforms.cuda, vllm.v1.attention.selector and the MLA
# backend modules; found by importing them on a CPU machine until nothing was missing.
IMPORT_DEPS = (
    "psutil",
    "cbor2",
    "huggingface_hub",
    "transformers",
    "aiohttp",
    "pyzmq",
    "pydantic",
    "msgspec",
    "cachetools",
    "regex",
    "openai-harmony",
    "openai",
    "pillow",
    "pybase64",
    "uvloop",
    "prometheus_client",
    "fastapi",
    "partial_json_parser",
    "einops",
    "llguidance",
    "nvidia-ml-py",  # pynvml, imported by FlashInfer backends
    "cloudpickle",
    "py-cpuinfo",
)
# These declare a CUDA torch (or native stacks) as a dependency: install without deps.
NO_DEPS = ("xgrammar", "apache-tvm-ffi", "flashinfer-python")


def fetch_wheel(project: str, version: str) -> Path:
    """A PyPI wheel of project==version (downloaded once into the cache)."""
    pattern = f"{project.replace('-', '_')}-{version}-*.whl"
    with cache_lock(WHEELS / f"{project}-{version}"):  # pip copies the wheel in: not atomic
        found = sorted(WHEELS.glob(pattern))
        if not found:
            _download_wheel(project, version)
    return sorted(WHEELS.glob(pattern))[0]


def _download_wheel(project: str, version: str) -> None:
    """pip writes the wheel under its own temporary name and moves it into place whole."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-q",
            f"{project}=={version}",
            "-d",
            str(WHEELS),
        ],
        check=True,
    )


def fetch_vllm_wheel(version: str) -> Path:
    return fetch_wheel("vllm", version)


#: What `vllm serve` (0.16 and 0.33) imports before it looks for a GPU that the CPU wheelhouse,
#: built for vLLM's CPU build, lacks; found by starting it until only the GPU was missing.
SERVE_DEPS = (
    ("diskcache", "5.6.3"),
    ("openai-harmony", "0.0.8"),
    ("grpcio-reflection", "1.85.1"),
    ("orjson", "3.13.0"),
)


def fetch_serve_deps() -> list[Path]:
    """The SERVE_DEPS wheels (cached), to install `--no-deps` beside a vLLM wheel."""
    return [fetch_wheel(project, version) for project, version in SERVE_DEPS]


def _unpack(whl: Path, package: str, dest: Path, skip: tuple[str, ...] = ()) -> Path:
    """The wheel's `package/` under dest (cached), without its compiled .so files, whose
    dotted names go to dest/compiled_modules.json; the wheel's METADATA beside it."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    compiled = []
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.startswith(f"{package}/") or name.endswith("/") or name in skip:
                continue
            if name.endswith(".so"):
                compiled.append(name[: -len(".so")].split(".")[0].replace("/", "."))
                continue
            zf.extract(info, tmp)
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        (tmp / "METADATA").write_bytes(zf.read(meta))
    (tmp / "compiled_modules.json").write_text(json.dumps(sorted(compiled)))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    (dest / ".complete").write_text(whl.name)
    return dest


def fetch_vllm_source(version: str) -> Path:
    """Unpacked `vllm/` package of the PyPI wheel (cached); the returned dir is the
    site-packages-like root that contains `vllm/`."""
    dest = SOURCES / version
    if (dest / ".complete").is_file():
        return dest
    whl = fetch_vllm_wheel(version)
    with cache_lock(dest):
        if (dest / ".complete").is_file():
            return dest
        # vllm/vllm-rs is a native binary, not importable code
        return _unpack(whl, "vllm", dest, skip=("vllm/vllm-rs",))


def fetch_plugin_source(version: str = PLUGIN_VERSION) -> Path:
    """Unpacked `vllm_gguf_plugin/` of the PyPI wheel (cached), like fetch_vllm_source."""
    dest = PLUGIN_SOURCES / version
    if (dest / ".complete").is_file():
        return dest
    whl = fetch_wheel(PLUGIN, version)
    with cache_lock(dest):
        if (dest / ".complete").is_file():
            return dest
        return _unpack(whl, PLUGIN_PACKAGE, dest)


def plugin_compiled_modules(version: str = PLUGIN_VERSION) -> list[str]:
    return json.loads((fetch_plugin_source(version) / "compiled_modules.json").read_text())


def install_plugin(site_packages: Path, version: str = PLUGIN_VERSION) -> Path:
    """Copy the plugin package into a scratch site-packages, as pip would put it there."""
    shutil.copytree(fetch_plugin_source(version) / PLUGIN_PACKAGE, site_packages / PLUGIN_PACKAGE)
    return site_packages / PLUGIN_PACKAGE


def compiled_modules(version: str) -> list[str]:
    return json.loads((fetch_vllm_source(version) / "compiled_modules.json").read_text())


def _pins(version: str) -> dict[str, str]:
    """Unconditional Requires-Dist lines of the wheel, by normalized name."""
    text = (fetch_vllm_source(version) / "METADATA").read_text()
    pins = {}
    for line in text.splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            req = line.split(":", 1)[1].split(";", 1)[0].strip()
            name = re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0]
            pins[name.lower().replace("_", "-")] = req
    return pins


def fetch_vllm_deps(version: str) -> Path:
    dest = DEPS / version
    wanted = "\n".join((*IMPORT_DEPS, "--no-deps", *NO_DEPS))
    done = dest / ".complete"
    if done.is_file() and done.read_text() == wanted:
        return dest
    with cache_lock(dest):
        if done.is_file() and done.read_text() == wanted:
            return dest
        return _install_deps(version, dest, wanted)


def _install_deps(version: str, dest: Path, wanted: str) -> Path:
    done = dest / ".complete"
    pins = _pins(version)

    def spec(name: str) -> str:
        return pins.get(name.lower().replace("_", "-"), name)

    shutil.rmtree(dest, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--target", str(dest)]
    subprocess.run([*pip, *(spec(n) for n in IMPORT_DEPS)], check=True)
    subprocess.run([*pip, "--no-deps", *(spec(n) for n in NO_DEPS)], check=True)
    done.write_text(wanted)
    return dest


def scratch_copy(version: str, where: Path) -> Path:
    """A writable copy of the unpacked tree (tests patch it), as where/site-packages."""
    src = fetch_vllm_source(version)
    dest = where / "site-packages"
    where.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "vllm", dest / "vllm")
    return dest
