"""`vllm serve` flags and the settings of the serving unit, from host facts and variables.

Every derived flag comes with the reason it was chosen (the fact and the rule), so `--diff`
and the deploy's messages can say why a flag is there. Sources: gguf-drivers.md §1.5 and §5,
vllm-internals.md §7 and §9.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glmops.facts import HostFacts
from glmops.gpus import family as gpu_family
from glmops.gpus import gguf_dtype
from glmops.serving.backends import Expectation, expected_backends

#: GLM-5 has 64 attention heads; tensor parallelism must divide them.
GLM5_ATTENTION_HEADS = 64

DEFAULTS: dict[str, Any] = {
    "vllm_unit": "vllm-glm5",
    "vllm_user": "vllm",
    "vllm_home": "/var/lib/vllm",
    "vllm_host": "0.0.0.0",
    "vllm_port": 8000,
    "vllm_served_model_name": "glm-5",
    # Bounds the KV cache each request may need; GLM-5 allows more, raise it per host.
    "vllm_max_model_len": 32768,
    # vLLM's own default is 600 s, too short for ~402 GB of GGUF (gguf-drivers.md §5.1).
    "vllm_engine_ready_timeout_s": 7200,
    "vllm_env_dir": "/etc/glmops",
    "vllm_restart_sec": 30,
    # Small burst: with 30-60 min loads a crash loop must not occupy the box forever.
    "vllm_start_limit_burst": 3,
    "vllm_start_limit_interval_s": 14400,
    "vllm_extra_args": [],
    "vllm_env": {},
    "vllm_ready_timeout_s": 7200,
    "deploy_state_dir": "/var/lib/glmops/deploy",
    # CPU hosts (vllm_device: cpu): GiB of RAM vLLM's CPU build reserves for the KV cache.
    "vllm_cpu_kvcache_space_gib": 1,
}

#: Flags glmops sets itself; giving them in vllm_extra_args would contradict the facts.
MANAGED_FLAGS = (
    "--tensor-parallel-size",
    "-tp",
    "--dtype",
    "--hf-config-path",
    "--tokenizer",
    "--served-model-name",
    "--host",
    "--port",
    "--max-model-len",
    "--attention-backend",
    "--kv-cache-dtype",
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")


class ServeError(ValueError):
    """The facts or variables do not allow a correct unit; the message says which and why."""


@dataclass(frozen=True)
class ServeConfig:
    """What the unit runs and why."""

    argv: list[str]
    env: dict[str, str]
    reasons: dict[str, str]
    settings: dict[str, Any]
    tensor_parallel: int
    dtype: str | None  # forced --dtype, or None (vLLM's auto: bf16 for GLM-5)
    effective_dtype: str
    profile: str | None
    compute_capability: tuple[int, int] | None
    expectation: Expectation
    warnings: list[str] = field(default_factory=list)
    device: str = "cuda"

    @property
    def exec_start(self) -> str:
        """The argv as one systemd ExecStart= line (quoted for systemd, not for a shell)."""
        return " ".join(systemd_quote(word) for word in self.argv)

    def as_data(self) -> dict[str, Any]:
        """JSON-able summary for `register:` and templates."""
        cc = self.compute_capability
        return {
            **self.settings,
            "argv": self.argv,
            "exec_start": self.exec_start,
            "env": self.env,
            "env_lines": [f"{key}={env_file_quote(value)}" for key, value in self.env.items()],
            "reasons": self.reasons,
            "tensor_parallel": self.tensor_parallel,
            "dtype": self.dtype,
            "effective_dtype": self.effective_dtype,
            "profile": self.profile,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "expected_backends": list(self.expectation.names),
            "expected_backend_why": self.expectation.why,
            "warnings": self.warnings,
            "device": self.device,
            # Where the selected backend can be read: vLLM's CPU platform logs no selection
            # line, so there the deploy asks vLLM's own selector (hosthelpers/vllm_backend_probe).
            "backend_source": "selector" if self.device == "cpu" else "journal",
        }


def setting(variables: Mapping[str, Any], name: str) -> Any:
    """A variable, or glmops' default for it (play vars would override the inventory)."""
    value = variables.get(name)
    return DEFAULTS.get(name) if value is None else value


def vllm_profile(facts: HostFacts, variables: Mapping[str, Any]) -> tuple[str | None, str]:
    """The vLLM layout the host runs ('0.16' or '0.33'), and where that came from."""
    if variables.get("vllm_profile"):
        return str(variables["vllm_profile"]), "inventory variable vllm_profile"
    manifest = facts.patch_manifest or {}
    if isinstance(manifest, Mapping) and manifest.get("profile"):
        return str(manifest["profile"]), "the patch manifest on the host"
    version = facts.venv.vllm_version if facts.venv else None
    parsed = _version(version)
    if parsed is None:
        return None, "unknown: no vLLM version in the facts and no vllm_profile variable"
    # In-tree GGUF loader (0.16 line) until 0.23; vllm-gguf-plugin from 0.24 (§1.5, §5.2).
    profile = "0.16" if parsed < (0, 24) else "0.33"
    return profile, f"vLLM {version} in {facts.venv.path if facts.venv else '?'}"


def needs_single_file(facts: HostFacts, variables: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the host's vLLM needs one merged GGUF file (and why)."""
    value = variables.get("gguf_needs_single_file")
    if value is not None:
        return bool(value), "inventory variable gguf_needs_single_file"
    profile, source = vllm_profile(facts, variables)
    if profile == "0.16":
        return True, f"profile 0.16 ({source}): the in-tree GGUF loader reads one file"
    if profile is not None:
        return False, f"profile {profile} ({source}): vllm-gguf-plugin loads split shards"
    return True, f"profile {source}; a merged file loads on every vLLM, so merge to be safe"


def gguf_loader_problem(facts: HostFacts, variables: Mapping[str, Any]) -> str | None:
    """Why this venv cannot load a GGUF model, or None. From vLLM 0.24 GGUF loading lives in
    the vllm-gguf-plugin package; without it vLLM fails only after start-up, so say it first.
    None when the facts cannot tell (no venv or no package list)."""
    profile, source = vllm_profile(facts, variables)
    packages = facts.venv.packages if facts.venv else {}
    if profile != "0.33" or "vllm-gguf-plugin" not in packages:
        return None
    if packages["vllm-gguf-plugin"]:
        return None
    venv = facts.venv.path if facts.venv else "the venv"
    return (
        f"{venv} cannot load GGUF: profile 0.33 ({source}) has no in-tree GGUF loader and "
        "vllm-gguf-plugin is not installed; set vllm_gguf_plugin: true and run "
        "`glmops provision`, then `glmops patch` (its GGUF item fixes the plugin for glm-dsa)"
    )


def serving_device(variables: Mapping[str, Any]) -> tuple[str, str]:
    """'cuda' or 'cpu' (vLLM's CPU build, package vllm-cpu), and why."""
    if variables.get("vllm_device"):
        device = str(variables["vllm_device"]).lower()
        if device not in ("cuda", "cpu"):
            raise ServeError(f"vllm_device must be cuda or cpu, not {device!r}")
        return device, "inventory variable vllm_device"
    if str(variables.get("vllm_package") or "") == "vllm-cpu":
        return "cpu", "inventory variable vllm_package is vllm-cpu"
    return "cuda", "default"


def serve_flags(facts: HostFacts, variables: Mapping[str, Any]) -> ServeConfig:
    """The `vllm serve` argv, environment and unit settings for this host.

    `variables["vllm_model"]` is the path vLLM loads (merged file or first shard).
    """
    venv = _required(variables, "vllm_venv")
    model = _required(variables, "vllm_model")
    config_dir = _required(variables, "glm5_hf_config_dir")
    tokenizer = variables.get("glm5_tokenizer") or config_dir
    reasons: dict[str, str] = {}
    warnings: list[str] = []

    device, device_why = serving_device(variables)
    gpus = facts.gpu_count
    if device == "cpu":
        gpus = 1  # one CPU worker; tensor parallelism is a GPU notion here
        reasons["--tensor-parallel-size"] = (
            f"omitted (TP 1): device cpu ({device_why}); vLLM's CPU build runs one worker"
        )
    elif gpus < 1:
        why = facts.reason("gpus") or "the facts list no GPU"
        raise ServeError(f"no GPU to serve on: {why}")
    tp = variables.get("vllm_tensor_parallel_size")
    if device == "cpu":
        tp = int(tp or 1)
        if tp != 1:
            raise ServeError(f"vllm_tensor_parallel_size {tp} on a CPU host: only 1 is supported")
    elif tp is None:
        tp = gpus
        reasons["--tensor-parallel-size"] = f"{gpus} GPU(s) in the facts"
    else:
        tp = int(tp)
        reasons["--tensor-parallel-size"] = "inventory variable vllm_tensor_parallel_size"
        if tp != gpus:
            warnings.append(f"tensor parallel {tp} ≠ {gpus} GPUs on the host")
        if tp > gpus:
            raise ServeError(f"vllm_tensor_parallel_size {tp} > {gpus} GPUs on the host")
    if tp < 1 or GLM5_ATTENTION_HEADS % tp:
        raise ServeError(
            f"tensor parallel {tp} does not divide GLM-5's {GLM5_ATTENTION_HEADS} attention heads"
        )

    cc = facts.compute_capability
    is_gguf = str(model).endswith(".gguf")
    dtype = variables.get("vllm_dtype")
    if dtype:
        reasons["--dtype"] = "inventory variable vllm_dtype"
    elif device == "cpu":
        dtype = "float32"
        reasons["--dtype"] = (
            "CPU host: float32 runs on every x86 CPU (bf16 needs AVX512-BF16/AMX to be fast; "
            "set vllm_dtype: bfloat16 there)"
        )
    elif is_gguf and cc is not None and gguf_dtype(cc):
        dtype = gguf_dtype(cc)
        reasons["--dtype"] = (
            f"GGUF on compute capability {cc[0]}.{cc[1]} ({gpu_family(cc).key}): vLLM's GGUF "
            "quantization refuses bfloat16 there"
        )
    elif is_gguf and cc is None:
        warnings.append("compute capability unknown: --dtype left to vLLM")
    effective = str(dtype) if dtype else "bfloat16"

    profile, _source = vllm_profile(facts, variables)
    forced = variables.get("vllm_attention_backend")
    override = variables.get("vllm_expected_backend")
    expectation = expected_backends(
        cc, effective, profile, forced=forced, override=override, device=device
    )

    settings = {key: setting(variables, key) for key in DEFAULTS}
    settings["vllm_venv"] = venv
    settings["vllm_model"] = model
    settings["glm5_hf_config_dir"] = config_dir
    settings["glm5_tokenizer"] = tokenizer
    unit = str(settings["vllm_unit"])
    settings["unit_name"] = unit
    settings["unit_path"] = f"/etc/systemd/system/{unit}.service"
    settings["env_path"] = f"{settings['vllm_env_dir']}/{unit}.env"
    settings["inputs_path"] = f"{settings['deploy_state_dir']}/{unit}.inputs.json"
    settings["record_path"] = f"{settings['deploy_state_dir']}/{unit}.last-deploy.json"

    settings["device"] = device
    if device == "cpu":
        # vllm-cpu's `vllm` script asks importlib.metadata for the distribution "vllm", which
        # the CPU build is not (it is vllm-cpu): the script dies before parsing its arguments.
        # The API server module takes the same flags.
        argv = [f"{venv}/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
        argv += ["--model", str(model)]
        reasons["--model"] = "vllm-cpu's `vllm` CLI cannot start (it looks up package 'vllm')"
    else:
        argv = [f"{venv}/bin/vllm", "serve", str(model)]
    argv += ["--served-model-name", str(settings["vllm_served_model_name"])]
    argv += ["--host", str(settings["vllm_host"]), "--port", str(int(settings["vllm_port"]))]
    if device != "cpu":
        argv += ["--tensor-parallel-size", str(tp)]
    if dtype:
        argv += ["--dtype", str(dtype)]
    argv += ["--hf-config-path", str(config_dir), "--tokenizer", str(tokenizer)]
    reasons["--hf-config-path"] = (
        "GGUF carries no HF config; a local copy keeps boots off the Hub"
        if is_gguf
        else "the model folder's own config, named so boots never ask the Hub"
    )
    argv += ["--max-model-len", str(settings["vllm_max_model_len"])]
    if forced:
        argv += ["--attention-backend", str(forced)]
        reasons["--attention-backend"] = "inventory variable vllm_attention_backend"
    if variables.get("vllm_kv_cache_dtype"):
        argv += ["--kv-cache-dtype", str(variables["vllm_kv_cache_dtype"])]
    argv += _extra_args(settings["vllm_extra_args"])

    env = {
        "VLLM_ENGINE_READY_TIMEOUT_S": str(int(settings["vllm_engine_ready_timeout_s"])),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if device == "cpu":
        # vLLM's CPU build sizes its KV cache from this (GiB of RAM), not from a GPU's memory.
        env["VLLM_CPU_KVCACHE_SPACE"] = str(int(settings["vllm_cpu_kvcache_space_gib"]))
    else:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["HOME"] = str(settings["vllm_home"])
    extra_env = settings["vllm_env"]
    if not isinstance(extra_env, Mapping):
        raise ServeError("vllm_env must be a mapping of environment variables")
    for key, value in extra_env.items():
        if not ENV_NAME.match(str(key)):
            raise ServeError(f"vllm_env: {key!r} is not an environment variable name")
        env[str(key)] = str(value)
    return ServeConfig(
        argv=argv,
        env=env,
        reasons=reasons,
        settings=settings,
        tensor_parallel=tp,
        dtype=str(dtype) if dtype else None,
        effective_dtype=effective,
        profile=profile,
        compute_capability=cc,
        expectation=expectation,
        warnings=warnings,
        device=device,
    )


def _required(variables: Mapping[str, Any], name: str) -> str:
    value = variables.get(name)
    if value in (None, ""):
        raise ServeError(f"variable {name} is not set (see playbooks/deploy.yml)")
    return str(value)


def _extra_args(extra: Any) -> list[str]:
    if not isinstance(extra, list) or not all(isinstance(a, str | int | float) for a in extra):
        raise ServeError("vllm_extra_args must be a list of words")
    words = [str(a) for a in extra]
    for word in words:
        flag = word.split("=", 1)[0]
        if flag == "--api-key":
            raise ServeError("--api-key would put the key in argv: set vllm_api_key instead")
        if flag in MANAGED_FLAGS:
            raise ServeError(
                f"{flag} is set by glmops from the facts; drop it from vllm_extra_args"
            )
    return words


def _version(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2])) if match else None


def systemd_quote(word: str) -> str:
    """One argv word for ExecStart=: specifiers (%) and variables ($) escaped, quoted if needed."""
    if "\n" in word:
        raise ServeError(f"newline in a unit argument: {word!r}")
    escaped = word.replace("%", "%%").replace("$", "$$")
    if PLAIN_WORD.match(word):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def env_file_quote(value: str) -> str:
    """A value for an EnvironmentFile= line, double-quoted (no expansion happens there)."""
    if "\n" in value or "\r" in value:
        raise ServeError("newline in an environment value")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
