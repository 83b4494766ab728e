"""glmops.gpu.serving: serve flags from facts, expected backends, journal parsing, quoting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmops.gpu.facts import parse_facts
from glmops.gpu.patchset.profiles import PROFILES, profile_by_name
from glmops.gpu.serving import (
    ServeError,
    expected_backends,
    gguf_loader_problem,
    loading_phase,
    needs_single_file,
    parse_backend,
    serve_flags,
    systemd_quote,
    vllm_profile,
)
from glmops.gpu.serving.journal import failure_summary, stop_cause
from glmops.gpu.serving.preflight import parse_preflight
from glmops.unitfile import UnitValueError
from tests.support.manifests import written_manifest
from tests.support.serving_inputs import BASE, facts

V0_16, V0_33 = profile_by_name("v0_16"), profile_by_name("v0_33")
H200 = json.loads((Path(__file__).parents[1] / "fixtures/facts/h200.json").read_text())


def test_rtx_pro_6000_x8_gets_tp8_and_float16() -> None:
    config = serve_flags(facts(8, "12.0"), BASE)
    argv = config.argv
    assert argv[:3] == ["/opt/venv/bin/vllm", "serve", BASE["vllm_model"]]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert argv[argv.index("--dtype") + 1] == "float16"
    assert argv[argv.index("--hf-config-path") + 1] == "/models/glm-5-hf"
    assert argv[argv.index("--tokenizer") + 1] == "/models/glm-5-hf"
    assert argv[argv.index("--served-model-name") + 1] == "glm-5"
    assert argv[argv.index("--max-model-len") + 1] == "32768"
    assert "12.0 (sm120)" in config.reasons["--dtype"]
    assert config.expectation.names == ("TRITON_MLA_SPARSE",)
    assert int(config.env["VLLM_ENGINE_READY_TIMEOUT_S"]) > 600
    assert "--api-key" not in argv and not any("KEY" in k for k in config.env)


def test_h200_fixture_keeps_auto_dtype_and_expects_flashmla_sparse() -> None:
    config = serve_flags(parse_facts(H200), {**BASE, "vllm_profile": "v0_16"})
    assert "--dtype" not in config.argv and config.effective_dtype == "bfloat16"
    assert config.tensor_parallel == 1
    assert config.expectation.names == ("FLASHMLA_SPARSE",)


def test_b200_gguf_fp16_expects_triton_fallback_and_safetensors_no_dtype() -> None:
    config = serve_flags(facts(8, "10.0"), BASE)
    assert config.dtype == "float16" and config.expectation.names == ("TRITON_MLA_SPARSE",)
    other = serve_flags(facts(8, "10.0"), {**BASE, "vllm_model": "/models/glm-5-fp8"})
    assert other.dtype is None and other.expectation.names == ("FLASHMLA_SPARSE",)


def test_overrides_and_refusals() -> None:
    with pytest.raises(ServeError, match="no GPU"):
        serve_flags(facts(0, "12.0"), BASE)
    with pytest.raises(ServeError, match="does not divide"):
        serve_flags(facts(6, "12.0"), BASE)
    with pytest.raises(ServeError, match="> 2 GPUs"):
        serve_flags(facts(2, "12.0"), {**BASE, "vllm_tensor_parallel_size": 4})
    with pytest.raises(ServeError, match="argv"):
        serve_flags(facts(8, "12.0"), {**BASE, "vllm_extra_args": ["--api-key", "x"]})
    with pytest.raises(ServeError, match="set by glmops"):
        serve_flags(facts(8, "12.0"), {**BASE, "vllm_extra_args": ["--dtype=bfloat16"]})
    with pytest.raises(ServeError, match="glm5_hf_config_dir"):
        serve_flags(facts(8, "12.0"), {**BASE, "glm5_hf_config_dir": ""})
    tp4 = serve_flags(facts(8, "12.0"), {**BASE, "vllm_tensor_parallel_size": 4})
    assert tp4.tensor_parallel == 4 and tp4.warnings
    port = serve_flags(facts(8, "12.0"), {**BASE, "vllm_port": 9000, "vllm_extra_args": ["-O3"]})
    assert "9000" in port.argv and port.argv[-1] == "-O3"


def test_profile_and_single_file(tmp_path: Path) -> None:
    assert vllm_profile(facts(1, "9.0", "0.16.0rc2.dev313"), {})[0] == V0_16
    assert vllm_profile(facts(1, "9.0", "0.33.0"), {})[0] == V0_33
    assert vllm_profile(facts(1, "9.0", None), {})[0] is None
    assert vllm_profile(facts(1, "9.0", "0.9.2"), {})[0] is None  # no layout covers it
    assert needs_single_file(facts(1, "9.0", "0.16.0"), {})[0] is True
    assert needs_single_file(facts(1, "9.0", "0.33.0"), {})[0] is False
    assert needs_single_file(facts(1, "9.0", None), {})[0] is True  # unknown: merge to be safe
    assert needs_single_file(facts(1, "9.0", "0.16.0"), {"gguf_needs_single_file": False}) == (
        False,
        "inventory variable gguf_needs_single_file",
    )
    with pytest.raises(ServeError, match="known: v0_16, v0_33"):
        vllm_profile(facts(1, "9.0", "0.16.0"), {"vllm_profile": "0.16"})


@pytest.mark.parametrize("name", [p.name for p in PROFILES])
def test_manifest_layout_decides_the_merge(tmp_path: Path, name: str) -> None:
    """The layout a patched host's manifest names (written by the patch helper) wins over the
    version, and decides whether the shards are merged: a 0.16 host reads one file."""
    manifest = written_manifest(tmp_path / "site-packages", name)
    layout = profile_by_name(name)
    other = "0.33.0" if layout.gguf_single_file else "0.16.0"  # the manifest must win
    host = facts(1, "12.0", other, manifest)
    assert vllm_profile(host, {}) == (layout, "the patch manifest on the host")
    single, why = needs_single_file(host, {})
    assert single is layout.gguf_single_file and name in why
    config = serve_flags(facts(8, "12.0", other, manifest), BASE)
    assert config.profile == name and config.as_data()["profile"] == name


def test_gguf_loader_problem_names_the_missing_plugin() -> None:
    def with_plugin(vllm: str, plugin: str | None, listed: bool = True):
        packages = {"vllm": vllm, **({"vllm-gguf-plugin": plugin} if listed else {})}
        venv = {"path": "/opt/venv", "vllm_version": vllm, "packages": packages}
        return parse_facts({"gpus": [], "venv": venv})

    problem = gguf_loader_problem(with_plugin("0.33.0", None), {})
    assert problem and "vllm-gguf-plugin is not installed" in problem and "/opt/venv" in problem
    assert gguf_loader_problem(with_plugin("0.33.0", "0.0.5"), {}) is None
    assert gguf_loader_problem(with_plugin("0.16.0", None), {}) is None  # in-tree loader
    assert gguf_loader_problem(with_plugin("0.33.0", None, listed=False), {}) is None  # unknown


def test_expected_backend_table() -> None:
    assert expected_backends((12, 1), "float16", V0_33).names == ("TRITON_MLA_SPARSE",)
    assert expected_backends((8, 9), "bfloat16", V0_16).names == ("TRITON_MLA_SPARSE",)
    assert expected_backends((9, 0), "float16", V0_16).names == ()
    assert expected_backends((9, 0), "bfloat16", V0_16).names == ("FLASHMLA_SPARSE",)
    assert len(expected_backends((9, 0), "bfloat16", V0_33).names) == 3
    assert "FLASHMLA_SPARSE" in expected_backends((10, 0), "bfloat16", V0_33).names
    assert expected_backends((10, 0), "float16", V0_16).names == ("TRITON_MLA_SPARSE",)
    assert expected_backends((10, 0), "float16", V0_33).names[0] == "FLASHINFER_MLA_SPARSE"
    assert expected_backends(None, "bfloat16", V0_16).names == ()
    assert expected_backends((12, 0), "float16", V0_16, forced="custom").names == ("CUSTOM",)
    assert expected_backends((12, 0), "x", None, override=["a", "B"]).names == ("A", "B")


def test_systemd_quote() -> None:
    assert systemd_quote("/opt/venv/bin/vllm") == "/opt/venv/bin/vllm"
    assert systemd_quote("a b") == '"a b"'
    assert systemd_quote('say "hi" 100%') == '"say \\"hi\\" 100%%"'
    assert systemd_quote("$HOME") == '"$$HOME"'
    assert systemd_quote('{"k": 1}') == '"{\\"k\\": 1}"'
    with pytest.raises(UnitValueError):
        systemd_quote("a\nb")


AUTO_LINE = (
    "(Worker_TP0 pid=4242) INFO 11-29 10:00:00 [cuda.py:368] Using TRITON_MLA_SPARSE attention "
    "backend out of potential backends: ['TRITON_MLA_SPARSE', 'FLASHMLA_SPARSE']."
)
NO_BACKEND = (
    "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig("
    "head_size=576, dtype=torch.float16, use_mla=True, use_sparse=True). Reasons: "
    "{FLASHMLA_SPARSE: [compute capability not supported], TRITON_MLA: [sparse not supported]}."
)


def test_parse_backend_auto_forced_and_failure() -> None:
    selection = parse_backend(["INFO starting", AUTO_LINE])
    assert selection.backend == "TRITON_MLA_SPARSE" and not selection.forced
    assert selection.candidates == ["TRITON_MLA_SPARSE", "FLASHMLA_SPARSE"]
    tuple_style = parse_backend(
        ["Using FLASHMLA_SPARSE attention backend out of potential backends: ('FLASHMLA_SPARSE',)"]
    )
    assert tuple_style.backend == "FLASHMLA_SPARSE"
    forced = parse_backend(["INFO [cuda.py:1] Using AttentionBackendEnum.CUSTOM backend."])
    assert forced.backend == "CUSTOM" and forced.forced
    failed = parse_backend([AUTO_LINE, NO_BACKEND])
    assert failed.failed and failed.backend is None
    assert failed.reasons is not None and "compute capability not supported" in failed.reasons
    invalid = parse_backend(
        [
            "ValueError: Selected backend AttentionBackendEnum.FLASHMLA_SPARSE "
            "is not valid for this configuration. Reason: ['dtype not supported']"
        ]
    )
    assert invalid.failed and invalid.candidates == ["FLASHMLA_SPARSE"]
    assert not parse_backend(["nothing here"]).found


def test_loading_phase_and_failure_summary() -> None:
    assert loading_phase([]) is None
    lines = ["INFO non-default args: {}", AUTO_LINE, "INFO Loading weights took 812.3 seconds"]
    assert loading_phase(lines) == "weights loaded"
    assert loading_phase([*lines, "INFO Capturing CUDA graphs (mixed prefill-decode)"]) == (
        "capturing CUDA graphs"
    )
    assert failure_summary(["INFO ok", "ERROR boom", NO_BACKEND]) == ["ERROR boom", NO_BACKEND]


def test_parse_preflight_reads_the_schema_only() -> None:
    assert parse_preflight({"selected": "AttentionBackendEnum.TRITON_MLA_SPARSE"}).backend == (
        "TRITON_MLA_SPARSE"
    )
    none = parse_preflight(
        {
            "failed": True,
            "msg": "No valid attention backend found",
            "selected": None,
            "candidates": [
                {"backend": "FLASHMLA_SPARSE", "priority": 0, "valid": False, "reasons": ["cc"]},
                {"backend": "TRITON_MLA_SPARSE", "priority": 1, "valid": True, "reasons": []},
            ],
            "rejected": {"X": ["a spelling the helper never writes"]},
        }
    )
    assert none.backend is None and none.error == "No valid attention backend found"
    assert none.rejected == {"FLASHMLA_SPARSE": ["cc"]}


def test_parse_preflight_patchset_reply() -> None:
    """The reply shape of hosthelpers/vllm_preflight.py."""
    reply = {
        "failed": True,
        "selected": None,
        "error": "No valid attention backend found for cuda with ...",
        "candidates": [
            {"backend": "TRITON_MLA", "valid": False, "reasons": ["sparse not supported"]},
            {"backend": "FLASHMLA_SPARSE", "valid": False, "reasons": ["compute capability"]},
        ],
    }
    result = parse_preflight(reply)
    assert result.backend is None and result.error and result.error.startswith("No valid")
    assert result.rejected["TRITON_MLA"] == ["sparse not supported"]
    assert parse_preflight({"failed": False, "selected": "TRITON_MLA_SPARSE"}).error is None


def test_stop_cause_names_a_missing_gpu() -> None:
    lines = [
        "vllm-glm5[9]: INFO non-default args: {...}",
        "vllm-glm5[9]: RuntimeError: Failed to infer device type, please set VLLM_LOGGING_LEVEL",
        "systemd[1]: vllm-glm5.service: Main process exited, code=exited, status=1/FAILURE",
    ]
    assert stop_cause(lines) == f"vLLM stopped for lack of a GPU: {lines[1]}"
    assert stop_cause(lines[:1] + lines[2:]) is None
