"""Load a Python file as a module by path: backend/ kernels and rendered files are no package,
and the GPU machine has neither glmops' dependencies nor vLLM. Only the stdlib is imported."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_module_file(path: Path | str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
