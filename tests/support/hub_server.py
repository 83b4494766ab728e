"""A real Hub-compatible server for tests: olah (PyPI) in offline mode over local git repos.

olah serves repos found under its mirrors path (`<dir>/models/<org>/<name>`, branch `main`)
with the Hub's HTTP API. Large files are committed as git-lfs pointers with the object kept
in `.git/lfs/objects`, so the tree listing carries real LFS sha256 and size as the Hub's does.
olah is installed from PyPI into its own venv under ~/.cache/glmops, apart from glmops' env.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OLAH = "olah==0.5.4"
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"


def olah_venv() -> Path:
    """The venv with olah, created once per machine; a lock keeps parallel runs apart."""
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    venv = Path(xdg) / "glmops" / f"olah-venv-{OLAH.split('==')[1]}"
    done = venv / ".glmops-complete"
    if done.exists():
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / ".olah-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            # a venv's scripts name their interpreter by path, so it is built where it stays;
            # the marker is written last, so a half-built venv is rebuilt
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
            subprocess.run([*pip, OLAH], check=True)
            done.write_text(OLAH + "\n")
    return venv


class HubRepo:
    """A git repo olah serves; files over `lfs_over` bytes are committed as LFS pointers."""

    def __init__(self, mirrors: Path, repo_id: str, lfs_over: int = 1024):
        self.path = mirrors / "models" / repo_id
        self.lfs_over = lfs_over
        self.path.mkdir(parents=True, exist_ok=True)
        if not (self.path / ".git").exists():
            self._git("init", "-q", "-b", "main")

    def _git(self, *args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
        env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")
        out = subprocess.run(
            ["git", *args], cwd=self.path, env=env, check=True, capture_output=True, text=True
        )
        return out.stdout.strip()

    def put(self, name: str, data: bytes) -> None:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if len(data) <= self.lfs_over:
            target.write_bytes(data)
            return
        oid = hashlib.sha256(data).hexdigest()
        obj = self.path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(data)
        target.write_text(LFS_POINTER.format(oid=oid, size=len(data)))

    def commit(self, message: str = "files") -> str:
        self._git("add", "-A")
        self._git("commit", "-q", "-m", message)
        return self._git("rev-parse", "HEAD")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def olah_server(workdir: Path, host: str = "127.0.0.1") -> Iterator[tuple[str, Path]]:
    """Start olah offline over `<workdir>/mirrors`; yields (endpoint URL, mirrors dir)."""
    mirrors = workdir / "mirrors"
    mirrors.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = workdir / "olah.toml"
    config.write_text(
        f'[basic]\nhost = "{host}"\nport = {port}\nrepos-path = "{workdir / "repos"}"\n'
        f'mirrors-path = ["{mirrors}"]\n[accessibility]\noffline = true\n'
    )
    log = open(workdir / "olah.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(olah_venv() / "bin" / "olah-cli"), "-c", str(config)],
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/api/models/none/none", timeout=2)
            except urllib.error.HTTPError:
                break  # it answers: a 404 for a repo it lacks
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"olah did not start: {(workdir / 'olah.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.3)
            else:
                break
        yield endpoint, mirrors
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
