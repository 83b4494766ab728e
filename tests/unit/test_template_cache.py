"""Template files compile once per run for all hosts (glmops/modules/copy.py keeps one Jinja
environment per search path): an edit between two runs in one process is still seen."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.engine import Runner
from tests.support.local_hosts import local_hosts

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - template: {src: "{{ tpl }}", dest: "{{ out }}/unit.conf"}
"""


def test_an_edited_template_renders_anew_on_every_host(
    run_playbook: Runner, tmp_path: Path
) -> None:
    template = tmp_path / "unit.j2"
    template.write_text("name={{ inventory_hostname }} v1\n")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    hosts = local_hosts(
        tmp_path,
        {"all": ["a", "b"]},
        host_vars=lambda name: {"out": f"{tmp_path}/{name}", "tpl": str(template)},
    )
    first = run_playbook(PLAY, hosts)
    assert first.exit_code == 0, first.stderr
    assert (tmp_path / "b" / "unit.conf").read_text() == "name=b v1\n"

    template.write_text("name={{ inventory_hostname }} v2\n")  # the same size
    stat = template.stat()
    os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    again = run_playbook(PLAY, hosts)
    assert again.exit_code == 0, again.stderr
    assert again.changed() == 2
    assert (tmp_path / "a" / "unit.conf").read_text() == "name=a v2\n"
    assert (tmp_path / "b" / "unit.conf").read_text() == "name=b v2\n"
