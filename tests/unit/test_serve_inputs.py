"""vllm_serve_config and gguf_model read only their declared arguments and the typed facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmops.errors import InputError
from glmops.gpu.serving.flags import DEFAULTS, INPUTS
from glmops.modules.base import REGISTRY
from tests.support.engine import Runner

PLAY = """
- hosts: all
  gather_facts: false
  vars:
    vllm_port: 1111           # a free variable the module must not read
    vllm_served_model_name: free
  tasks:
    - name: flags
      vllm_serve_config:
        model: /m/model
        require_files: false
        vllm_venv: /opt/v
        glm5_hf_config_dir: /m/hf
        vllm_device: cpu
        {extra}
      register: serve
    - name: keep argv
      copy: {dest: "{{ root }}/argv.json", content: "{{ serve.argv | to_json }}", backup: false}
"""


def test_every_serving_input_is_a_declared_argument() -> None:
    args = REGISTRY["vllm_serve_config"].args
    for name, spec in INPUTS.items():
        assert args[name].types == spec.types and args[name].doc == spec.doc, name
        assert args[name].default == DEFAULTS.get(name), name
    assert args["vllm_venv"].required and args["glm5_hf_config_dir"].required
    assert "vllm_profile" in REGISTRY["gguf_model"].args


def test_module_reads_arguments_not_free_variables(
    run_playbook: Runner, local_inventory: Path
) -> None:
    outcome = run_playbook(PLAY.replace("{extra}", ""), local_inventory)
    assert outcome.exit_code == 0, outcome.stderr
    argv = _argv(local_inventory)
    assert argv[argv.index("--port") + 1] == "8000"  # the default, not the play's 1111
    assert argv[argv.index("--served-model-name") + 1] == "glm-5"

    outcome = run_playbook(PLAY.replace("{extra}", "vllm_port: 9000"), local_inventory)
    assert outcome.exit_code == 0, outcome.stderr
    argv = _argv(local_inventory)
    assert argv[argv.index("--port") + 1] == "9000"


def test_wrong_type_names_the_argument(run_playbook: Runner, local_inventory: Path) -> None:
    """A literal of the wrong type is refused when the playbook loads, naming file and line."""
    with pytest.raises(InputError) as refused:
        run_playbook(PLAY.replace("{extra}", "vllm_extra_args: -O3"), local_inventory)
    message = str(refused.value)
    assert "argument 'vllm_extra_args' of 'vllm_serve_config' must be list" in message
    assert "playbook.yml:" in message


def _argv(inventory: Path) -> list[str]:
    return json.loads((inventory.parent / "root" / "argv.json").read_text())
