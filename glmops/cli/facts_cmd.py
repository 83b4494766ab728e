"""`glmops facts`: gather each host's facts and print them (a table, or JSON with --json)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.table import Table

from glmops.engine.executor import RunOptions
from glmops.engine.nodes import Play
from glmops.engine.output import console, event_line
from glmops.gpu.facts import parse_facts
from glmops.run import run_read_only


def print_facts(
    inventory_path: Path,
    pattern: str,
    as_json: bool,
    options: RunOptions | None = None,
    verbosity: int = 0,
) -> int:
    play = Play(name="gather facts", hosts=pattern, source=str(inventory_path), line=0)
    code, executor = run_read_only(inventory_path, [play], options, verbosity=verbosity)
    gathered = {name: s.facts for name, s in executor.sessions.items() if s.facts is not None}
    if as_json:
        for name, facts in gathered.items():
            print(event_line("facts", host=name, facts=facts))
        return code
    table = Table(title="facts", title_justify="left")
    for column in (
        "host",
        "os",
        "kernel",
        "cpus",
        "memory",
        "GPUs",
        "capability",
        "driver",
        "CUDA",
        "modules",
        "vLLM",
    ):
        table.add_column(column)
    for name, raw in gathered.items():
        host_facts = parse_facts(raw)
        ccs = ", ".join(f"{a}.{b}" for a, b in host_facts.compute_capabilities) or "-"
        vllm = host_facts.venv.vllm_version if host_facts.venv else None
        table.add_row(
            name,
            f"{host_facts.os_id or '?'} {host_facts.os_version_id or ''}",
            host_facts.kernel_release or "?",
            str(host_facts.cpu_count or "?"),
            _gib(host_facts.mem_total_bytes),
            str(host_facts.gpu_count),
            ccs,
            host_facts.driver_version or "-",
            host_facts.cuda_version or "-",
            host_facts.kernel_module or "-",
            vllm or "-",
        )
    console(sys.stdout).print(table)
    return code


def _gib(value: int | None) -> str:
    return f"{value / 2**30:.0f} GiB" if value else "?"
