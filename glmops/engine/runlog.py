"""Per-run logs: one directory per run, a log file per host, secrets masked everywhere.

Each remote command is recorded with its rc, duration and the tail of its output, so a failure
can be understood after the fact without re-running anything. Run folders are 0700 and logs
0600 (masking goes by known values; a log may still hold what no mask recognised), and a log
file's name is confined to its run folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from glmops.hosthelpers._envelope import confined

#: A variable holds a secret when a word of its name (split at `_`, `-`, `.`) is one of these,
#: or it ends in `api_key`/`private_key`: `db_password`, `hf_token`, `vllm_api_key`; never
#: `max_tokens` or `tokenizer`, where the word only appears inside another.
SECRET_WORDS = frozenset({"password", "passwd", "passphrase", "secret", "token", "apikey"})
SECRET_SUFFIXES = (("api", "key"), ("private", "key"), ("secret", "key"), ("access", "key"))
MASK = "********"
OUTPUT_TAIL = 2000
#: Values shorter than this are masked only as whole words ("root" in "user=root", never in
#: "rootfs").
SHORT_SECRET = 8
#: A long repr cut short keeps a head and a tail around "..." (pytest's assertion reprs,
#: reprlib), which can split a secret: a head of a secret (of SHORT_SECRET characters or more)
#: just before a run of dots, or a tail of one just after, is masked from this many characters
#: on. It errs on the side of masking: ordinary text that happens to end like a secret begins
#: ("chan..." beside the secret "changeme-please") is masked too.
CUT_SECRET = 4
_DOTS = re.compile(r"\.{3,}")


def is_secret_name(name: str) -> bool:
    words = tuple(w for w in re.split(r"[_\-.]+", str(name).lower()) if w)
    return bool(set(words) & SECRET_WORDS) or any(words[-2:] == s for s in SECRET_SUFFIXES)


class Masker:
    """Replaces every known secret value in text: the values of variables named as secrets
    (`is_secret_name`), and the sudo password. Masking goes by value, so a secret is hidden
    wherever it appears, whichever variable holds it (a `user: root` beside `root_password:
    root` is masked too), and in the forms a task commonly turns it into: shell-quoted
    (`| quote`), JSON-encoded (`| to_json`) and Python's repr; an integer secret by its digits.
    """

    def __init__(self, secrets: set[str] | None = None):
        self._secrets: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None
        for secret in secrets or set():
            self.add(secret)

    def add(self, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            return
        forms = {form for form in derived_forms(value) if len(form) >= 3} - self._secrets
        if forms:
            with self._lock:
                self._secrets |= forms
                self._pattern = None

    def add_secret_vars(self, variables: dict[str, Any]) -> None:
        for key, value in variables.items():
            if is_secret_name(key):
                self.add(value)

    def mask(self, text: str) -> str:
        pattern = self._compiled()
        if pattern is None:
            return text
        text = pattern.sub(MASK, text)
        return self._mask_cut_secrets(text) if "..." in text else text

    def _mask_cut_secrets(self, text: str) -> str:
        """Masks the part of a secret that a cut-short repr left on either side of "..."."""
        with self._lock:
            secrets = [s for s in self._secrets if len(s) >= SHORT_SECRET]
        spans = []
        for dots in _DOTS.finditer(text):
            start, end = dots.span()
            head = max((_secret_head_before(text, start, s) for s in secrets), default=0)
            tail = max((_secret_tail_after(text, end, s) for s in secrets), default=0)
            if head >= CUT_SECRET:
                spans.append((start - head, start))
            if tail >= CUT_SECRET:
                spans.append((end, end + tail))
        merged: list[tuple[int, int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        for start, end in reversed(merged):
            text = text[:start] + MASK + text[end:]
        return text

    def _compiled(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._pattern is None and self._secrets:
                parts = [
                    re.escape(s) if len(s) >= SHORT_SECRET else rf"(?<!\w){re.escape(s)}(?!\w)"
                    for s in sorted(self._secrets, key=len, reverse=True)
                ]
                self._pattern = re.compile("|".join(parts))
            return self._pattern


def derived_forms(secret: str) -> set[str]:
    """The secret and the texts a template or a library commonly makes of it."""
    return {
        secret,
        shlex.quote(secret),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
    }


def _secret_head_before(text: str, pos: int, secret: str) -> int:
    """The length of the longest proper head of ``secret`` that ends just before ``text[pos]``
    (a whole secret is masked already)."""
    for n in range(min(pos, len(secret) - 1), 0, -1):
        if text.endswith(secret[:n], 0, pos):
            return n
    return 0


def _secret_tail_after(text: str, pos: int, secret: str) -> int:
    """The length of the longest proper tail of ``secret`` that starts at ``text[pos]``."""
    for n in range(min(len(text) - pos, len(secret) - 1), 0, -1):
        if text.startswith(secret[-n:], pos):
            return n
    return 0


#: Run directories kept under the run root; older ones are removed when a run starts.
RUNS_KEPT = 50
_RUN_NAME = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


class RunLog:
    """The run directory (`.glmops/runs/<time>-<id>/`) and its per-host log files."""

    def __init__(self, root: Path, masker: Masker):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = root / f"{stamp}-{uuid.uuid4().hex[:6]}"
        root.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(mode=0o700)
        self.masker = masker
        self._lock = threading.Lock()
        #: Each host's log file, checked once (`confined` resolves links: a syscall a part),
        #: not on every line: a large fleet's run writes thousands of lines.
        self._files: dict[str, str] = {}
        _prune(root, keep=self.path)
        _LIBRARY_LOG.run = self

    def host_dir(self, host: str) -> Path:
        folder = Path(confined(str(self.path), host))
        folder.mkdir(mode=0o700, exist_ok=True)
        return folder

    def write(self, host: str, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {self.masker.mask(text)}\n"
        path = self._files.get(host)
        if path is None:
            path = self._files[host] = confined(str(self.path), f"{host}.log")
        with (
            self._lock,
            open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a") as log,
        ):
            log.write(line)

    def command(
        self, host: str, command: str, rc: int | str, duration: float, stdout: str, stderr: str
    ) -> None:
        parts = [f"$ {command}", f"  rc={rc} duration={duration:.2f}s"]
        for name, stream in (("stdout", stdout), ("stderr", stderr)):
            if stream.strip():
                parts.append(f"  {name} (tail):\n" + _indent(stream[-OUTPUT_TAIL:]))
        self.write(host, "\n".join(parts))


#: Libraries whose own log records (paramiko's tracebacks of a handshake that failed) belong in
#: the run log, never on stderr, where glmops already says what failed, in one line.
LIBRARY_LOGGERS = ("paramiko",)


class _LibraryLog(logging.Handler):
    """Library log records into the newest run's `<library>.log` file, masked."""

    run: RunLog | None = None

    def emit(self, record: logging.LogRecord) -> None:
        run = self.run
        if run is not None:
            run.write(record.name.split(".")[0], self.format(record))


_LIBRARY_LOG = _LibraryLog()


def route_library_logs() -> None:
    """Send LIBRARY_LOGGERS' records to the run log only (idempotent): without a handler of
    their own, Python's last-resort handler prints their warnings on stderr."""
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if _LIBRARY_LOG not in logger.handlers:
            logger.addHandler(_LIBRARY_LOG)
        logger.propagate = False


def _prune(root: Path, keep: Path) -> None:
    """Remove all but the newest RUNS_KEPT run directories (names sort by time)."""
    runs = sorted(p for p in root.iterdir() if p.is_dir() and _RUN_NAME.fullmatch(p.name))
    for old in runs[:-RUNS_KEPT]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip("\n").splitlines())
