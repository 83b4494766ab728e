"""Host helper: wait until vLLM holds no request (its /metrics), bounded by a timeout.

Stdlib only. A request vLLM holds is running (`vllm:num_requests_running`) or queued
(`vllm:num_requests_waiting`); both are summed over every label set (one per model and engine),
and a restart would cut either. vLLM updates both only after an engine step, and a request the
router sent just before the replica left it may still be on its way in: drained means 0 on two
looks at least `settle` seconds apart. Only a refused connection means nothing runs there; a
/metrics that does not answer in time (a busy host) is looked at again, never taken as drained.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request

from _envelope import Reply, http_base, main

HELD = re.compile(r"^vllm:num_requests_(?:running|waiting)(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


class DrainReply(Reply, total=False):
    """Always `held` and `waited_s`; `timed_out` when the timeout ended the wait."""

    held: float | None  # requests held at the last look; None: nothing listens; -1: no answer
    waited_s: float
    timed_out: bool


class NoAnswer(Exception):
    """/metrics did not answer in time or answered with an error: look again."""


def held(url: str, timeout: float) -> float | None:
    """Requests vLLM runs or queues now; None when nothing listens on the port."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return None
        raise NoAnswer(str(error.reason)) from error
    except ConnectionRefusedError:
        return None
    except OSError as error:  # a timeout while reading, a reset connection
        raise NoAnswer(str(error)) from error
    return sum(float(value) for value in HELD.findall(text))


def drain(args: dict) -> DrainReply:
    url = http_base(args.get("address", "127.0.0.1"), args["port"]) + "/metrics"
    interval = float(args.get("interval", 0.5))
    settle = float(args.get("settle", 2))
    started = time.monotonic()
    deadline = started + float(args.get("timeout", 120))
    zero_since: float | None = None
    seen: float | None = -1.0
    why = ""
    while True:
        try:
            seen = held(url, float(args.get("http_timeout", 5)))
            why = ""
        except NoAnswer as error:
            seen, why = -1.0, str(error)
        now = time.monotonic()
        if seen is None:
            break
        zero_since = (zero_since or now) if seen == 0 else None
        if zero_since is not None and now - zero_since >= settle:
            break
        if now >= deadline:
            break
        time.sleep(min(interval, settle) if zero_since is not None else interval)
    waited = round(time.monotonic() - started, 1)
    reply: DrainReply = {
        "failed": False,
        "changed": False,
        "msg": "",
        "held": seen,
        "waited_s": waited,
    }
    if seen is None:
        reply["msg"] = f"{url} does not answer: nothing runs there"
    elif seen == 0:
        reply["msg"] = f"drained: no request running or waiting after {waited} s"
    elif seen < 0:
        reply["msg"] = f"{url} did not answer within the {waited} s drain timeout ({why})"
        reply["timed_out"] = True
    else:
        reply["msg"] = f"{seen:g} request(s) still held after the {waited} s drain timeout"
        reply["timed_out"] = True
    return reply


if __name__ == "__main__":
    main(drain)
