"""Host helper: wait until a TCP port accepts connections or a URL returns a status.

Stdlib only; prints one JSON object ({"failed", "changed", "msg", ...}) and exits 0.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

from _envelope import Reply, main


class WaitReply(Reply):
    elapsed: float  # seconds waited, ready or not


def probe(args: dict) -> str | None:
    """None when ready, else what was seen."""
    if args.get("url"):
        try:
            with urllib.request.urlopen(args["url"], timeout=5) as response:
                code = response.status
        except urllib.error.HTTPError as error:
            code = error.code
        except (urllib.error.URLError, OSError) as error:
            return f"no answer ({getattr(error, 'reason', error)})"
        return None if code == int(args.get("status", 200)) else f"status {code}"
    try:
        with socket.create_connection(
            (args.get("host", "127.0.0.1"), int(args["port"])), timeout=5
        ):
            return None
    except OSError as error:
        return f"port closed ({error.strerror or error})"


def wait(args: dict) -> WaitReply:
    target = args.get("url") or "{}:{}".format(args.get("host", "127.0.0.1"), args.get("port"))
    started = time.monotonic()
    deadline = started + float(args.get("timeout", 300))
    seen = probe(args)
    while seen is not None and time.monotonic() < deadline:
        time.sleep(float(args.get("sleep", 1)))
        seen = probe(args)
    waited = round(time.monotonic() - started, 1)
    if seen is None:
        return {
            "failed": False,
            "changed": False,
            "msg": f"{target} ready after {waited} s",
            "elapsed": waited,
        }
    return {
        "failed": True,
        "changed": False,
        "elapsed": waited,
        "msg": f"{target} not ready after {waited} s: {seen}",
    }


if __name__ == "__main__":
    main(wait)
