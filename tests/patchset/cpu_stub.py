"""Run a host helper against an unpacked vLLM wheel on a machine without a GPU.

    python cpu_stub.py '<json list of compiled module names>' SCRIPT '<json args>'

The smallest stub that lets vLLM's real selection code run on CPU:
  1. the wheel's compiled extension modules (vllm._C, vllm._flashmla_C, ...) become empty
     modules: importing them only registers CUDA ops, which selection never calls; code that
     probes for an op still sees it missing (e.g. FLASHMLA reports "_flashmla_C is not
     available"), as on a host whose build lacks the arch;
  2. tensors that backend modules allocate on "cuda" at import time (CUTLASS_MLA's workspace)
     go to the meta device, and torch.cuda.get_device_properties answers with a fixed SM
     count, because a CPU torch cannot create CUDA tensors.
Everything else (priorities, validate_configuration, supports_*) is vLLM's unmodified code.
"""

from __future__ import annotations

import json
import runpy
import sys
import types
from importlib.machinery import ModuleSpec


def install(compiled: list[str]) -> None:
    for name in compiled:
        module = types.ModuleType(name)
        module.__spec__ = ModuleSpec(name, None)
        sys.modules[name] = module

    import torch
    from torch.overrides import TorchFunctionMode

    class CudaToMeta(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):  # noqa: ANN001
            kwargs = dict(kwargs or {})
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(
        multi_processor_count=132, total_memory=80 << 30, name="cpu-stub", major=0, minor=0
    )
    CudaToMeta().__enter__()


if __name__ == "__main__":
    install(json.loads(sys.argv[1]))
    script = sys.argv[2]
    sys.argv = [script, *sys.argv[3:]]
    runpy.run_path(script, run_name="__main__")
