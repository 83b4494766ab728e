"""Host helper: wait until vLLM has no request running (its /metrics), bounded by a timeout.

Stdlib only. `vllm:num_requests_running` is summed over every label set (one per model and
engine). A server that does not answer counts as drained: nothing can be running on it.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request

from _envelope import main

RUNNING = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


def running(url: str) -> float | None:
    """Requests vLLM is running now, or None when /metrics does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None
    return sum(float(value) for value in RUNNING.findall(text))


def drain(args: dict) -> dict:
    url = "http://{}:{}/metrics".format(args.get("address", "127.0.0.1"), int(args["port"]))
    started = time.monotonic()
    deadline = started + float(args.get("timeout", 120))
    seen = running(url)
    while seen and time.monotonic() < deadline:
        time.sleep(float(args.get("interval", 0.5)))
        seen = running(url)
    waited = round(time.monotonic() - started, 1)
    reply = {"failed": False, "changed": False, "running": seen, "waited_s": waited}
    if seen is None:
        reply["msg"] = f"{url} does not answer: nothing runs there"
    elif seen == 0:
        reply["msg"] = f"drained: no request running after {waited} s"
    else:
        reply["msg"] = f"{seen:g} request(s) still running after the {waited} s drain timeout"
        reply["timed_out"] = True
    return reply


if __name__ == "__main__":
    main(drain)
