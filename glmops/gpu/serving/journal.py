"""Reading vLLM's journal: the attention backend it selected (and the kernel the patch set's
backend runs), and how far loading got.

vLLM's log lines are the same on the 0.16 and 0.33 layouts unless noted. Worker prefixes
such as `(Worker_TP0 pid=123) ` and the bracket style of the candidate list vary, so nothing is
anchored on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from glmops.gpu.patchset.backend import KERNEL_LOG_PREFIX

AUTO = re.compile(r"Using (\S+) attention backend out of potential backends:?\s*(.*)")
FORCED = re.compile(r"Using AttentionBackendEnum\.(\S+?) backend\.?")
NO_BACKEND = re.compile(r"No valid attention backend found for (\S+) with (.*)")
NOT_VALID = re.compile(
    r"Selected backend AttentionBackendEnum\.(\S+) is not valid for this configuration\. "
    r"Reason: (.*)"
)
REASONS = re.compile(r"Reasons: (\{.*\})")
NAME = re.compile(r"[A-Z][A-Z0-9_]+")
KERNEL = re.compile(re.escape(KERNEL_LOG_PREFIX) + "(.*)")
#: For the host's journal grep: every line parse_backend looks at contains one of these
#: (AUTO, FORCED, NO_BACKEND, NOT_VALID); STATUS_GREP adds the line parse_kernel looks at.
SELECTION_GREP = r"attention backend|AttentionBackendEnum\."
STATUS_GREP = f"{SELECTION_GREP}|{re.escape(KERNEL_LOG_PREFIX)}"

#: (regex, phase) in the order vLLM passes them; the last one seen is the current phase.
PHASES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"non-default args|vLLM API server version|Initializing a V1 LLM engine"),
        "starting engine",
    ),
    (re.compile(r"attention backend|AttentionBackendEnum"), "attention backend selected"),
    (re.compile(r"Starting to load model|Loading weights|Loading model"), "loading weights"),
    (re.compile(r"Loading weights took|Model loading took"), "weights loaded"),
    (re.compile(r"torch\.compile|Compiling a graph|Dynamo bytecode transform"), "compiling"),
    (
        re.compile(r"Memory profiling|Available KV cache memory|GPU KV cache size"),
        "profiling memory / KV cache",
    ),
    (re.compile(r"Capturing CUDA graph|Graph capturing"), "capturing CUDA graphs"),
    (
        re.compile(r"init engine .* took|Starting vLLM API server|Available routes"),
        "starting API server",
    ),
    (re.compile(r"Application startup complete"), "API server up"),
]


@dataclass
class BackendSelection:
    """What the journal says about backend selection (the latest event wins)."""

    backend: str | None = None
    candidates: list[str] = field(default_factory=list)
    forced: bool = False
    failed: bool = False
    reasons: str | None = None
    line: str | None = None

    @property
    def found(self) -> bool:
        return self.backend is not None or self.failed


def parse_backend(lines: Iterable[str]) -> BackendSelection:
    """Scan journal lines for the selection; a failure line wins over an earlier selection."""
    result = BackendSelection()
    for raw in lines:
        line = raw.rstrip()
        if match := NO_BACKEND.search(line):
            reasons = REASONS.search(line)
            result = BackendSelection(
                failed=True, reasons=reasons[1] if reasons else match[2], line=line
            )
        elif match := NOT_VALID.search(line):
            result = BackendSelection(
                backend=None, failed=True, forced=True, reasons=match[2], line=line
            )
            result.candidates = [match[1]]
        elif (match := AUTO.search(line)) and not result.failed:
            result = BackendSelection(
                backend=match[1].rstrip(".,"), candidates=NAME.findall(match[2]), line=line
            )
        elif (match := FORCED.search(line)) and not result.failed:
            result = BackendSelection(backend=match[1], forced=True, line=line)
    return result


def parse_kernel(lines: Iterable[str]) -> str | None:
    """What TRITON_MLA_SPARSE logged of the kernel serving the layers (the last such line)."""
    found = None
    for line in lines:
        if match := KERNEL.search(line):
            found = match[1].strip()
    return found


def loading_phase(lines: Iterable[str]) -> str | None:
    """The furthest loading phase the journal shows (None before vLLM printed anything)."""
    phase = None
    for line in lines:
        for pattern, name in PHASES:
            if pattern.search(line):
                phase = name
    return phase


#: vLLM's words when the host has no usable NVIDIA GPU (platform detection, CUDA, NVML).
NO_GPU = re.compile(
    r"Failed to infer device type|No CUDA GPUs are available|Found no NVIDIA driver"
    r"|NVML Shared Library Not Found|CUDA driver initialization failed"
    r"|no CUDA-capable device",
    re.IGNORECASE,
)


def stop_cause(lines: list[str]) -> str | None:
    """Why vLLM stopped, when its journal says it in words glmops knows; else None."""
    for line in reversed(lines):
        if NO_GPU.search(line):
            return f"vLLM stopped for lack of a GPU: {line.strip()}"
    return None


def failure_summary(lines: list[str], limit: int = 5) -> list[str]:
    """The lines most likely to explain a failed start (errors and tracebacks' last lines)."""
    picked = [
        line
        for line in lines
        if re.search(
            r"\bERROR\b|Error:|Exception|No valid attention backend|CUDA out of memory", line
        )
    ]
    return picked[-limit:]
