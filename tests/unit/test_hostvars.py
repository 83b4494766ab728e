"""`hostvars` and `groups` through the real engine on local hosts: a router host's template
lists its replicas from their inventory variables and from what their tasks registered."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.engine import Runner
from tests.support.local_hosts import local_hosts


def _inventory(tmp_path: Path) -> Path:
    ports = {"r1": 8001, "r2": 8002}
    return local_hosts(
        tmp_path,
        {"replicas": ["r1", "r2"], "routers": ["lb"]},
        group_vars={"out": str(tmp_path / "out")},
        host_vars=lambda name: {
            "port": ports.get(name, 80),
            "url": "http://{{ inventory_hostname }}:{{ port }}",
            "api_key": f"sk-secret-of-{name}",
        },
    )


def test_a_router_lists_its_replicas_from_their_variables_and_registered_results(
    run_playbook: Runner, tmp_path: Path
) -> None:
    (tmp_path / "out").mkdir()
    play = """
    - hosts: replicas
      gather_facts: false
      tasks:
        - name: each replica learns something
          command: echo "id-{{ inventory_hostname }}"
          register: ident
    - hosts: routers
      gather_facts: false
      tasks:
        - name: backends
          copy:
            dest: "{{ out }}/backends.json"
            content: >-
              {{ {'groups': groups['replicas'],
                  'urls': groups['replicas'] | map('extract', hostvars, 'url') | list,
                  'ids': groups['replicas']
                         | map('extract', hostvars, ['ident', 'stdout']) | list,
                  'hosts': hostvars | list | sort,
                  'their_groups': hostvars['r2'].group_names} | to_json }}
        - name: another host's secret
          debug: {msg: "key {{ hostvars['r1'].api_key }}"}
    """
    outcome = run_playbook(play, _inventory(tmp_path))
    assert outcome.exit_code == 0, outcome.stderr
    written = json.loads((tmp_path / "out" / "backends.json").read_text())
    assert written == {
        "groups": ["r1", "r2"],
        "urls": ["http://r1:8001", "http://r2:8002"],
        "ids": ["id-r1", "id-r2"],
        "hosts": ["lb", "r1", "r2"],
        "their_groups": ["replicas"],
    }
    shown = json.dumps(outcome.events) + outcome.stderr
    assert "sk-secret-of-r1" not in shown and "key ***" in shown.replace("*" * 8, "***")
    assert run_playbook(play, _inventory(tmp_path)).status("backends") == "ok"


def test_a_host_not_in_the_inventory_fails_the_task_that_asks(
    run_playbook: Runner, tmp_path: Path
) -> None:
    play = """
    - hosts: lb
      gather_facts: false
      tasks:
        - name: ask
          debug: {msg: "{{ hostvars['nope'].port }}"}
    """
    outcome = run_playbook(play, _inventory(tmp_path))
    assert outcome.exit_code == 2
    failure = outcome.results("lb")[-1]
    assert failure["status"] == "failed" and "nope" in failure["msg"], failure
