"""What every process on this machine showed in its argv while something ran: `ps`, polled.

Test hosts (systemd-nspawn) share this machine's process table, so one watch sees the
controller's side (ssh, sh -c) and the host's side (sshd's shell, sudo, python) of a command.
"""

from __future__ import annotations

import base64
import subprocess
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def argv_while(action: Callable[[], T], every: float = 0.05) -> tuple[T, set[str]]:
    """Run `action`; return its result and every distinct argv line seen meanwhile."""
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            ps = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True)
            seen.update(line.strip() for line in ps.stdout.splitlines())
            time.sleep(every)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = action()
    finally:
        done.set()
        watcher.join()
    return result, seen


def encodings(secret: str) -> list[str]:
    """The secret as text and as it reads inside base64 at each of the three byte alignments."""
    forms = [secret]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + secret.encode()).decode()
        forms.append(encoded[4:-4])  # the part that does not depend on what surrounds it
    return forms


def leaks(secret: str, argv_lines: set[str]) -> list[str]:
    """The argv lines that carry the secret in any of its forms."""
    forms = encodings(secret)
    return sorted(line for line in argv_lines if any(form in line for form in forms))
