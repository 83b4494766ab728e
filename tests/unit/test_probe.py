"""The checks run ahead (glmops/engine/prefetch.py): each answer the probe brings back is what
the check run alone by the connection (`/bin/sh -c`, no stdin) gives, byte for byte: exit
status, stdout, stderr; and one check's text, exit or syntax cannot spoil another's answer."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from glmops.engine.prefetch import parse_probe, probe_command

CHECKS = [
    "echo hello",
    "printf 'no newline'",
    "true",
    "echo out; echo err >&2; exit 3",
    "printf '\\377\\000\\001 binary'",
    "printf 'caf\\303\\251 \\342\\234\\223\\n'",
    "cat; echo read-nothing",
    "exit 0",
    "cd / && pwd",
    "pwd",
    'echo "${glmops_probe:-unset}"',
    "echo 'quote '\"'\"' ) inside' # ) not the probe's parenthesis",
    "echo (",
    "if [ -e /nonexistent ]; then echo yes; else echo absent; fi",
    "head -c 70000 /dev/zero | tr '\\0' x",
]


def alone(command: str, cwd: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, capture_output=True, cwd=cwd
    )
    out, err = (stream.decode(errors="replace") for stream in (done.stdout, done.stderr))
    return done.returncode, out, err


def probed(commands: list[str], cwd: Path) -> list[tuple[int, str, str]]:
    done = subprocess.run(
        ["/bin/sh", "-c", f"echo before; {probe_command(commands)}; echo after"],
        input=b"stdin the checks must not read\n",
        capture_output=True,
        cwd=cwd,
    )
    first, _, rest = done.stdout.decode(errors="replace").partition("\n")
    assert first == "before"
    assert rest.endswith("after\n")
    return parse_probe(rest, len(commands))


def test_each_answer_is_what_the_check_alone_gives(tmp_path: Path) -> None:
    answers = probed(CHECKS, tmp_path)
    for command, answer in zip(CHECKS, answers, strict=True):
        rc, out, err = alone(command, tmp_path)
        if command == "echo (":  # a syntax error: its own status, worded by `eval`
            assert answer[:2] == (rc, out) == (2, "") and "Syntax error" in answer[2]
            continue
        assert answer == (rc, out, err), command


def test_the_probe_leaves_no_files_behind(tmp_path: Path) -> None:
    before = set(Path("/tmp").iterdir())
    probed(["echo a", "exit 1"], tmp_path)
    assert not {p for p in set(Path("/tmp").iterdir()) - before if p.name.startswith("tmp.")}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "damaged",
    [
        lambda text: text.replace("glmops-checks-done", ""),
        lambda text: text.replace("rc=0", "rc=?", 1),
        lambda text: "\n".join(line[:-4] if len(line) > 40 else line for line in text.split("\n")),
        # sizes that still add up to the outputs' bytes, one of them negative
        lambda text: text.replace("\n61\n0\n", "\n-1\n62\n", 1),
    ],
)
def test_an_answer_that_is_not_whole_is_refused(tmp_path: Path, damaged) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        ["/bin/sh", "-c", probe_command(["echo " + "x" * 60, "true"])],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert parse_probe(done.stdout, 2)[0][1] == "x" * 60 + "\n"
    assert damaged(done.stdout) != done.stdout
    with pytest.raises(ValueError):
        parse_probe(damaged(done.stdout), 2)
