"""The versions glmops pins and the host paths it defaults to: one table.

Python code imports these names; playbooks see `PLAY_DEFAULTS` as every play's
lowest-precedence variables (engine.playbook), so the inventory and -e still override them.
Ground floor: imports nothing of glmops.
"""

from __future__ import annotations

#: uv, which builds every venv (python_venv), and the wheel the wheelhouse carries for it.
UV_VERSION = "0.13.9"
#: vllm-router, in front of a fleet's replicas (router.yml, gpu.wheelcache).
VLLM_ROUTER_VERSION = "0.1.17"
#: The host folder the wheelhouse module fills and offline installs read.
WHEELHOUSE_DIR = "/var/cache/glmops/wheelhouse"
#: The host folder the model phase fills (`model_dir`), and facts measure the disk of.
DEFAULT_MODEL_DIR = "/var/lib/glmops/models/GLM-5"

#: What playbooks read when the inventory does not say.
PLAY_DEFAULTS = {
    "uv_version": UV_VERSION,
    "router_version": VLLM_ROUTER_VERSION,
    "wheelhouse_dir": WHEELHOUSE_DIR,
}
