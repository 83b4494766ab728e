"""A steady load through the router: a few threads sending completions, each one recorded.

Used by the fleet's tests and its benchmark to count what a redeploy costs clients: requests
served and failed, and latency percentiles. A request fails on any non-200 answer, a refused
or cut connection, or no answer within `timeout`.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sample:
    started: float  # monotonic
    latency_s: float
    status: int | None
    error: str | None
    at: float = 0.0  # wall clock (epoch seconds), to set beside the deploy's event times

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass
class Load:
    """`with Load(url, model) as load: ...` keeps `threads` requests in flight until the block
    ends; then `load.summary()`. With `pause_s`, each thread waits that long between its
    requests: a paced load that leaves the replicas CPU to spare, instead of a closed loop
    that keeps them busy."""

    url: str
    model: str
    threads: int = 2
    max_tokens: int = 8
    timeout: float = 60.0
    pause_s: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _workers: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        self._workers = [
            threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(self.timeout + 5)

    def _loop(self, index: int) -> None:
        n = 0
        while not self._stop.is_set():
            sample = self.one(f"Request {index}-{n}:")
            with self._lock:
                self.samples.append(sample)
            n += 1
            if self.pause_s:
                self._stop.wait(self.pause_s)

    def one(self, prompt: str) -> Sample:
        body = {"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens}
        request = urllib.request.Request(
            self.url.rstrip("/") + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        at, started = time.time(), time.monotonic()
        status: int | None = None
        error: str | None = None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                status = reply.status
                payload = json.loads(reply.read())
                if not payload.get("choices"):
                    error = f"no choices in {str(payload)[:200]}"
        except urllib.error.HTTPError as failure:
            status = failure.code
            error = failure.read(300).decode("utf-8", "replace")
        except (OSError, ValueError) as failure:
            error = str(failure)
        return Sample(started, time.monotonic() - started, status, error, at)

    def failed(self) -> list[Sample]:
        with self._lock:
            return [s for s in self.samples if not s.ok]

    def summary(self) -> dict[str, Any]:
        with self._lock:
            samples = list(self.samples)
        latencies = [s.latency_s for s in samples if s.ok]
        failed = [s for s in samples if not s.ok]
        span = (
            max(s.started + s.latency_s for s in samples) - min(s.started for s in samples)
            if samples
            else 0.0
        )
        return {
            "requests": len(samples),
            "served": len(latencies),
            "failed": len(failed),
            "errors": sorted({f"{s.status}: {(s.error or '')[:120]}" for s in failed})[:10],
            "p50_s": _round(percentile(latencies, 50)),
            "p90_s": _round(percentile(latencies, 90)),
            "p99_s": _round(percentile(latencies, 99)),
            "max_s": _round(max(latencies, default=None)),
            "seconds": round(span, 1),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
