"""Host-side helpers: stdlib-only scripts the engine runs on a host, one round trip each.

Each imports the shared envelope (arguments in, one JSON reply out, errors) as the top-level
module `_envelope`, the name it has on a host, where the launcher sends it ahead of the helper.
Imported here, on the controller, the helpers find it under the same name.

Stdlib only, at module level (the vLLM helpers import vllm inside functions: they run under
the host venv's python), and nothing of glmops: what helpers share (the reply envelope, the
TypedDict fallback, atomic writes, sha256 of a file) goes in `_envelope`. Each helper declares
its reply as a TypedDict (e.g. `vllm_probe.ProbeReply`) that the controller reads through.
One is a service instead: `router_gate`, copied to the router host and run by its own unit for
as long as the router runs (stdlib only as well). Checked by tests/unit/test_layers.py.
"""

import sys

from glmops.hosthelpers import _envelope

sys.modules.setdefault("_envelope", _envelope)
