"""Modules: one class per file in this package, registered by name when the package loads.

Adding a module is adding one file here with a `@register`ed `Module` subclass.
"""

import importlib
import pkgutil

from glmops.modules.base import REGISTRY, Arg, Module, Plan, register, validate_params

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base":
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["REGISTRY", "Arg", "Module", "Plan", "register", "validate_params"]
