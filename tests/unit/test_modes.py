"""Symbolic modes: glmops' reading of `chmod SPEC` against the real chmod, and the file and copy
modules converging on one (a second run changes nothing)."""

from __future__ import annotations

import itertools
import os
import stat
import subprocess
from pathlib import Path

import pytest

from glmops.modules.base import file_mode
from glmops.modules.modes import needs_umask, resulting_mode
from tests.support.engine import Runner

SPECS = (
    "u+x", "go-w", "a=rX,u+w", "+x", "-w", "=r", "g=u", "o=", "u+s", "g+s", "+t", "o+t",
    "u=rwx,go=rx", "a-x", "ug+rw,o-rwx", "u-s", "a+X", "=rwx", "g-s", "o=t", "go=u-w", "a=r+x",
)  # fmt: skip
STARTS = (0o644, 0o755, 0o600, 0o4755, 0o2750, 0o1777, 0o000, 0o711)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_resulting_mode_is_what_chmod_gives(tmp_path: Path, umask: int) -> None:
    wrong = []
    for is_dir, spec, start in itertools.product((False, True), SPECS, STARTS):
        path = tmp_path / f"{int(is_dir)}-{SPECS.index(spec)}-{start:o}"
        path.mkdir() if is_dir else path.touch()
        os.chmod(path, start)
        script = f"umask {umask:03o}; chmod '{spec}' '{path}'"
        subprocess.run(["sh", "-c", script], stderr=subprocess.DEVNULL, check=False)
        real = stat.S_IMODE(path.stat().st_mode)
        mine = resulting_mode(spec, start, is_dir, umask)
        if real != mine:
            wrong.append((spec, oct(start), is_dir, oct(real), oct(mine)))
    assert wrong == []


def test_symbolic_modes_are_checked_where_they_are_accepted() -> None:
    assert file_mode("u+x", symbolic=True) == "u+x"
    assert file_mode(0o755, symbolic=True) == "0755" and file_mode("644", symbolic=True) == "0644"
    for bad in ("u+q", "x+u", "", "u+x,", "0999"):
        with pytest.raises(ValueError, match="mode"):
            file_mode(bad, symbolic=True)
    with pytest.raises(ValueError, match="octal"):
        file_mode("u+x")  # modules that take octal only say so
    assert needs_umask("+x") and needs_umask("u+x,-w") and not needs_umask("a+x,go-w")


PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: script
      copy: {dest: "{{ root }}/run.sh", content: "echo hi\\n", mode: "u+x,go-w"}
    - name: folder
      file: {path: "{{ root }}/d", state: directory, mode: "go-rwx"}
    - name: read only for all
      file: {path: "{{ root }}/run.sh", state: file, mode: "a-w,+X"}
"""


def test_file_and_copy_take_symbolic_modes_and_converge(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    first = run_playbook(PLAY, local_inventory)
    assert first.exit_code == 0, first.stderr
    assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o555
    assert stat.S_IMODE((root / "d").stat().st_mode) == 0o700
    second = run_playbook(PLAY, local_inventory)
    assert second.exit_code == 0 and second.changed() == 0, second.results()
    os.chmod(root / "run.sh", 0o644)
    third = run_playbook(PLAY, local_inventory, check=True)
    assert third.exit_code == 3
    [script] = [e for e in third.results() if e["task"] == "script"]
    assert "mode 644 → 0744 (u+x,go-w)" in script["msg"], script
    assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o644  # check mode: unchanged
