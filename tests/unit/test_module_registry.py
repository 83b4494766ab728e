"""The registry's table of module names (base.MODULE_FILES) matches what the files register, so
a play can name every module without the registry importing every file."""

from __future__ import annotations

import importlib
import pkgutil

import glmops.modules
from glmops.modules.base import MODULE_FILES, REGISTRY, Module


def registered_by_file() -> dict[str, str]:
    """Each module name a file of the package registers, with that file's name."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(glmops.modules.__path__):
        if info.name == "base" or info.name.startswith("_"):
            continue
        loaded = importlib.import_module(f"glmops.modules.{info.name}")
        for value in vars(loaded).values():
            defined_here = isinstance(value, type) and value.__module__ == loaded.__name__
            if defined_here and issubclass(value, Module) and "name" in vars(value):
                found[value.name] = info.name if REGISTRY.get(value.name) is value else "?"
    return found


def test_the_table_names_every_registered_module_and_its_file() -> None:
    assert registered_by_file() == MODULE_FILES


def test_an_unknown_name_is_not_in_the_registry() -> None:
    assert "no_such_module" not in REGISTRY
    assert REGISTRY.get("no_such_module") is None
