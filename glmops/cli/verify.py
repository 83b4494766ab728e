"""`glmops verify`: the testinfra host checks in tests/host, over glmops' own connections.

`GlmopsBackend` is a testinfra backend (`--hosts=glmops://NAME`) that runs commands through the
connection glmops opens for inventory host NAME (address, user, key, jump host, known_hosts
policy, become), so verify reaches exactly the hosts deploy reached, the same way. The checks
also run with testinfra's own backends: `pytest tests/host --hosts=ssh://root@gpu1`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import testinfra.backend
from testinfra.backend.base import BaseBackend, CommandResult
from testinfra.backend.local import LocalBackend
from testinfra.backend.ssh import SshBackend

from glmops import paths
from glmops.engine.connection import CommandResult as ConnectionResult
from glmops.engine.context import (
    TaskContext,
    helper_command,
    helper_reply,
    helper_stdin,
    sudo_wrap,
)
from glmops.engine.inventory import Host
from glmops.engine.output import event_line
from glmops.engine.run_state import RunOptions, RunState
from glmops.engine.runlog import MASK, Masker, is_secret_name
from glmops.engine.secretenv import become_password, child_environment, secret_values
from glmops.engine.sessions import SessionPool
from glmops.errors import ExitCode, InputError
from glmops.gpu.facts import HostFacts
from glmops.gpu.patchset.profiles import PROFILES, profile_by_name
from glmops.gpu.serving import vllm_profile
from glmops.run import load_inventory, open_output

PROJECT = paths.root()  # holds tests/host/, in a checkout or an installed wheel
HOST_TESTS = paths.host_checks()
INVENTORY_ENV = "GLMOPS_VERIFY_INVENTORY"


def inventory_path() -> Path:
    """The inventory the checks read host variables from."""
    return Path(
        os.environ.get(INVENTORY_ENV) or os.environ.get("GLMOPS_INVENTORY") or "inventory/hosts.yml"
    )


def inventory_host(name: str) -> Host | None:
    """Inventory host `name`, or None when there is no inventory or no such host."""
    path = inventory_path()
    if not path.is_file():
        return None
    hosts = [h for h in load_inventory(path).select("all") if h.name == name]
    return hosts[0] if hosts else None


class GlmopsBackend(BaseBackend):
    """testinfra backend over a glmops connection (`glmops://<inventory host name>`)."""

    NAME = "glmops"

    def __init__(self, hostname: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(hostname, *args, **kwargs)
        self._ctx: TaskContext | None = None
        self._inv_host = inventory_host(hostname)
        if self._inv_host is None:
            raise InputError(f"glmops://{hostname}: no such host in {inventory_path()}")

    def _context(self) -> TaskContext:
        """The engine's context for the host, opened once through the verify run's sessions:
        the connection, the uid probe and become as every task has them."""
        if self._ctx is None:
            assert self._inv_host is not None
            self._ctx = _Door.open(self._inv_host)
        return self._ctx

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        line = self.get_command(command, *args)
        result = self._context().run(line, timeout=300)
        return self.result(result.rc, self.encode(line), result.stdout, result.stderr)

    def run_helper(self, name: str, args: dict[str, Any], python: str | None = None) -> dict:
        """A glmops host helper's reply, through the engine's own launcher (all on stdin)."""
        return self._context().run_helper(name, args, python=python, timeout=300)


class _Door:
    """The engine's sessions of one verify run, shared by its glmops:// hosts: read-only
    (check mode, no run lock), with the verify run's sudo password and one run log."""

    _pool: SessionPool | None = None
    _masker: Masker | None = None
    _password: str | None = None

    @classmethod
    def start(cls, hosts: list[Host]) -> Masker:
        """The run's output, wired once (glmops.run.open_output): its masker knows the
        secrets glmops reads from its environment (the sudo password, the Hub token) and the
        hosts' secret-named variables; the checks' own output is masked by it too. Sessions
        opened with another sudo password (an earlier run in this process) are not reused."""
        password = sudo_password()
        if cls._pool is not None and password != cls._password:
            cls.close()
        if cls._pool is None:
            cls._password = password
            output = open_output(sudo_password=password, check=True)
            for value in secret_values():
                output.masker.add(value)
            options = RunOptions(check=True, lock=False, sudo_password=password)
            state = RunState(options, output.reporter, output.masker, output.runlog)
            cls._pool, cls._masker = SessionPool(state), output.masker
        assert cls._masker is not None
        for host in hosts:
            cls._masker.add_secret_vars(host.vars)
        return cls._masker

    @classmethod
    def open(cls, host: Host) -> TaskContext:
        """The host's context; what its commands print is logged masked."""
        cls.start([host])
        assert cls._pool is not None
        return cls._pool.open(host, "host checks")

    @classmethod
    def close(cls) -> None:
        if cls._pool is not None:
            cls._pool.close()
        cls._pool = cls._masker = cls._password = None


class _HandedPassword:
    """The sudo password `glmops up` asked once (-K) and hands to its verify phase, for the
    checks' backends that pytest builds from a host spec (never through the environment)."""

    value: str | None = None


def sudo_password() -> str | None:
    """The sudo password of this verify run: the one handed to it, else the environment's."""
    handed = _HandedPassword.value
    return handed if handed is not None else become_password()


def _become(line: str, stdin: str | None, user: str | None) -> tuple[str, str | None]:
    """The line through the engine's sudo wrapper, its stdin led by the sudo password."""
    line, password = sudo_wrap(line, sudo_password(), user)
    return line, ((password or "") + (stdin or "")) or None


def run_helper(host: Any, name: str, args: dict[str, Any], python: str | None = None) -> dict:
    """A glmops host helper's reply, on a testinfra host, through the engine's launcher.

    Arguments, envelope and script travel on stdin, never in argv (where any user on the host
    could read them), on `glmops://` hosts over glmops' connection and on `ssh://` and
    `local://` hosts through testinfra's own ssh command line or this machine's shell. Other
    testinfra backends cannot feed a command's stdin and are refused.
    """
    backend = host.backend
    if isinstance(backend, GlmopsBackend):
        return backend.run_helper(name, args, python)
    line = helper_command(name, python)
    stdin: str | None = helper_stdin(name, args)
    if isinstance(backend, SshBackend | LocalBackend):
        if backend.sudo:
            line, stdin = _become(line, stdin, backend.sudo_user)
        if isinstance(backend, SshBackend):
            ssh, ssh_args = backend._build_ssh_command(line)
            line = backend.quote(" ".join(ssh), *ssh_args)
        return helper_reply(name, _run_here(line, stdin or "", timeout=300))
    raise InputError(
        f"{backend.get_connection_type()}://{backend.get_hostname()}: glmops host helpers need "
        "their arguments on stdin, which this testinfra backend cannot feed; use glmops:// "
        "(glmops verify), ssh:// or local://"
    )


def _run_here(line: str, stdin: str, timeout: float) -> ConnectionResult:
    """A shell line on this machine with `stdin` fed to it."""
    started = time.monotonic()
    done = subprocess.run(
        ["/bin/sh", "-c", line],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_environment(),
    )
    return ConnectionResult(
        line, done.returncode, done.stdout, done.stderr, time.monotonic() - started
    )


def patched_layout_problem(facts: HostFacts) -> str | None:
    """Why the patch manifest does not fit the venv's vLLM, or None (also when not patched, or
    when the facts cannot tell)."""
    manifest = facts.patch_manifest or {}
    if not manifest.get("profile"):
        return None
    try:
        patched = profile_by_name(str(manifest["profile"]))
    except KeyError:
        known = ", ".join(p.name for p in PROFILES)
        return f"manifest profile {manifest['profile']!r} is no patch-set layout ({known})"
    installed, source = vllm_profile(dataclasses.replace(facts, patch_manifest=None), {})
    if installed is not None and installed.name != patched.name:
        return f"the patches are for layout {patched.name}, but {source} is layout {installed.name}"
    return None


def register_backend() -> None:
    """Make `glmops://` host specs known to testinfra (idempotent)."""
    testinfra.backend.BACKENDS["glmops"] = f"{__name__}.GlmopsBackend"


register_backend()


class HostVars(dict[str, Any]):
    """A host's inventory variables, as the checks' `hostvars` fixture: a failed check's
    traceback shows its repr, which hides the values of variables named as secrets."""

    def __repr__(self) -> str:
        return repr({k: MASK if is_secret_name(k) else v for k, v in self.items()})


class _MaskedLines(io.TextIOBase):
    """A text stream that passes what pytest prints on to `target`, masked: whole lines as
    they complete, and the rest of a line when pytest flushes (its progress marks)."""

    def __init__(self, target: TextIO, masker: Masker) -> None:
        self._target = target
        self._masker = masker
        self._pending = ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            self._target.write(self._masker.mask(line) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._target.write(self._masker.mask(self._pending))
            self._pending = ""
        self._target.flush()


class _CheckReport:
    """pytest plugin: one result per check (host, check, outcome, and why it did not pass),
    masked."""

    def __init__(self, masker: Masker) -> None:
        self.masker = masker
        self.results: list[dict[str, Any]] = []
        self._hosts: dict[str, str] = {}  # nodeid -> inventory host name

    def pytest_itemcollected(self, item: Any) -> None:
        target = getattr(getattr(item, "callspec", None), "params", {}).get("_testinfra_host")
        if target is not None:
            self._hosts[item.nodeid] = target.backend.get_hostname()

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            check = self.masker.mask(report.nodeid.split("::", 1)[-1])
            host = self._hosts.get(report.nodeid)
            entry = {"host": host, "check": check, "outcome": report.outcome}
            if report.outcome != "passed":
                why = str(getattr(report, "longreprtext", ""))
                entry["why"] = self.masker.mask(why)[-1500:]
            self.results.append(entry)


def run_verify(
    inventory: Path,
    pattern: str,
    as_json: bool,
    keyword: str | None,
    results: list[dict[str, Any]] | None = None,
    password: str | None = None,
) -> ExitCode:
    """Run tests/host against the hosts `pattern` selects; exit 0 only when every check passed.
    `results`, when given, receives one entry per check (host, check, outcome, why); with
    as_json each is also a `check` event on stdout. `password`: the sudo password, when
    the caller asked for it (else $GLMOPS_BECOME_PASSWORD)."""
    import pytest

    if not HOST_TESTS.is_dir():
        raise InputError(f"host checks not found at {HOST_TESTS} (run from a glmops checkout)")
    from glmops.fleet.topology import serving_hosts

    # the router host serves no model: nothing of these checks applies to it
    hosts = serving_hosts(load_inventory(inventory), pattern)
    _HandedPassword.value = password
    _Door.close()  # this run's password and run log
    masker = _Door.start(hosts)
    os.environ[INVENTORY_ENV] = str(inventory.resolve())
    args = [
        str(HOST_TESTS),
        "--hosts=" + ",".join(f"glmops://{h.name}" for h in hosts),
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
        "--rootdir",
        str(PROJECT),
        "-q" if not as_json else "-qq",
    ]
    if keyword:
        args += ["-k", keyword]
    report = _CheckReport(masker)
    # pytest's own report on stdout for `glmops verify`; on stderr where stdout carries JSON
    # events (--json) or `glmops up`'s table
    plain = not as_json and results is None
    shown = _MaskedLines(sys.stdout if plain else sys.stderr, masker)
    try:
        with contextlib.redirect_stdout(shown):
            code = pytest.main(args, plugins=[report])
    finally:
        shown.flush()
        _Door.close()
        _HandedPassword.value = None
    if results is not None:
        results.extend(report.results)
    if as_json:  # after pytest, whose output capture would swallow them
        for entry in report.results:
            print(event_line("check", **entry), flush=True)
    return ExitCode.OK if code == 0 else ExitCode.HOST_FAILED
