"""Serving GLM-5 with `vllm serve`: flags, expected attention backends, journal parsing.

Pure functions only (no host access), so every decision the deploy makes can be unit-tested
and explained from the facts and variables it was made from.
"""

from glmops.gpu.serving.backends import Expectation, expected_backends
from glmops.gpu.serving.flags import (
    DEFAULTS,
    ServeConfig,
    ServeError,
    gguf_loader_problem,
    needs_single_file,
    serve_flags,
    vllm_profile,
)
from glmops.gpu.serving.journal import (
    BackendSelection,
    loading_phase,
    parse_backend,
)
from glmops.unitfile import env_file_quote, systemd_quote

__all__ = [
    "DEFAULTS",
    "BackendSelection",
    "Expectation",
    "ServeConfig",
    "ServeError",
    "env_file_quote",
    "expected_backends",
    "gguf_loader_problem",
    "loading_phase",
    "needs_single_file",
    "parse_backend",
    "serve_flags",
    "systemd_quote",
    "vllm_profile",
]
