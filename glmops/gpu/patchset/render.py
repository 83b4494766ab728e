"""Jinja2 environment over templates/vllm/: StrictUndefined so a missing variable fails the
plan instead of rendering a broken file onto a host."""

from __future__ import annotations

from functools import cache
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


def kernel_source(name: str = "sparse_mla.py") -> str:
    """A kernel file of backend/ without its `from __future__` line (the rendered file has its
    own at the top, where Python requires it)."""
    path = KERNEL_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"kernel source missing: {path}")
    lines = path.read_text().splitlines()
    kept = [ln for ln in lines if not ln.startswith("from __future__ import")]
    return "\n".join(kept).strip("\n")
