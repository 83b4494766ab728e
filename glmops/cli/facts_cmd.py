"""`glmops facts`: gather each host's facts and print them (a table, or JSON with --json)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.table import Table

from glmops.engine.executor import RunOptions
from glmops.engine.output import console, event_line
from glmops.engine.playbook import Play
from glmops.errors import ExitCode
from glmops.gpu.facts import parse_facts
from glmops.run import run_read_only


def print_facts(
    inventory_path: Path,
    pattern: str,
    as_json: bool,
    options: RunOptions | None = None,
    verbosity: int = 0,
) -> ExitCode:
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
        facts = parse_facts(raw)
        ccs = ", ".join(f"{a}.{b}" for a, b in facts.compute_capabilities) or "-"
        vllm = facts.venv.vllm_version if facts.venv else None
        table.add_row(
            name,
            f"{facts.os_id or '?'} {facts.os_version_id or ''}",
            facts.kernel_release or "?",
            str(facts.cpu_count or "?"),
            _gib(facts.mem_total_bytes),
            str(facts.gpu_count),
            ccs,
            facts.driver_version or "-",
            facts.cuda_version or "-",
            facts.kernel_module or "-",
            vllm or "-",
        )
    console(sys.stdout).print(table)
    return code


def _gib(value: int | None) -> str:
    return f"{value / 2**30:.0f} GiB" if value else "?"
