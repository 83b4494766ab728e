#!/usr/bin/env python3
"""uv at a pinned version, and a uv-managed venv with a pinned Python (stdlib only).

Arguments (on stdin): {"venv": "/opt/vllm", "python": "3.12", "uv_version": "0.13.9",
                        "uv_dir": "/opt/glmops/uv", "wheelhouse": "/var/cache/glmops/wheelhouse",
                       "check": true}

uv comes from the pushed wheelhouse when it holds the uv wheel (the wheel carries the static
binary in uv-<v>.data/scripts/, so unzipping it is the whole install: no pip, no internet),
else from PyPI through pip in a bootstrap venv. Managed Pythons go under <uv_dir>/python so
they belong to the system, not to whoever ran uv first. Prints one JSON object.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import subprocess
import sys
import zipfile

from _envelope import Reply, main

VERSION_SCRIPT = "import sys; print('%d.%d.%d' % sys.version_info[:3])"


class VenvReply(Reply, total=False):
    """All keys on success; a failed reply (any exception) carries only the envelope's."""

    uv: str  # the uv binary, <uv_dir>/bin/uv
    venv: str
    uv_version_before: str | None  # None: no uv there (or it did not run)
    python_before: str | None  # the venv's Python (x.y.z) before; None: no venv
    python_version: str | None  # the venv's Python after (unchanged under check)
    changes: list  # what was done, or would be under check, one line each


def run(argv: list, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def uv_version(path: str) -> str | None:
    """'uv 0.13.9 (abc 2026-11-01)' -> '0.13.9'; None when absent or broken."""
    if not os.path.exists(path):
        return None
    try:
        out = run([path, "--version"], timeout=30)
    except OSError:
        return None
    parts = out.stdout.split()
    return parts[1] if out.returncode == 0 and len(parts) > 1 else None


def find_uv_wheel(wheelhouse: str | None, version: str) -> str | None:
    if not wheelhouse:
        return None
    machine = platform.machine()
    for path in sorted(glob.glob(os.path.join(wheelhouse, f"uv-{version}-*.whl"))):
        if machine in os.path.basename(path):
            return path
    return None


def install_uv_from_wheel(wheel: str, bindir: str) -> None:
    os.makedirs(bindir, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            base = os.path.basename(name)
            if ".data/scripts/" in name and base in ("uv", "uvx"):
                tmp = os.path.join(bindir, f".{base}.tmp")
                with zf.open(name) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.chmod(tmp, 0o755)
                os.replace(tmp, os.path.join(bindir, base))


def install_uv_from_pypi(uv_dir: str, version: str) -> None:
    boot = os.path.join(uv_dir, "bootstrap")
    for argv in (
        [sys.executable, "-m", "venv", boot],
        [os.path.join(boot, "bin", "pip"), "install", "-q", f"uv=={version}"],
    ):
        out = run(argv)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {(out.stderr or out.stdout).strip()[-500:]}")
    bindir = os.path.join(uv_dir, "bin")
    os.makedirs(bindir, exist_ok=True)
    for name in ("uv", "uvx"):
        link = os.path.join(bindir, name)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.join(boot, "bin", name), link)


def venv_python_version(venv: str) -> str | None:
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        return None
    try:
        out = run([py, "-c", VERSION_SCRIPT], timeout=60)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def ensure(a: dict) -> VenvReply:
    check = bool(a.get("check"))
    venv, want_py, want_uv = a["venv"], str(a["python"]), str(a["uv_version"])
    uv_dir = a.get("uv_dir") or "/opt/glmops/uv"
    uv = os.path.join(uv_dir, "bin", "uv")
    changes: list = []

    have_uv = uv_version(uv)
    if have_uv != want_uv:
        wheel = find_uv_wheel(a.get("wheelhouse"), want_uv)
        source = f"wheel {os.path.basename(wheel)}" if wheel else "PyPI (pip, bootstrap venv)"
        changes.append(f"install uv {want_uv} from {source} (have {have_uv or 'none'})")
        if not check:
            if wheel:
                install_uv_from_wheel(wheel, os.path.join(uv_dir, "bin"))
            else:
                install_uv_from_pypi(uv_dir, want_uv)
            got = uv_version(uv)
            if got != want_uv:
                raise RuntimeError(f"uv {want_uv} installed but {uv} reports {got}")

    have_py = python_before = venv_python_version(venv)
    same = have_py is not None and (have_py + ".").startswith(want_py + ".")
    if not same:
        verb = "create" if have_py is None else f"recreate (has Python {have_py})"
        changes.append(f"{verb} venv {venv} with Python {want_py}")
        if not check:
            env = {
                "UV_PYTHON_INSTALL_DIR": os.path.join(uv_dir, "python"),
                "UV_PYTHON_DOWNLOADS": a.get("python_downloads") or "automatic",
            }
            argv_ = [uv, "venv", "--no-project", "--python", want_py]
            if have_py is not None:
                argv_.append("--clear")
            res = run([*argv_, venv], env=env)
            if res.returncode != 0:
                raise RuntimeError(f"uv venv failed: {(res.stderr or res.stdout).strip()[-800:]}")
            have_py = venv_python_version(venv)
    if changes:
        msg = ("would " if check else "") + "; ".join(changes)
    else:
        msg = f"uv {have_uv} at {uv}; {venv} has Python {have_py}"
    return {
        "failed": False,
        "changed": bool(changes),
        "msg": msg,
        "uv": uv,
        "venv": venv,
        "uv_version_before": have_uv,
        "python_before": python_before,
        "python_version": have_py,
        "changes": changes,
    }


if __name__ == "__main__":
    main(ensure, expected=(Exception,))  # one JSON reply, whatever happened
