"""Modules: one class per file in this package, registered by name when its file loads.

Adding a module is adding one file here with a `@register`ed `Module` subclass and its name in
`base.MODULE_FILES`, so the registry knows it without importing every file at start-up. Code
modules share lives in `_`-named files (`_serving`: the vllm_probe look).

Imports: modules may import the engine's context and results, gpu/ (policy), hosthelpers/
(reply schemas) and model/ (the manifest); never the executor, the CLI or the run facade.
"""

from glmops.modules.base import REGISTRY, Arg, Module, Plan, register, validate_params

__all__ = ["REGISTRY", "Arg", "Module", "Plan", "register", "validate_params"]
