"""Jinja2 environment over templates/vllm/: StrictUndefined so a missing variable fails the
plan instead of rendering a broken file onto a host."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import jinja2

from glmops import paths

TEMPLATE_DIR = paths.templates() / "vllm"
KERNEL_DIR = paths.backend()


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(name: str, **variables: Any) -> str:
    return environment().get_template(name).render(**variables)


def kernel_source(name: str = "sparse_mla") -> str:
    """A kernel of backend/ as one text to embed, without a `from __future__` line (the rendered
    file has its own at the top, where Python requires it): a folder of parts joined by its own
    `assemble.py` (the sparse MLA kernel; one home for the join, stdlib only, which tests and
    benchmarks load too), or a single file."""
    path = KERNEL_DIR / name
    if (path / "assemble.py").is_file():
        return _assembler(path).source(path).strip("\n")
    if not path.is_file():
        raise FileNotFoundError(f"kernel source missing: {path}")
    lines = path.read_text().splitlines()
    kept = [ln for ln in lines if not ln.startswith("from __future__ import")]
    return "\n".join(kept).strip("\n")


def _assembler(folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"glmops_assemble_{folder.name}", folder / "assemble.py"
    )
    assert spec is not None and spec.loader is not None, folder
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
