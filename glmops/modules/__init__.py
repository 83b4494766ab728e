"""Modules: one class per file, registered by name. Importing this package registers them all."""

from glmops.modules import (  # noqa: E402,F401  (imported to register)
    apt,
    command,
    copy,
    file,
    helper,
    systemd,
    wait_for,
)
from glmops.modules.base import REGISTRY, Arg, Module, Plan, register, validate_params

__all__ = ["REGISTRY", "Arg", "Module", "Plan", "register", "validate_params"]
