"""Modules read only what they declare: their arguments (`Arg`), the typed facts, and, for the
few that evaluate expressions (debug, assert, template), the variable scope they declare."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import glmops.modules
from glmops.cli.moddoc import describe
from glmops.engine.connection import LocalConnection
from glmops.engine.context import RemoteInfo, TaskContext
from glmops.engine.inventory import ConnectionSpec, Host
from glmops.engine.runlog import Masker, RunLog
from glmops.errors import ModuleError
from glmops.modules import REGISTRY

MODULES = Path(glmops.modules.__file__).parent


def context(tmp_path: Path, variables: dict) -> TaskContext:
    host = Host("here", ["all"], dict(variables), ConnectionSpec("here", connection="local"))
    masker = Masker()
    log = RunLog(tmp_path / "runs", masker)
    ctx = TaskContext(
        host, LocalConnection("here"), RemoteInfo(0, str(tmp_path), None), log, masker
    )
    ctx.vars = dict(variables)
    return ctx


def test_no_module_looks_up_a_variable_it_does_not_declare() -> None:
    readers = {
        path.name
        for path in MODULES.glob("*.py")
        if path.name != "base.py" and re.search(r"\bctx\.vars\b", path.read_text())
    }
    assert readers == set(), f"modules reading ctx.vars directly: {sorted(readers)}"


def test_an_unset_bound_argument_comes_from_its_host_variable_then_its_default(
    tmp_path: Path,
) -> None:
    status = REGISTRY["deploy_status"]
    ctx = context(tmp_path, {"vllm_unit": "from-inventory", "vllm_port": 8100})
    passed = status({"vllm_unit": "from-task"}).bound_params(ctx)
    assert passed["vllm_unit"] == "from-task"  # a passed value wins
    assert passed["vllm_port"] == 8100  # else the host variable
    assert passed["deploy_state_dir"] == "/var/lib/glmops/deploy"  # else the declared default
    assert passed["gguf_shards"] is None and passed["health"] is True


def test_a_bound_host_variable_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    ctx = context(tmp_path, {"vllm_port": [8000]})
    with pytest.raises(ModuleError, match="vllm_port.*must be int"):
        REGISTRY["deploy_status"]({}).bound_params(ctx)


def test_only_modules_that_declare_it_see_all_variables(tmp_path: Path) -> None:
    ctx = context(tmp_path, {"anything": 1})
    assert REGISTRY["debug"]({"var": "anything"}).scope(ctx) == {"anything": 1}
    with pytest.raises(TypeError, match="reads only its arguments"):
        REGISTRY["copy"]({"dest": "/x", "content": "y"}).scope(ctx)
    scoped = sorted(name for name, module in REGISTRY.items() if module.variable_scope)
    assert scoped == ["assert", "debug", "template"]


def test_the_docs_name_each_binding_and_the_variable_scope() -> None:
    assert "unset: host variable vllm_unit" in describe("deploy_status")
    assert "Reads all host variables" in describe("template")
    assert "Reads all host variables" not in describe("copy")
