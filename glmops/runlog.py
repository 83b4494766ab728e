"""Per-run logs: one directory per run, a log file per host, secrets masked everywhere.

Each remote command is recorded with its rc, duration and the tail of its output, so a failure
can be understood after the fact without re-running anything.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

SECRET_NAME = re.compile(r"(password|passwd|secret|token|api_key|apikey|private_key)", re.I)
MASK = "********"
OUTPUT_TAIL = 2000


class Masker:
    """Replaces every known secret value in text: vars named like secrets, and the sudo password."""

    def __init__(self, secrets: set[str] | None = None):
        self._secrets: set[str] = {s for s in (secrets or set()) if len(s) >= 3}
        self._lock = threading.Lock()

    def add(self, value: Any) -> None:
        if isinstance(value, str) and len(value) >= 3:
            with self._lock:
                self._secrets.add(value)

    def add_secret_vars(self, variables: dict[str, Any]) -> None:
        for key, value in variables.items():
            if SECRET_NAME.search(str(key)):
                self.add(value if isinstance(value, str) else None)

    def mask(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text


class RunLog:
    """The run directory (`.glmops/runs/<time>-<id>/`) and its per-host log files."""

    def __init__(self, root: Path, masker: Masker):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = root / f"{stamp}-{uuid.uuid4().hex[:6]}"
        self.path.mkdir(parents=True, exist_ok=True)
        self.masker = masker
        self._lock = threading.Lock()

    def host_dir(self, host: str) -> Path:
        folder = self.path / host
        folder.mkdir(exist_ok=True)
        return folder

    def write(self, host: str, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {self.masker.mask(text)}\n"
        with self._lock, (self.path / f"{host}.log").open("a") as log:
            log.write(line)

    def command(
        self, host: str, command: str, rc: int | str, duration: float, stdout: str, stderr: str
    ) -> None:
        parts = [f"$ {command}", f"  rc={rc} duration={duration:.2f}s"]
        for name, stream in (("stdout", stdout), ("stderr", stderr)):
            if stream.strip():
                parts.append(f"  {name} (tail):\n" + _indent(stream[-OUTPUT_TAIL:]))
        self.write(host, "\n".join(parts))


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip("\n").splitlines())
