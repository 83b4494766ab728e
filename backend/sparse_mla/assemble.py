"""The sparse MLA kernel as one module: its parts joined in a fixed order, the imports between
them taken out. One home for that join: the patch set embeds ``source()`` in the rendered vLLM
backend (``glmops.gpu.patchset.render.kernel_source``), and tests, the GPU suite and the
benchmarks ``load()`` the same text, so what they run is what a host runs.

The parts import from each other (``from .tiles import _TILES``) so that each reads, and lints,
on its own; in the joined module those names are its own globals. ``load()`` writes the text
to a file first: Triton's ``@jit`` reads a kernel's source back from its file. Only the
standard library is imported here (the GPU machine has nothing else of glmops').
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent

#: The parts, in the order they are joined (each needs only what comes before it at import).
PARTS = (
    "common.py",  # contract, Triton and Gluon versions, constants, device queries
    "tl_dot.py",  # the portable tl.dot split kernels and the merge
    "gluon_common.py",  # Gluon helpers both Gluon families share
    "gluon_hopper.py",  # Hopper's warpgroup-MMA tiles
    "gluon_mma.py",  # the mma.sync tiles (SM80-89, SM120)
    "tiles.py",  # the tile table and each tile's rules
    "plan.py",  # which tile and how many splits
    "api.py",  # sparse_mla_decode, the launchers, support checks, reference, fp8 helpers
)


def _part_text(path: Path, imports_seen: set[str], first: bool) -> str:
    """A part's text without its relative imports, its ``from __future__`` line, imports an
    earlier part made already, and (but for the first part) its docstring, which becomes a
    comment line naming the part."""
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines()
    drop: set[int] = set()
    body = tree.body
    if (
        not first
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    ):
        drop.update(range(body[0].lineno - 1, body[0].end_lineno))
    for node in body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        span = range(node.lineno - 1, node.end_lineno)
        statement = "\n".join(lines[i] for i in span)
        relative = isinstance(node, ast.ImportFrom) and node.level > 0
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if relative or future or statement in imports_seen:
            drop.update(span)
        imports_seen.add(statement)
    kept = [line for i, line in enumerate(lines) if i not in drop]
    header = [] if first else [f"# ---- backend/sparse_mla/{path.name} ----"]
    return "\n".join(header + kept).strip("\n")


def source(folder: Path = HERE) -> str:
    """The joined module's text, without a ``from __future__`` line (an embedding file has its
    own at its top, where Python requires it)."""
    seen: set[str] = set()
    texts = [_part_text(folder / name, seen, i == 0) for i, name in enumerate(PARTS)]
    joined = "\n\n\n".join(texts)
    return "\n".join(line.rstrip() for line in joined.splitlines()).strip("\n") + "\n"


def module_text(folder: Path = HERE) -> str:
    """``source()`` as a module file of its own: its docstring first, then the future import."""
    text = source(folder)
    doc = ast.parse(text).body[0]
    lines = text.splitlines()
    head, rest = lines[: doc.end_lineno], lines[doc.end_lineno :]
    return "\n".join([*head, "", "from __future__ import annotations", *rest]) + "\n"


def write(folder: Path = HERE, directory: Path | None = None) -> Path:
    """The joined module written to a file named by its content (a temporary directory by
    default), written once and replaced atomically, so concurrent loaders share it."""
    text = module_text(folder)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    directory = directory or Path(tempfile.gettempdir()) / f"glmops-sparse-mla-{os.getuid()}"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"sparse_mla_{digest}.py"
    if not path.is_file() or path.read_text() != text:
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)
    return path


def load(name: str = "sparse_mla", folder: Path = HERE) -> ModuleType:
    """The kernel module, joined from ``folder``'s parts, imported under ``name`` (each caller
    its own name gets its own module: its own caches and monkeypatches), and registered in
    ``sys.modules`` under it, as an import would: its tile dataclasses resolve their
    annotations there."""
    path = write(folder)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
