#!/usr/bin/env python3
"""Orchestration speed: glmops against pyinfra and ansible-core on the same testbed hosts.

Not a test: run by hand as root from the checkout, under the testbed lock, one host count per
run (the lock is free between them):
  flock /tmp/glmops-testbed.lock python3 -m benchmarks.orchestration.bench --hosts 8
  flock /tmp/glmops-testbed.lock python3 -m benchmarks.orchestration.bench --hosts 64 --reps 3
Boots tb121.. (`--hosts` of them), then `--reps` rounds; in each, every tool in turn (the order
rotates each round) applies the same play (play.yml, deploy.py, ansible.yml: a directory, a
file, a templated unit with a restart handler, a started service; each tool its own paths) to
hosts reset to lack it (first converge), then applies it again (no-op). Each run's wall time
and controller CPU (the tool and every process it waited for: ssh for Ansible) are recorded;
medians and the ratios to pyinfra and ansible-core go to benchmarks/results/orchestration.
{json,md}, merged by host count. pyinfra comes from `--pyinfra` (a venv of its own: it is no
dependency of glmops), ansible-playbook from PATH. Every tool gets `--hosts` parallel
connections; Ansible runs with pipelining and its default ControlPersist (60 s), which
carries a round's first-converge connections over into its no-op. The machine's cores are
shared with the hosts and, on a shared machine, with whatever else runs: the load average
before and after is recorded with each run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = ROOT / "benchmarks" / "results"
FIRST_INDEX = 121
#: glmops-persist: glmops with `persist: 60` (OpenSSH connections kept between runs);
#: glmops-before: glmops at `--before REV` (its own copy of the package), for before/after.
TOOLS = ("glmops", "glmops-persist", "glmops-before", "pyinfra", "ansible")
OURS = ("glmops", "glmops-persist", "glmops-before")
#: The name each tool's directory, unit and service carry on the hosts.
PATH_NAMES = {
    "glmops": "glmops",
    "glmops-persist": "glmopsp",
    "glmops-before": "glmopsb",
    "pyinfra": "pyinfra",
    "ansible": "ansible",
}
MODES = ("first", "noop")


def reset(bed: Testbed, hosts: list[str], tool: str) -> None:
    """Take the tool's directory, unit and service off every host (through nsenter, untimed)."""
    name = PATH_NAMES[tool]
    script = (
        f"systemctl disable --now bench-{name} >/dev/null 2>&1; "
        f"rm -rf /opt/bench-{name} /etc/systemd/system/bench-{name}.service; "
        "systemctl daemon-reload"
    )
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda h: bed.exec(h, ["sh", "-c", script], timeout=60), hosts))


def commands(tool: str, work: Path, bed: Testbed, n: int, pyinfra: Path) -> list[str]:
    if tool.startswith("glmops"):
        persist = tool == "glmops-persist"
        inventory = work / "persist.yml" if persist else bed.inventory_path
        return [
            sys.executable,
            "-m",
            "glmops.cli",
            "run",
            str(HERE / "play.yml"),
            "-i",
            str(inventory),
            "--forks",
            str(n),
            *(["-e", f"tool={PATH_NAMES[tool]}"] if tool != "glmops" else []),
        ]
    if tool == "pyinfra":
        return [str(pyinfra), "-y", "--parallel", str(n), str(work / "inventory.py"), "deploy.py"]
    return ["ansible-playbook", "-i", str(work / "hosts.ini"), "-f", str(n), "ansible.yml"]


def write_inventories(work: Path, bed: Testbed, hosts: list[str], first: int) -> None:
    key = bed.key_path
    known = work / "known_hosts_pyinfra"
    entries = ",\n".join(
        f"    ({name!r}, {{'ssh_hostname': {host_address(first + i)!r}, "
        f"'ssh_user': 'root', 'ssh_key': {str(key)!r}, "
        f"'ssh_known_hosts_file': {str(known)!r}, "
        "'ssh_strict_host_key_checking': 'accept-new'})"
        for i, name in enumerate(hosts)
    )
    (work / "inventory.py").write_text(f"hosts = [\n{entries},\n]\n")
    doc = yaml.safe_load(bed.inventory_path.read_text())
    doc["all"]["vars"]["persist"] = 60
    (work / "persist.yml").write_text(yaml.safe_dump(doc))
    lines = [f"{name} ansible_host={host_address(first + i)}" for i, name in enumerate(hosts)]
    (work / "hosts.ini").write_text(
        "[all]\n" + "\n".join(lines) + "\n\n[all:vars]\nansible_user=root\n"
        f"ansible_ssh_private_key_file={key}\nansible_python_interpreter=/usr/bin/python3\n"
    )


def environment(tool: str, work: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(work / "before" if tool == "glmops-before" else ROOT),
        "GLMOPS_RUN_DIR": str(work / "runs"),
        "XDG_RUNTIME_DIR": str(work / "runtime"),
    }
    if tool == "ansible":
        env.update(
            ANSIBLE_PIPELINING="True",
            ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"),
            ANSIBLE_SSH_ARGS=(
                "-C -o ControlMaster=auto -o ControlPersist=60s "
                f"-o UserKnownHostsFile={work / 'known_hosts_ansible'} "
                "-o StrictHostKeyChecking=accept-new"
            ),
            ANSIBLE_NOCOLOR="1",
        )
    return env


def timed(argv: list[str], env: dict[str, str], log: Path) -> dict:
    """Run the tool once: wall seconds, CPU seconds of it and what it waited for, exit code."""
    load = os.getloadavg()[0]
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=HERE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "rc": proc.returncode,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def versions(pyinfra: Path) -> dict[str, str]:
    def out(argv: list[str]) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        return (done.stdout or done.stderr).strip().splitlines()[0]

    return {
        "glmops": out(["git", "rev-parse", "--short", "HEAD"]),
        "pyinfra": out([str(pyinfra), "--version"]),
        "ansible-core": out(["ansible-playbook", "--version"]),
        "python": platform.python_version(),
    }


def summarize(runs: list[dict], n: int) -> dict:
    out: dict = {}
    for mode in MODES:
        for tool in TOOLS:
            mine = [r for r in runs if r["tool"] == tool and r["mode"] == mode and r["rc"] == 0]
            if mine:
                out[f"{tool}_{mode}"] = {
                    "wall_s": statistics.median(r["wall_s"] for r in mine),
                    "cpu_s": statistics.median(r["cpu_s"] for r in mine),
                    "cpu_per_host_s": round(statistics.median(r["cpu_s"] for r in mine) / n, 4),
                    "runs": len(mine),
                }
        for ours in OURS:
            mine = out.get(f"{ours}_{mode}")
            for other in ("pyinfra", "ansible"):
                theirs = out.get(f"{other}_{mode}")
                if mine and theirs:
                    out[f"{ours}_{mode}_vs_{other}"] = {
                        "wall": round(mine["wall_s"] / theirs["wall_s"], 3),
                        "cpu": round(mine["cpu_s"] / theirs["cpu_s"], 3),
                    }
    return out


def rec_hosts(record: dict) -> int:
    return int(record["hosts"])


def write_results(key: str, record: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "orchestration.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[key] = record
    path.write_text(json.dumps(doc, indent=2) + "\n")
    lines = [
        "# Orchestration speed: glmops, pyinfra, ansible-core on the same testbed hosts",
        "",
        "Written by benchmarks/orchestration/bench.py (its docstring says how it runs). Medians;",
        "CPU is the controller's (the tool and the processes it waited for); runs interleaved;",
        "the machine (2 cores, the testbed's hosts on the same cores) was shared with other",
        "engineers' work: load averages per run are in the JSON, and absolute times are those",
        "of a loaded machine; compare tools within one table. OpenSSH masters that outlive a",
        "run (Ansible's ControlPersist, glmops-persist's) are not waited for, so their CPU is",
        "not counted. glmops-before is glmops at the revision named (the engine before this",
        "benchmark's changes), run in the same rounds. Which of issue 48's targets the latest",
        "tables meet, and what bounds the rest: orchestration-notes.md.",
        "",
    ]
    for key, rec in sorted(doc.items(), key=lambda kv: (rec_hosts(kv[1]), kv[0])):
        s = rec["summary"]
        lines += [
            f"## {key} ({rec['date']}, {rec['reps']} rounds)",
            "",
            f"Machine: {rec['machine']}. Versions: {rec['versions']}.",
            "",
            "| run | tool | wall s | CPU s | CPU/host s |",
            "|---|---|---|---|---|",
        ]
        for mode in MODES:
            for tool in TOOLS:
                if (row := s.get(f"{tool}_{mode}")) is not None:
                    lines.append(
                        f"| {mode} | {tool} | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | "
                        f"{row['cpu_per_host_s']:.3f} |"
                    )
        lines += ["", "| run | ours | vs | wall | CPU |", "|---|---|---|---|---|"]
        for mode in MODES:
            for ours in OURS:
                for other in ("pyinfra", "ansible"):
                    if (ratio := s.get(f"{ours}_{mode}_vs_{other}")) is not None:
                        lines.append(
                            f"| {mode} | {ours} | {other} | {ratio['wall']}x | {ratio['cpu']}x |"
                        )
        failed = [r for r in rec["runs"] if r["rc"] != 0]
        lines += ["", f"Failed runs (left out of the medians): {len(failed)}.", ""]
    (RESULTS / "orchestration.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument(
        "--first-index",
        type=int,
        default=FIRST_INDEX,
        help="the first host's tbN (N + hosts <= 255)",
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--pyinfra", type=Path, default=Path("/root/bench-venv/bin/pyinfra"))
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--before", help="a git revision of glmops to compare with")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md")
    parser.add_argument("--label", default="all tools", help="names this run's results")
    args = parser.parse_args()
    if args.render:
        doc = json.loads((RESULTS / "orchestration.json").read_text())
        for key, record in doc.items():
            write_results(key, record)
        return
    tools = [t for t in TOOLS if t in args.tools.split(",")]
    if not args.before:
        tools = [t for t in tools if t != "glmops-before"]
    work = Path(tempfile.mkdtemp(prefix="glmops-orch-bench-"))
    bed = Testbed(work / "bed", first_index=args.first_index)
    hosts = [f"tb{args.first_index + i}" for i in range(args.hosts)]
    runs: list[dict] = []
    # As an installed package has: bytecode (PYTHONDONTWRITEBYTECODE may be set here).
    trees = [ROOT / "glmops"]
    if args.before:
        (work / "before").mkdir()
        archive = subprocess.run(
            ["git", "archive", args.before, "glmops", "playbooks", "templates"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        subprocess.run(["tar", "-x", "-C", str(work / "before")], input=archive.stdout, check=True)
        trees.append(work / "before" / "glmops")
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True)
    try:
        booted = time.monotonic()
        bed.up(args.hosts)
        boot_s = time.monotonic() - booted
        write_inventories(work, bed, hosts, args.first_index)
        for rep in range(args.reps):
            order = tools[rep % len(tools) :] + tools[: rep % len(tools)]
            for tool in order:
                reset(bed, hosts, tool)
                argv = commands(tool, work, bed, args.hosts, args.pyinfra)
                for mode in MODES:
                    run = timed(argv, environment(tool, work), work / f"{tool}.log")
                    runs.append({"tool": tool, "mode": mode, "rep": rep, **run})
                    print(json.dumps(runs[-1]), flush=True)
    finally:
        bed.down()
    record = {
        "hosts": args.hosts,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}, shared",
        "versions": {**versions(args.pyinfra), "glmops-before": args.before},
        "reps": args.reps,
        "boot_s": round(boot_s, 1),
        "runs": runs,
        "summary": summarize(runs, args.hosts),
        "logs": str(work),
    }
    write_results(f"{args.hosts} hosts, {args.label}", record)
    print(json.dumps(record["summary"], indent=2))


if __name__ == "__main__":
    main()
