"""Run a script against an unpacked vLLM wheel on a machine without a GPU.

    python cpu_stub.py '<json list of compiled module names>' SCRIPT '<json args>'

Uses the preflight helper's own no-GPU mode (glmops/hosthelpers/vllm_preflight.py,
`without_gpu`): vLLM's compiled extension modules become empty modules (selection never calls
a kernel; code that probes for an op still finds it missing), tensors allocated on "cuda" at
import time go to the meta device, and torch.cuda.get_device_properties answers with a fixed
SM count. Everything else is vLLM's unmodified code. The wheel's own list of compiled modules
is passed too, since an unpacked tree without its .so files cannot be scanned for them (plus
vllm-gguf-plugin's `_C_gguf` where a test installs that package).
"""

from __future__ import annotations

import importlib.util
import json
import runpy
import sys
from pathlib import Path
from types import ModuleType

HELPERS = Path(__file__).resolve().parents[2] / "glmops" / "hosthelpers"


def host_helper(name: str) -> ModuleType:
    """A host helper imported by its file, as the launcher runs it (beside `_envelope`)."""
    spec = importlib.util.spec_from_file_location(name, HELPERS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    host_helper("_envelope")
    host_helper("vllm_preflight").without_gpu(json.loads(sys.argv[1]))
    script = sys.argv[2]
    sys.argv = [script, *sys.argv[3:]]
    runpy.run_path(script, run_name="__main__")
