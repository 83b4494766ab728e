"""Load a Python file as a module by path: backend/ kernels and rendered files are no package,
and the GPU machine has neither glmops' dependencies nor vLLM. Only the stdlib is imported."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The sparse MLA kernel's parts; ``load_sparse_mla`` joins them as the rendered backend does.
SPARSE_MLA = Path(__file__).resolve().parents[2] / "backend" / "sparse_mla"


def load_module_file(path: Path | str, name: str) -> ModuleType:
    """The file as module ``name``, registered in ``sys.modules`` as an import would (a
    dataclass in it, such as the kernel's tiles, resolves its annotations there)."""
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


def load_sparse_mla(name: str, kernel: Path | str = SPARSE_MLA) -> ModuleType:
    """The sparse MLA kernel module under ``name``: a parts folder joined by its own
    ``assemble.load`` (the text a host runs), or a single kernel file as earlier revisions
    had it (the benchmark's A/B against an old kernel)."""
    kernel = Path(kernel)
    if kernel.is_dir():
        assemble = load_module_file(kernel / "assemble.py", f"{name}_assemble")
        return assemble.load(name, kernel)
    return load_module_file(kernel, name)
