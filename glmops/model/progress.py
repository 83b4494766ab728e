"""Progress of long transfers on stderr: bytes done, rate and time left."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


def progress_line(label: str, done: int, total: int, rate: float) -> str:
    """`label: 1.2 GB / 402.0 GB (0%), 210.0 MB/s, ETA 31 min 40 s`."""
    left = (total - done) / rate if rate > 0 else None
    eta = f"ETA {int(left // 60)} min {int(left % 60)} s" if left is not None else "ETA -"
    pct = 100.0 * done / total if total else 100.0
    return (
        f"{label}: {human_bytes(done)} / {human_bytes(total)} ({pct:.0f}%), "
        f"{human_bytes(rate)}/s, {eta}"
    )


class Meter:
    """Calls `report` with a progress line every `interval` seconds while a transfer runs."""

    def __init__(
        self,
        label: str,
        total: int,
        done: Callable[[], int],
        report: Callable[[str], None],
        interval: float = 10.0,
    ):
        self.label, self.total, self._done, self._report = label, total, done, report
        self.interval = interval
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._start_bytes = 0
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"meter-{label}")

    def __enter__(self) -> Meter:
        self._start_bytes = self._safe_done()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _safe_done(self) -> int:
        try:
            return self._done()
        except Exception:  # a progress line is never worth failing the transfer for
            return 0

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            done = self._safe_done()
            elapsed = time.monotonic() - self._started
            # the rate counts only this run's bytes, so a resumed transfer shows a true rate
            rate = (done - self._start_bytes) / elapsed if elapsed > 0 else 0.0
            self._report(progress_line(self.label, done, self.total, rate))
