"""Roles, pre_tasks/post_tasks and a play's `connection:` through the real engine on a local
host, with Ansible's semantics (checked against ansible-core 2.19 runs): defaults lowest,
vars and parameters above the play's, the role's templates/ and files/ searched first, its
handlers first, meta dependencies once unless allow_duplicates, include_role/import_role with
tasks_from."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmops.engine.playbook import load_playbook
from glmops.errors import InputError
from tests.support.engine import Runner


def make_role(base: Path, name: str, files: dict[str, str]) -> Path:
    """A role folder under base/roles holding `files` ({"tasks/main.yml": text, ...})."""
    folder = base / "roles" / name
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def test_a_roles_parts_and_their_precedence(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    make_role(
        tmp_path,
        "web",
        {
            "tasks/main.yml": (
                "- name: config\n  template: {src: web.j2, dest: '{{ root }}/web.conf'}\n"
                "  notify: reload\n"
                "- name: page\n  copy: {src: index.html, dest: '{{ root }}/index.html'}\n"
            ),
            "handlers/main.yml": "- name: reload\n  copy: {content: 'r', dest: '{{ root }}/r'}\n",
            "defaults/main.yml": "port: 80\nsite: default\n",
            "vars/main.yml": "user: www\n",
            "templates/web.j2": "{{ site }} {{ port }} {{ user }}\n",
            "files/index.html": "<p>hi</p>\n",
        },
    )
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          vars: {port: 9090}
          roles: [web]
          tasks:
            - name: play task
              copy: {content: "{{ site }}\\n", dest: "{{ root }}/play"}
        """,
        local_inventory,
    )
    root = tmp_path / "root"
    assert outcome.exit_code == 0, outcome.stderr
    assert (root / "web.conf").read_text() == "default 9090 www\n"
    assert (root / "index.html").read_text() == "<p>hi</p>\n"
    assert (root / "play").read_text() == "default\n"
    assert outcome.status("web : reload") == "changed"
    assert [e["task"] for e in outcome.results()][:2] == ["web : config", "web : page"]


def role_logging(base: Path, name: str, meta: str = "") -> None:
    folder = base / "roles" / name
    (folder / "tasks").mkdir(parents=True)
    (folder / "tasks" / "main.yml").write_text(
        f'- shell: echo "{name} {{{{ label | default(1) }}}}" >> "{{{{ root }}}}/log"\n'
    )
    if meta:
        (folder / "meta").mkdir()
        (folder / "meta" / "main.yml").write_text(meta)


def test_dependencies_run_first_and_once_unless_duplicates_are_allowed(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    role_logging(tmp_path, "common")
    role_logging(tmp_path, "app", "dependencies: [common]\n")
    role_logging(tmp_path, "other", "dependencies:\n  - role: common\n")
    role_logging(tmp_path, "dup", "allow_duplicates: true\n")
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          roles:
            - app
            - other
            - dup
            - dup
            - {role: app, label: 2}
            - {role: other, when: false}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    log = (tmp_path / "root" / "log").read_text().splitlines()
    assert log == ["common 1", "app 1", "other 1", "dup 1", "dup 1", "app 2"]


def test_include_and_import_role_with_tasks_from(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "roles" / "tool"
    (folder / "tasks").mkdir(parents=True)
    (folder / "defaults").mkdir()
    (folder / "defaults" / "main.yml").write_text("version: '0.1'\n")
    (folder / "tasks" / "install.yml").write_text(
        '- copy: {content: "{{ version }}\\n", dest: "{{ root }}/version"}\n'
    )
    (folder / "tasks" / "configure.yml").write_text(
        '- copy: {content: "{{ conf }}\\n", dest: "{{ root }}/{{ conf }}"}\n'
    )
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - import_role: {name: tool, tasks_from: install}
              vars: {version: "1.0"}
            - name: each
              include_role: {name: tool, tasks_from: configure}
              loop: [one, two]
              loop_control: {loop_var: conf}
        """,
        local_inventory,
    )
    root = tmp_path / "root"
    assert outcome.exit_code == 0, outcome.stderr
    assert (root / "version").read_text() == "1.0\n"
    assert (root / "one").read_text() == "one\n" and (root / "two").exists()


def test_pre_tasks_roles_tasks_post_tasks_and_their_handler_flushes(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "roles" / "svc"
    (folder / "tasks").mkdir(parents=True)
    (folder / "handlers").mkdir()
    (folder / "tasks" / "main.yml").write_text(
        '- shell: echo role >> "{{ root }}/order"\n  notify: role handler\n'
    )
    (folder / "handlers" / "main.yml").write_text(
        '- name: role handler\n  shell: echo h-role >> "{{ root }}/order"\n'
    )
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          pre_tasks:
            - shell: echo pre >> "{{ root }}/order"
              notify: h-pre
          roles: [svc]
          tasks:
            - shell: echo task >> "{{ root }}/order"
              notify: h-task
          post_tasks:
            - shell: echo post >> "{{ root }}/order"
              notify: h-post
          handlers:
            - {name: h-pre, shell: 'echo h-pre >> "{{ root }}/order"'}
            - {name: h-task, shell: 'echo h-task >> "{{ root }}/order"'}
            - {name: h-post, shell: 'echo h-post >> "{{ root }}/order"'}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    order = (tmp_path / "root" / "order").read_text().split()
    assert order == ["pre", "h-pre", "role", "task", "h-role", "h-task", "post", "h-post"]


def test_roles_path_from_ansible_cfg_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "shared"
    (elsewhere / "far" / "tasks").mkdir(parents=True)
    (elsewhere / "far" / "tasks" / "main.yml").write_text("- debug: {msg: far}\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: all\n  roles: [far]\n")
    with pytest.raises(InputError, match="role 'far' not found"):
        load_playbook(playbook)
    (tmp_path / "ansible.cfg").write_text("[defaults]\nroles_path = shared\n")
    tasks = load_playbook(playbook)[0].all_tasks()
    assert [t.name for t in tasks] == ["far : debug"]
    (tmp_path / "ansible.cfg").unlink()
    monkeypatch.setenv("ANSIBLE_ROLES_PATH", str(elsewhere))
    assert [t.name for t in load_playbook(playbook)[0].all_tasks()] == ["far : debug"]


def test_task_keywords_a_role_entry_cannot_carry_are_refused(tmp_path: Path) -> None:
    role_logging(tmp_path, "r")
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: all\n  roles:\n    - {role: r, ignore_errors: true}\n")
    with pytest.raises(InputError, match="not supported by glmops: 'ignore_errors' on a role"):
        load_playbook(playbook)


def test_a_plays_connection_overrides_the_inventorys(run_playbook: Runner, tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    far: {address: 192.0.2.1, connect_timeout: 1, "
        f"state_dir: '{tmp_path}/state', out: '{tmp_path}/out'}}\n"
    )
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          connection: local
          tasks:
            - shell: echo here > "{{ out }}"
        """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "out").read_text() == "here\n"
    # The inventory's own `connection` for a host wins over the play's, as in Ansible.
    inventory.write_text(
        f"all:\n  hosts:\n    near: {{connection: local, state_dir: '{tmp_path}/state', "
        f"out: '{tmp_path}/out'}}\n"
    )
    again = run_playbook(
        "- hosts: all\n  gather_facts: false\n  connection: ssh\n"
        "  tasks:\n    - shell: echo local > '{{ out }}'\n",
        inventory,
    )
    assert again.exit_code == 0, again.stderr
    assert (tmp_path / "out").read_text() == "local\n"


def test_extra_vars_win_over_role_vars_and_parameters_and_role_path_is_set(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    make_role(
        tmp_path,
        "r",
        {
            "tasks/main.yml": (
                "- copy: {content: '{{ who }} {{ what }}', dest: '{{ root }}/o'}\n"
                "- copy: {src: '{{ role_path }}/vars/main.yml',"
                " dest: '{{ root }}/{{ role_name }}'}\n"
            ),
            "vars/main.yml": "who: role\nwhat: role\n",
        },
    )
    outcome = run_playbook(
        "- hosts: all\n  gather_facts: false\n  roles: [{role: r, what: param}]\n",
        local_inventory,
        extra=["who=extra"],
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "root" / "o").read_text() == "extra param"
    assert (tmp_path / "root" / "r").read_text() == "who: role\nwhat: role\n"  # role_path


def test_vars_around_a_role_win_over_its_vars_file(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    make_role(
        tmp_path,
        "r",
        {
            "tasks/main.yml": "- copy: {content: '{{ v }}', dest: '{{ root }}/{{ f }}'}\n",
            "vars/main.yml": "v: role\n",
        },
    )
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - import_role: {name: r}
              vars: {v: imported, f: a}
            - include_role: {name: r}
              vars: {v: included, f: b}
            - block:
                - import_role: {name: r}
              vars: {v: block, f: c}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    root = tmp_path / "root"
    assert [(root / f).read_text() for f in "abc"] == ["imported", "included", "block"]
    assert outcome.status("include_role : r") == "ok"
