"""glmops: provision GPU hosts and serve GLM-5 with vLLM, Ansible-style, over real SSH.

Floors, lowest first (each imports only floors below it; tests/unit/test_layers.py checks):

- ground: `errors`, `paths`, `pins` (versions and default host paths), and `hosthelpers/`
  (stdlib-only scripts run on hosts);
- `gpu/` (policy from facts) and `engine/` (the playbook runner; it runs `modules/`);
- `modules/`, `model/` (the model files) and `fleet/` (replicas, gangs, the router);
- `run` (the run facade: a request in, a typed result out), then `cli/` on top.

ARCHITECTURE.md walks through one `glmops up`.
"""

__version__ = "0.1.0"
