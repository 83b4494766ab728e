"""YAML aliases are bounded (issue 44, item 5): a few hundred bytes of anchors and aliases
that expand to billions of values are refused when the file loads, within a second, naming
the file and line; ordinary anchors, aliases and merge keys still work."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from glmops.engine.inventory import load_inventory
from glmops.errors import InputError
from tests.support.engine import Runner

LEVELS = "abcdefghi"


def bomb(indent: str = "    ") -> str:
    """The classic "billion laughs": 9 levels of 9 aliases each (9**9 strings), ~700 bytes."""
    lines = [f'{indent}a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, level in zip(LEVELS, LEVELS[1:], strict=False):
        lines.append(f"{indent}{level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def bomb_inventory(path: Path) -> Path:
    path.write_text("all:\n  vars:\n" + bomb() + "  hosts:\n    here: {connection: local}\n")
    return path


def test_an_alias_bomb_in_an_inventory_is_a_load_error_with_file_and_line(
    tmp_path: Path, hostile: Any
) -> None:
    inventory = bomb_inventory(tmp_path / "hosts.yml")
    assert len(inventory.read_bytes()) < 800
    started = time.monotonic()
    with pytest.raises(InputError) as raised:
        load_inventory(inventory)
    took = time.monotonic() - started
    message = str(raised.value)
    # level f is where the expansion passes the bound: line 8 of the file
    hostile.check(
        "alias bomb (inventory)",
        took < 1 and message.startswith(f"{inventory}:8: YAML aliases expand"),
        f"{took:.2f}s: {message}",
    )


def test_the_cli_refuses_an_alias_bomb_within_a_second(tmp_path: Path, hostile: Any) -> None:
    """`glmops run` with a bomb in the inventory: exit 5 with the file and line, promptly."""
    inventory = bomb_inventory(tmp_path / "hosts.yml")
    playbook = tmp_path / "site.yml"
    playbook.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: hi}\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "glmops.cli", "run", str(playbook), "-i", str(inventory)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    took = time.monotonic() - started
    hostile.check(
        "alias bomb (glmops run)",
        done.returncode == 5 and f"{inventory}:8:" in done.stderr,
        f"exit {done.returncode} after {took:.1f}s: {done.stderr[-500:]}",
    )


def test_a_self_referring_alias_is_refused(tmp_path: Path, hostile: Any) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  vars:\n    loop: &loop [1, *loop]\n  hosts: {here: {}}\n")
    with pytest.raises(InputError) as raised:
        load_inventory(path)
    hostile.check(
        "self-referring alias",
        str(raised.value).startswith(f"{path}:3: a YAML alias refers to a value that holds it"),
        str(raised.value),
    )


def test_an_alias_bomb_from_host_output_fails_its_task_promptly(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path, hostile: Any
) -> None:
    """`from_yaml` on what a host printed is bounded like a file."""
    (tmp_path / "bomb.yml").write_text(bomb(indent=""))
    started = time.monotonic()
    outcome = run_playbook(
        f"""
        - hosts: here
          gather_facts: false
          tasks:
            - command: cat {tmp_path}/bomb.yml
              register: out
            - set_fact: {{parsed: "{{{{ out.stdout | from_yaml }}}}"}}
        """,
        local_inventory,
    )
    took = time.monotonic() - started
    last = outcome.results()[-1]
    hostile.check(
        "alias bomb (from_yaml of host output)",
        took < 10
        and last["status"] == "failed"
        and "from_yaml: <from_yaml>:" in last["msg"]
        and "YAML aliases expand" in last["msg"],
        f"{took:.1f}s: {last}",
    )


def test_ordinary_anchors_aliases_and_merge_keys_still_load(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n  vars:\n"
        "    defaults: &defaults {port: 8000, user: vllm}\n"
        "    sizes: &sizes [1, 2, 3]\n"
        "    again: *sizes\n"
        "  hosts:\n"
        "    here: {<<: *defaults, connection: local}\n"
    )
    host = load_inventory(path).hosts["here"]
    assert host.vars["port"] == 8000 and host.vars["user"] == "vllm"
    assert host.vars["again"] == [1, 2, 3]
