#!/usr/bin/env python3
"""One look at a vllm serve unit from the host itself (stdlib only, python3 >= 3.8).

Arguments (on stdin): {"unit": "vllm-glm5", "port": 8000, "served_model_name": "glm-5", ...}

Reports the unit's systemd state, the journal of its current run, and what /health,
/v1/models and a one-token completion answer. The API key is read here from the 0600
environment file (`env_file`), so it never travels in argv or in glmops' logs. Observes only.
Prints one JSON object.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request

from _envelope import Reply, TypedDict, http_base, main

PROPS = "LoadState,ActiveState,SubState,Result,MainPID,NRestarts,InvocationID,UnitFileState"


class UnitState(TypedDict, total=False):
    """`systemctl show -p PROPS` as text, and `error` when systemctl failed."""

    LoadState: str
    ActiveState: str
    SubState: str
    Result: str
    MainPID: str
    NRestarts: str
    InvocationID: str
    UnitFileState: str
    error: str


class HttpLook(TypedDict, total=False):
    status: int | None  # None: no answer (refused, timed out)
    error: str
    text: str


class ModelsLook(TypedDict):
    status: int | None
    ids: list
    error: str | None


class CompletionLook(TypedDict):
    status: int | None
    text: str | None
    error: str | None


class ProbeReply(Reply, total=False):
    """The reply: the unit always; the rest as the arguments asked and the server answered."""

    unit: UnitState
    journal: list  # the current run's last `journal_lines` lines
    journal_matches: list  # the current run's lines matching `journal_grep` (the last 50)
    health: HttpLook  # GET /health
    models: ModelsLook  # GET /v1/models, once /health is 200
    completion: CompletionLook  # one token, when asked and the model is listed


def sh(argv: list, timeout: float = 20) -> tuple:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, "", str(e)


def unit_state(unit: str) -> UnitState:
    rc, out, err = sh(["systemctl", "show", unit, "-p", PROPS])
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if rc != 0:
        props["error"] = err.strip()
    return props  # type: ignore[return-value]


def journal(unit: str, invocation: str, lines: int | None) -> list:
    """The current run's journal (its last `lines`, or all of it when None)."""
    tail = ["-n", str(lines)] if lines else []
    if invocation:
        argv = ["journalctl", "_SYSTEMD_INVOCATION_ID=" + invocation]
        rc, out, _err = sh(argv + ["-o", "cat", "--no-pager"] + tail, timeout=60)
        if rc == 0 and out.strip():
            return out.splitlines()
    # No run yet, or a journald without the field: the unit's tail.
    rc, out, _err = sh(
        ["journalctl", "-u", unit, "-o", "cat", "--no-pager", "-n", str(lines or 500)], timeout=60
    )
    return out.splitlines() if rc == 0 else []


def api_key(path: str) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^\s*VLLM_API_KEY\s*=\s*(.*)$", text, re.M)
    if not m:
        return None
    value = m.group(1).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
        value = value.replace('\\"', '"').replace("\\\\", "\\")
    return value or None


def request(url: str, key: str | None, body: dict | None, timeout: float) -> dict:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read(65536).decode("utf-8", "replace")
            status = r.status
    except urllib.error.HTTPError as e:
        return {"status": e.code, "error": e.read(2000).decode("utf-8", "replace")}
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return {"status": None, "error": str(reason)}
    try:
        return {"status": status, "json": json.loads(text)}
    except ValueError:
        return {"status": status, "text": text[:2000]}


def look(args: dict) -> ProbeReply:
    unit = args.get("unit", "vllm-glm5")
    base = http_base(args.get("address", "127.0.0.1"), args.get("port", 8000))
    timeout = float(args.get("request_timeout", 10))
    state = unit_state(unit)
    out: ProbeReply = {"failed": False, "changed": False, "msg": "", "unit": state}
    if args.get("journal_lines"):
        out["journal"] = journal(unit, state.get("InvocationID", ""), int(args["journal_lines"]))
    if args.get("journal_grep"):
        pattern = re.compile(args["journal_grep"])
        lines = journal(unit, state.get("InvocationID", ""), None)
        out["journal_matches"] = [line for line in lines if pattern.search(line)][-50:]
    if args.get("http", True):
        health = request(base + "/health", None, None, timeout)
        out["health"] = {k: v for k, v in health.items() if k != "json"}  # type: ignore[typeddict-item]
        if health.get("status") == 200 and args.get("models", True):
            key = api_key(args.get("env_file", ""))
            models = request(base + "/v1/models", key, None, timeout)
            ids = [m.get("id") for m in (models.get("json") or {}).get("data", [])]
            out["models"] = {
                "status": models.get("status"),
                "ids": ids,
                "error": models.get("error"),
            }
            name = args.get("served_model_name")
            if args.get("completion") and name in ids:
                body = {"model": name, "prompt": "Hi", "max_tokens": 1, "temperature": 0}
                done = request(
                    base + "/v1/completions", key, body, float(args.get("completion_timeout", 120))
                )
                choices = (done.get("json") or {}).get("choices") or []
                out["completion"] = {
                    "status": done.get("status"),
                    "text": choices[0].get("text") if choices else None,
                    "error": done.get("error"),
                }
    out["msg"] = "unit {}: {}/{}".format(unit, state.get("ActiveState"), state.get("SubState"))
    return out


if __name__ == "__main__":
    main(look)
