"""Modules: one class per file in this package, registered by name when the package loads.

Adding a module is adding one file here with a `@register`ed `Module` subclass. Code modules
share lives in `_`-named files (`_serving`: the vllm_probe look), which the registry skips.

Imports: modules may import the engine's context and results, gpu/ (policy), hosthelpers/
(reply schemas) and model/ (the manifest); never the executor, the CLI or the run facade.
"""

import importlib
import pkgutil

from glmops.modules.base import REGISTRY, Arg, Module, Plan, register, validate_params

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base" and not _info.name.startswith("_"):  # _serving: shared code
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["REGISTRY", "Arg", "Module", "Plan", "register", "validate_params"]
