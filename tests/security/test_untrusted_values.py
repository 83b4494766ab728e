"""Untrusted values stay data (issue 44, item 1): what hosts, helpers and the Hub say is never
rendered as a template, on its way through register, facts, set_fact, helper replies and
`glmops up`'s phase hand-off. Real playbooks run through the engine on a local host; each
rendered value is written to a file by `copy` and compared with the payload, byte for byte.

The payload both executes code if rendered without the sandbox (it touches `pwned` in the
working directory) and shows any second rendering at all (`{{ 7 * 7 }}` would become 49).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import Runner

PAYLOAD = "A{{ 7 * 7 }}B{{ cycler.__init__.__globals__.os.system('touch pwned') }}C"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_inventory: Path) -> Path:
    """The test's folder as working directory (where a payload that ran leaves `pwned`), with
    the payload in `payload.txt` for commands to print."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "payload.txt").write_text(PAYLOAD)
    (tmp_path / "out").mkdir()
    return tmp_path


def check_outputs(hostile: Any, here: Path, expected: dict[str, str]) -> None:
    """Each `out/<name>` holds exactly its expected text, and no payload ran."""
    for name, wanted in expected.items():
        path = here / "out" / name
        got = path.read_text() if path.exists() else None
        hostile.check(name, got == wanted, f"wrote {got!r}, wanted {wanted!r}")
    hostile.check("no code ran", not (here / "pwned").exists(), "the payload ran on the controller")


def test_registered_stdout_stderr_and_derived_values_are_never_rendered_again(
    run_playbook: Runner, local_inventory: Path, here: Path, hostile: Any
) -> None:
    outcome = run_playbook(
        """
        - hosts: here
          gather_facts: false
          vars:
            derived: "pre {{ out.stdout }}"
          tasks:
            - command: cat payload.txt
              register: out
            - shell: cat payload.txt >&2
              register: err
            - shell: |
                printf '{"k": "%s"}' "$(cat payload.txt)"
              register: js
            - set_fact:
                copied: "{{ out.stdout }}"
                wrapped: "x {{ out.stdout }} y"
                parsed: "{{ js.stdout | from_json }}"
            - set_fact:
                chained: "{{ wrapped }}!"
            - copy: {content: "{{ out.stdout }}", dest: out/stdout}
            - copy: {content: "{{ err.stderr }}", dest: out/stderr}
            - copy: {content: "{{ copied }}", dest: out/set_fact}
            - copy: {content: "{{ chained }}", dest: out/set_fact_chain}
            - copy: {content: "{{ parsed.k }}", dest: out/from_json}
            - copy: {content: "{{ derived }}", dest: out/play_var}
            - copy: {content: "{{ hostvars['here'].out.stdout }}", dest: out/hostvars}
            - copy: {content: "{{ item }}", dest: "out/loop"}
              loop: "{{ out.stdout_lines }}"
            - debug: {msg: "{{ out.stdout }}"}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.events
    check_outputs(
        hostile,
        here,
        {
            "stdout": PAYLOAD,
            "stderr": PAYLOAD,
            "set_fact": PAYLOAD,
            "set_fact_chain": f"x {PAYLOAD} y!",
            "from_json": PAYLOAD,
            "play_var": f"pre {PAYLOAD}",
            "hostvars": PAYLOAD,
            "loop": PAYLOAD,
        },
    )


def test_untrusted_text_is_never_evaluated_as_an_expression(
    run_playbook: Runner, local_inventory: Path, here: Path, hostile: Any
) -> None:
    """`debug: var:` and `assert: that:` evaluate their argument: never one a host wrote."""
    (here / "expr.txt").write_text("cycler.__init__.__globals__.os.system('touch pwned')")
    outcome = run_playbook(
        """
        - hosts: here
          gather_facts: false
          tasks:
            - command: cat expr.txt
              register: out
            - debug: {var: "{{ out.stdout }}"}
              ignore_errors: true
            - assert: {that: "{{ out.stdout }}"}
              ignore_errors: true
            - assert: {that: "x{{ out.stdout }}"}
              ignore_errors: true
        """,
        local_inventory,
    )
    statuses = [e["status"] for e in outcome.results()]
    hostile.check("debug var / assert that", statuses[1:] == ["failed"] * 3, f"{statuses}")
    check_outputs(hostile, here, {})


def test_facts_from_a_crafted_venv_stay_data(
    run_playbook: Runner, local_inventory: Path, here: Path, hostile: Any
) -> None:
    """The real fact probe, run on a venv whose python reports a crafted vLLM version."""
    venv = here / "venv"
    (venv / "bin").mkdir(parents=True)
    reply = {"python_version": "3.11.0", "packages": {"vllm": PAYLOAD, "torch": None}}
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(reply)}\nEOF\n")
    python.chmod(0o755)
    inventory = here / "facts-hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    here:\n"
        f"      connection: local\n      state_dir: '{here}/state'\n      vllm_venv: '{venv}'\n"
    )
    outcome = run_playbook(
        """
        - hosts: here
          gather_facts: true
          tasks:
            - set_fact: {version: "{{ facts.venv.vllm_version }}"}
            - copy: {content: "{{ version }}", dest: out/fact}
            - copy: {content: "{{ facts.venv.packages.vllm }}", dest: out/fact_direct}
        """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.events
    check_outputs(hostile, here, {"fact": PAYLOAD, "fact_direct": PAYLOAD})


def test_a_helper_reply_naming_host_files_stays_data(
    run_playbook: Runner, local_inventory: Path, here: Path, hostile: Any
) -> None:
    """gguf_model's helper (gguf_split validate) names the shards it found on the host: a
    host file named like a template comes back as that name, never rendered."""
    pytest.importorskip("gguf", reason="gguf is in the test extras")
    from tests.support.gguf_models import split_set

    stem = "m{{ 7 * 7 }}{{ cycler.__init__.__globals__.os.system('touch pwned') }}"
    first = split_set(here / "shards", stem=stem, split_max_tensors=2)
    outcome = run_playbook(
        f"""
        - hosts: here
          gather_facts: false
          tasks:
            - gguf_model: {{shards: "{here}/shards", single_file: false}}
              register: model
            - set_fact: {{first: "{{{{ model.first_shard }}}}"}}
            - copy: {{content: "{{{{ first | basename }}}}", dest: out/helper}}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.events
    check_outputs(hostile, here, {"helper": first.name})


def test_raw_blocks_and_unsafe_tags_keep_their_meaning(
    run_playbook: Runner, local_inventory: Path, here: Path, hostile: Any
) -> None:
    outcome = run_playbook(
        f"""
        - hosts: here
          gather_facts: false
          vars:
            raw: "{{% raw %}}{{{{ 7 * 7 }}}}{{% endraw %}}"
            via_raw: "{{{{ raw }}}}"
            tagged: !unsafe "{PAYLOAD}"
            tagged_list: !unsafe ["{PAYLOAD}"]
            via_tagged: "<{{{{ tagged }}}}>"
          tasks:
            - copy: {{content: "{{{{ raw }}}}", dest: out/raw}}
            - copy: {{content: "{{{{ via_raw }}}}", dest: out/raw_via_var}}
            - set_fact: {{kept: "{{{{ raw }}}}"}}
            - copy: {{content: "{{{{ kept }}}}", dest: out/raw_set_fact}}
            - copy: {{content: "{{{{ tagged }}}}", dest: out/unsafe}}
            - copy: {{content: "{{{{ tagged_list[0] }}}}", dest: out/unsafe_list}}
            - copy: {{content: "{{{{ via_tagged }}}}", dest: out/unsafe_via_var}}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.events
    check_outputs(
        hostile,
        here,
        {
            "raw": "{{ 7 * 7 }}",
            "raw_via_var": "{{ 7 * 7 }}",
            "raw_set_fact": "{{ 7 * 7 }}",
            "unsafe": PAYLOAD,
            "unsafe_list": PAYLOAD,
            "unsafe_via_var": f"<{PAYLOAD}>",
        },
    )


def test_trusted_variables_still_refer_to_each_other(
    run_playbook: Runner, local_inventory: Path, here: Path
) -> None:
    """Playbook, inventory and -e variables render in each other's scope, in any order and
    depth, native types kept; a loop between them fails only the task that uses it."""
    outcome = run_playbook(
        """
        - hosts: here
          gather_facts: false
          vars:
            top: "{{ middle }}/top"
            middle: "{{ bottom }}/middle"
            bottom: "{{ base }}"
            port: "{{ base_port + 1 }}"
            ports: ["{{ port }}", "{{ port * 2 }}"]
            one: "{{ two }}"
            two: "{{ one }}"
          tasks:
            - copy: {content: "{{ top }} {{ ports | to_json }}", dest: out/trusted}
            - debug: {msg: "{{ one }}"}
              ignore_errors: true
        """,
        local_inventory,
        extra=["base=/srv", "base_port=8000"],
    )
    assert (here / "out" / "trusted").read_text() == "/srv/middle/top [8001, 16002]"
    failed = outcome.results()[-1]
    assert failed["status"] == "failed"
    assert "recursive variables: one -> two -> one" in failed["msg"], failed


def test_hub_file_names_pass_from_the_model_phase_to_deploy_as_data(
    here: Path, hostile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`glmops up`'s deploy phase gets the model phase's paths (from the Hub's file names)
    as typed data: the model phase's writer makes them from a manifest listing a hostile
    name, `up`'s progress file keeps them, and deploy runs a real playbook with them."""
    from types import SimpleNamespace

    from glmops.cli.up import Progress
    from glmops.cli.up_phases import PhaseRunners
    from glmops.engine.inventory import load_inventory
    from glmops.model.manifest import FileEntry, Manifest
    from glmops.model.phase import _paths

    monkeypatch.setenv("GLMOPS_RUN_DIR", str(here / "runs"))
    name = "UD/{{ 7 * 7 }}{{ cycler.__init__.__globals__.os.system('touch pwned') }}"
    listed = f"weights/{name}-00001-of-00001.gguf"
    manifest = Manifest(
        ({"part": "weights", "repo": "o/m", "revision": "main", "commit": "c" * 40},),
        (FileEntry(listed, 1, "0" * 64, "lfs"),),
    )
    inventory_path = here / "up-hosts.yml"
    inventory_path.write_text(
        "all:\n  hosts:\n    here:\n"
        f"      connection: local\n      state_dir: '{here}/state'\n"
        f"      model_dir: '{here}/models'\n"
    )
    host = load_inventory(inventory_path).hosts["here"]
    found = _paths(SimpleNamespace(host=host), manifest)
    progress = Progress(here / "progress.json")
    progress.values["here"] = {k: found[k] for k in ("gguf_shards", "glm5_hf_config_dir")}
    progress.save()  # as `up` keeps them between runs
    playbooks = here / "playbooks"
    playbooks.mkdir()
    (playbooks / "deploy.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        '    - set_fact: {shards: "{{ gguf_shards }}"}\n'
        '    - copy: {content: "{{ shards }}", dest: out/hub_name}\n'
        '    - debug: {msg: "serving {{ gguf_shards | basename }}"}\n'
    )
    monkeypatch.setattr("glmops.paths.playbooks", lambda: playbooks)
    for check in (False, True):  # also under `up -C`
        runners = PhaseRunners(
            inventory_path, {"check": check}, Progress.load(progress.path), [host]
        )
        outcomes = runners.deploy([host])
        hostile.check(
            f"hub file name, check={check}",
            outcomes["here"].status in ("ok", "changed"),
            f"deploy {outcomes['here']}",
        )
    check_outputs(hostile, here, {"hub_name": f"{here}/models/{listed}"})


def test_templates_loops_and_conditions_see_host_output_as_data(
    run_playbook: Runner, local_inventory: Path, here: Path, hostile: Any
) -> None:
    """A template file, a looped task's registered `results`, and the `result` that `until`
    and `changed_when` see: host output in each is the text it was."""
    (here / "page.j2").write_text("[{{ out.stdout }}]")
    outcome = run_playbook(
        f"""
        - hosts: here
          gather_facts: false
          tasks:
            - command: cat payload.txt
              register: out
              until: result.stdout | length > 0
              retries: 1
              delay: 0
              changed_when: result.stdout != 'x'
            - template: {{src: {here}/page.j2, dest: out/template}}
            - command: cat {{{{ item }}}}
              loop: [payload.txt]
              register: looped
            - copy: {{content: "{{{{ looped.results[0].stdout }}}}", dest: out/loop_results}}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.events
    check_outputs(hostile, here, {"template": f"[{PAYLOAD}]", "loop_results": PAYLOAD})
