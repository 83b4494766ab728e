"""Each playbook under cases/ run by ansible-core and by glmops on the same local target, compared.

A case is a folder: `play.yml` (writing only under `{{ target }}`) and whatever it uses beside
it (templates/, files/, roles/, vars/); optionally `case.yml` with `args:` (more command-line
arguments for both, e.g. [--check] or [--tags, x]) and `before/` (copied into the target
before the runs). Compared: the files under the target (kind, content, mode, owner), each
task's status per host in order, the recap and the exit code. A difference fails the
case unless EXPECTED_DIFFERENCES lists exactly it (each one documented in docs/ansible.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).parent
CASES = sorted(p.name for p in (HERE / "cases").iterdir() if (p / "play.yml").is_file())
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

#: The environment both tools run in (cases/lookups reads it).
CASE_ENV = {"CONFORMANCE_MARK": "marked"}

#: Deliberate differences, each documented in docs/ansible.md ("Deliberate differences"):
#: case name -> the exact differences the comparison reports. Never a silent pass: a case
#: listed here still fails if its differences change, or vanish (then remove it here).
EXPECTED_DIFFERENCES: dict[str, list[str]] = {
    # --check that finds changes exits 3 (ExitCode.CHECK_FOUND_CHANGES), so a script can tell
    # "would change" from "nothing to do"; ansible-playbook exits 0 either way.
    "check_mode": ["exit code: ansible 0 glmops 3"],
    # blockinfile's default marker names glmops, so the blocks earlier glmops runs wrote stay
    # theirs; `marker: "# {mark} ANSIBLE MANAGED BLOCK"` shares a block with Ansible.
    "blockinfile": [
        "file conf: ansible ('file', 'first\\nlast\\n# BEGIN ANSIBLE MANAGED BLOCK\\nmanaged one"
        "\\nmanaged two\\n# END ANSIBLE MANAGED BLOCK\\n', '0o644', '0:0') glmops ('file', "
        "'first\\nlast\\n# BEGIN GLMOPS MANAGED BLOCK\\nmanaged one\\nmanaged two\\n"
        "# END GLMOPS MANAGED BLOCK\\n', '0o644', '0:0')"
    ],
}


def _run_ansible(case: Path, target: Path, args: list[str], cwd: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        **CASE_ENV,
        "ANSIBLE_CALLBACK_PLUGINS": str(HERE / "callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "conformance_record",
        "CONFORMANCE_RECORD": str(cwd / "ansible.json"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCAL_TEMP": str(cwd / "ansible-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(cwd / "ansible-remote-tmp"),
        "ANSIBLE_HOME": str(cwd / "ansible-home"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
    }
    command = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local"]
    command += ["-e", f"target={target}", *args, str(case / "play.yml")]
    out = open(cwd / "ansible.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _run_glmops(case: Path, target: Path, args: list[str], cwd: Path) -> subprocess.Popen:
    """The same command line as Ansible's (`-i localhost, -c local`); glmops' state (run lock,
    pending notifications) kept per case, so cases can run side by side."""
    env = {**os.environ, **CASE_ENV, "PYTHONPATH": str(HERE.parent.parent)}
    command = [sys.executable, "-m", "glmops.cli", "run", str(case / "play.yml")]
    command += ["-i", "localhost,", "-c", "local", "-e", f"target={target}"]
    command += ["-e", f"state_dir={cwd / 'glmops-state'}", "--json", *args]
    out = open(cwd / "glmops.jsonl", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.DEVNULL)


def _ansible_record(cwd: Path, rc: int) -> dict[str, Any]:
    record = json.loads((cwd / "ansible.json").read_text())
    tasks = [(t["host"], t["task"], t["status"], t["ignored"]) for t in record["tasks"]]
    recap = {
        host: {
            "ok": s["ok"],
            "changed": s["changed"],
            "failed": s["failures"],
            "skipped": s["skipped"],
            "unreachable": s["unreachable"],
            "ignored": s["ignored"],
            "rescued": s["rescued"],
        }
        for host, s in record["recap"].items()
    }
    return {"tasks": tasks, "recap": recap, "rc": rc}


def _glmops_record(cwd: Path, rc: int) -> dict[str, Any]:
    events = [json.loads(line) for line in (cwd / "glmops.jsonl").read_text().splitlines()]
    errors = [e["msg"] for e in events if e["event"] == "error"]
    if errors:
        return {"tasks": [], "recap": {}, "rc": rc, "error": errors[0]}
    tasks = [
        (e["host"], e["task"], e["status"], bool(e.get("ignored")))
        for e in events
        if e["event"] in ("task", "handler")
    ]
    recap_event = next(e for e in events if e["event"] == "recap")
    keys = ("ok", "changed", "failed", "skipped", "unreachable", "ignored", "rescued")
    recap = {h: {k: s.get(k, 0) for k in keys} for h, s in recap_event["hosts"].items()}
    return {"tasks": tasks, "recap": recap, "rc": rc}


def _tree(root: Path) -> dict[str, tuple]:
    """Every path under root: (kind, content digest or link target, mode, owner)."""
    found: dict[str, tuple] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        owner = f"{info.st_uid}:{info.st_gid}"
        mode = oct(stat.S_IMODE(info.st_mode))
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path).replace(str(root), "<target>"), owner)
        elif path.is_dir():
            found[rel] = ("dir", "", mode, owner)
        else:
            data = path.read_bytes().replace(str(root).encode(), b"<target>")
            shown = data.decode(errors="replace") if len(data) < 400 else ""
            found[rel] = ("file", shown or hashlib.sha256(data).hexdigest(), mode, owner)
    return found


def _differences(ansible: dict, glmops: dict, a_tree: dict, g_tree: dict) -> list[str]:
    if "error" in glmops:
        return [f"glmops refused the playbook: {glmops['error']}"]
    diffs = []
    for path in sorted(set(a_tree) | set(g_tree)):
        if a_tree.get(path) != g_tree.get(path):
            diffs.append(f"file {path}: ansible {a_tree.get(path)} glmops {g_tree.get(path)}")
    a_tasks, g_tasks = ansible["tasks"], glmops["tasks"]
    for index in range(max(len(a_tasks), len(g_tasks))):
        a = a_tasks[index] if index < len(a_tasks) else None
        g = g_tasks[index] if index < len(g_tasks) else None
        if a != g:
            diffs.append(f"task #{index + 1}: ansible {a} glmops {g}")
            break  # one shift makes every later task differ: the first tells
    if ansible["recap"] != glmops["recap"]:
        diffs.append(f"recap: ansible {ansible['recap']} glmops {glmops['recap']}")
    if ansible["rc"] != glmops["rc"]:
        diffs.append(f"exit code: ansible {ansible['rc']} glmops {glmops['rc']}")
    return diffs


def _run_case(name: str, tmp_path: Path) -> list[str]:
    """Run one case with both tools at once; the differences found."""
    case = HERE / "cases" / name
    settings = (
        yaml.safe_load((case / "case.yml").read_text()) if (case / "case.yml").exists() else {}
    )
    args = [str(a) for a in (settings or {}).get("args", [])]
    runs = {}
    for tool in ("ansible", "glmops"):
        cwd = tmp_path / f"{tool}-cwd"
        target = tmp_path / tool
        cwd.mkdir()
        if (case / "before").is_dir():
            shutil.copytree(case / "before", target, symlinks=True)
        else:
            target.mkdir()
        starter = _run_ansible if tool == "ansible" else _run_glmops
        runs[tool] = (starter(case, target, args, cwd), cwd, target)
    codes = {tool: process.wait(timeout=300) for tool, (process, _, _) in runs.items()}
    ansible_cwd, glmops_cwd = runs["ansible"][1], runs["glmops"][1]
    if not (ansible_cwd / "ansible.json").exists():
        raise AssertionError(
            f"ansible-core did not run {name}:\n{(ansible_cwd / 'ansible.log').read_text()}"
        )
    ansible = _ansible_record(ansible_cwd, codes["ansible"])
    glmops = _glmops_record(glmops_cwd, codes["glmops"])
    return _differences(ansible, glmops, _tree(runs["ansible"][2]), _tree(runs["glmops"][2]))


@pytest.fixture(scope="session")
def case_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future]]:
    """Every selected case started at once on a pool as wide as the machine (each case is two
    processes that mostly wait on their own children), so the suite takes a fraction of the
    time of running them one after the other."""
    assert ANSIBLE_PLAYBOOK.exists(), "ansible-core is missing: pip install -e '.[test]'"
    selected = [
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_case" and hasattr(item, "callspec")
    ]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        yield {
            name: pool.submit(_run_case, name, tmp_path_factory.mktemp(name)) for name in selected
        }


@pytest.mark.parametrize("name", CASES)
def test_case(name: str, case_runs: dict[str, Future], conformance: Any) -> None:
    diffs = case_runs[name].result()
    expected = EXPECTED_DIFFERENCES.get(name, [])
    conformance.record(name, diffs)
    assert diffs == expected, "\n".join(diffs) or "identical, but a difference was expected"


def test_every_expected_difference_is_documented() -> None:
    docs = (HERE.parent.parent / "docs" / "ansible.md").read_text()
    section = " ".join(docs[docs.index("## Deliberate differences") :].split())
    for name in EXPECTED_DIFFERENCES:
        assert name in CASES, f"EXPECTED_DIFFERENCES names no case: {name}"
        assert f"conformance case `{name}`" in section, f"docs/ansible.md does not explain {name}"
