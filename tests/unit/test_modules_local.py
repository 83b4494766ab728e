"""Each module's plan and apply, through the real executor on a local connection.

The local connection runs real shell commands on this machine (inside a temp folder), so these
are the same command lines an SSH host gets; tests/testbed repeats the key ones over real SSH.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.support.engine import Runner

FILES = """
- hosts: all
  gather_facts: false
  tasks:
    - name: folder
      file: {path: "{{ root }}/etc", state: directory, mode: "0750"}
    - name: config
      copy: {dest: "{{ root }}/etc/app.conf", content: "port={{ port | default(8000) }}\\n",
             mode: "0640"}
      notify: reload
    - name: rendered
      template: {src: "{{ root }}/app.j2", dest: "{{ root }}/etc/app.env"}
  handlers:
    - name: reload
      shell: echo reloaded >> "{{ root }}/reloads"
"""


def test_files_converge_and_second_run_changes_nothing(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "app.j2").write_text("HOST={{ inventory_hostname }}\n")
    first = run_playbook(FILES, local_inventory)
    assert first.exit_code == 0, first.stderr
    assert (root / "etc" / "app.conf").read_text() == "port=8000\n"
    assert stat.S_IMODE(os.stat(root / "etc" / "app.conf").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(root / "etc").st_mode) == 0o750
    assert (root / "etc" / "app.env").read_text() == "HOST=here\n"
    assert (root / "reloads").read_text() == "reloaded\n"
    second = run_playbook(FILES, local_inventory)
    assert second.exit_code == 0 and second.changed() == 0, second.results()
    assert (root / "reloads").read_text() == "reloaded\n", "handler ran without a change"


def test_check_and_diff_change_nothing(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "app.j2").write_text("HOST={{ inventory_hostname }}\n")
    assert run_playbook(FILES, local_inventory).exit_code == 0
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    outcome = run_playbook(FILES, local_inventory, check=True, diff=True, extra=["port=9000"])
    assert outcome.exit_code == 3
    assert outcome.status("config") == "changed"
    diff = next(e["diff"] for e in outcome.results() if e["task"] == "config")
    assert "-port=8000" in diff and "+port=9000" in diff
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def _backups(target: Path) -> list[Path]:
    """Backups of `target` in the test inventory's state dir (tmp_path/state)."""
    state = target.parent.parent / "state"
    return sorted(state.glob(f"backups{target}.*"))


def test_copy_backs_up_only_when_asked_and_keeps_the_newest_five(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    target = tmp_path / "root" / "old.txt"
    target.write_text("original\n")
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - copy: {{dest: "{target}", content: "{{{{ text }}}}\\n", backup: "{{{{ keep }}}}"}}
    """
    assert run_playbook(play, local_inventory, extra=["text=new", "keep=false"]).exit_code == 0
    assert target.read_text() == "new\n" and _backups(target) == []
    for round_ in range(7):
        extra = [f"text=v{round_}", "keep=true"]
        assert run_playbook(play, local_inventory, extra=extra).exit_code == 0
    kept = [b.read_text() for b in _backups(target)]
    assert kept == ["v1\n", "v2\n", "v3\n", "v4\n", "v5\n"], kept


def test_unquoted_octal_modes_mean_what_they_say(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - file: {{path: "{root}/private", state: directory, mode: 0700}}
        - copy: {{dest: "{root}/conf", content: "x\\n", mode: 0644}}
        - copy: {{dest: "{root}/quoted", content: "x\\n", mode: "640"}}
    """
    assert run_playbook(play, local_inventory).exit_code == 0
    assert stat.S_IMODE(os.stat(root / "private").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root / "conf").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(root / "quoted").st_mode) == 0o640
    assert run_playbook(play, local_inventory).changed() == 0


def test_a_mode_that_is_not_a_mode_fails_when_the_playbook_loads(tmp_path: Path) -> None:
    import pytest

    from glmops.engine.playbook import load_playbook
    from glmops.errors import InputError

    path = tmp_path / "bad.yml"
    path.write_text("- hosts: all\n  tasks:\n    - file: {path: /x, mode: u+rwq}\n")
    with pytest.raises(InputError, match="bad.yml:3.*neither an octal mode"):
        load_playbook(path)


def test_replacing_a_file_keeps_its_mode_and_owner_and_new_files_follow_the_umask(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    import pwd

    root = tmp_path / "root"
    kept = root / "kept"
    kept.write_text("old\n")
    os.chmod(kept, 0o604)
    nobody = pwd.getpwnam("nobody")
    os.chown(kept, nobody.pw_uid, nobody.pw_gid)
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - copy: {{dest: "{kept}", content: "new\\n"}}
        - copy: {{dest: "{root}/fresh", content: "new\\n"}}
    """
    previous = os.umask(0o027)
    try:
        assert run_playbook(play, local_inventory).exit_code == 0
    finally:
        os.umask(previous)
    info = os.stat(kept)
    assert kept.read_text() == "new\n"
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o604, nobody.pw_uid)
    assert stat.S_IMODE(os.stat(root / "fresh").st_mode) == 0o640


def test_concurrent_writes_of_one_file_never_collide_on_the_temp_name(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from glmops.engine.connection import LocalConnection
    from glmops.engine.context import RemoteInfo, TaskContext
    from glmops.engine.inventory import load_inventory
    from glmops.engine.runlog import Masker, RunLog

    host = load_inventory(local_inventory).hosts["here"]
    masker = Masker()
    log = RunLog(tmp_path / "runs", masker)
    dest = str(tmp_path / "root" / "shared")

    def write(index: int) -> None:
        ctx = TaskContext(
            host, LocalConnection("here"), RemoteInfo(0, str(tmp_path), None), log, masker
        )
        ctx.write_file(dest, b"%d\n" % index, mode=None, owner=None, group=None, backup=False)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(40)))  # raises if any write failed
    assert sorted(os.listdir(tmp_path / "root")) == ["shared"]


def test_command_creates_register_when_and_until(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    counter = tmp_path / "root" / "count"
    outcome = run_playbook(
        f"""
    - hosts: all
      gather_facts: false
      tasks:
        - name: once
          command: {{cmd: "touch {counter}", creates: "{counter}"}}
        - name: again
          command: {{cmd: "touch {counter}", creates: "{counter}"}}
        - name: flaky
          shell: echo x >> {counter}; test $(wc -l < {counter}) -ge 3
          retries: 5
          delay: 0
          register: flaky
        - name: echo
          shell: echo "lines=$(wc -l < {counter})"
          register: lines
        - name: only when
          command: "true"
          when: lines.stdout.strip() == "lines=3"
        - name: never
          command: "true"
          when: "lines.rc != 0"
        - name: poll
          shell: echo $(( $(wc -l < {counter}) ))
          register: poll
          until: poll.stdout | int >= 3
          retries: 2
          delay: 0
    """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.results()
    assert outcome.status("once") == "changed"
    assert outcome.status("again") == "ok"
    assert outcome.status("flaky") == "changed"
    assert outcome.status("only when") == "changed"
    assert outcome.status("never") == "skipped"


def test_failure_stops_the_host_and_ignore_errors_does_not(
    run_playbook: Runner, local_inventory: Path
) -> None:
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      tasks:
        - name: tolerated
          command: "false"
          ignore_errors: true
        - name: broken
          command: "false"
        - name: after
          command: "true"
    """,
        local_inventory,
    )
    assert outcome.exit_code == 2
    assert outcome.recap()["here"]["ignored"] == 1 and outcome.recap()["here"]["failed"] == 1
    assert [e["task"] for e in outcome.results()] == ["tolerated", "broken"]


def test_timeout_fails_the_task(run_playbook: Runner, local_inventory: Path) -> None:
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      tasks:
        - name: hangs
          command: sleep 30
          timeout: 1
    """,
        local_inventory,
    )
    assert outcome.exit_code == 2
    assert outcome.results()[0]["msg"] == "timed out: task timed out after 1 s"


def test_tags_and_skip_tags(run_playbook: Runner, local_inventory: Path) -> None:
    text = """
    - hosts: all
      gather_facts: false
      tasks:
        - {name: a, command: "true", tags: [one]}
        - {name: b, command: "true", tags: [two]}
        - {name: c, command: "true", tags: [always]}
    """
    ran = [e["task"] for e in run_playbook(text, local_inventory, tags={"one"}).results()]
    assert ran == ["a", "c"]
    ran = [e["task"] for e in run_playbook(text, local_inventory, skip_tags={"one"}).results()]
    assert ran == ["b", "c"]


def test_undefined_variable_names_playbook_task_and_host(
    run_playbook: Runner, local_inventory: Path
) -> None:
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      tasks:
        - name: uses a typo
          command: echo {{ vlm_port }}
    """,
        local_inventory,
    )
    assert outcome.exit_code == 2
    msg = outcome.results()[0]["msg"]
    assert "playbook.yml:5 task 'uses a typo' on host 'here'" in msg and "vlm_port" in msg


def test_secrets_are_masked_in_events_and_logs(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      vars: {api_token: s3cr3t-value}
      tasks:
        - name: leak attempt
          shell: echo token={{ api_token }}; exit 1
    """,
        local_inventory,
        extra=["api_token=s3cr3t-value"],
    )
    assert "s3cr3t-value" not in str(outcome.events)
    logs = "".join(p.read_text() for p in outcome.run_dir.glob("*.log"))
    assert "token=" in logs and "s3cr3t-value" not in logs


def test_helper_runs_from_stdin_and_leaves_nothing(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        outcome = run_playbook(
            f"""
        - hosts: all
          gather_facts: false
          tasks:
            - name: open
              wait_for: {{port: {port}, timeout: 5}}
            - name: closed
              wait_for: {{port: 1, timeout: 1, sleep: 0.2}}
        """,
            local_inventory,
        )
    finally:
        server.close()
    assert outcome.status("open") == "ok"
    assert outcome.status("closed") == "failed"
    assert "not ready" in outcome.results()[-1]["msg"]


def test_heartbeat_names_the_busy_host(
    run_playbook: Runner, local_inventory: Path, monkeypatch
) -> None:
    import glmops.engine.executor

    monkeypatch.setattr(glmops.engine.executor, "HEARTBEAT_SECONDS", 0.3)
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      tasks:
        - name: slow step
          command: sleep 1
    """,
        local_inventory,
    )
    assert outcome.exit_code == 0
    assert "still running: here 'slow step'" in outcome.stderr


def test_play_defaults_yield_to_the_inventory(run_playbook: Runner, tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yml"
    inventory.write_text(
        f"all:\n  vars: {{state_dir: '{tmp_path}/state'}}\n"
        "  hosts:\n    here: {connection: local, from_inventory: inv}\n"
    )
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      defaults: {from_inventory: default, only_default: default}
      vars: {from_play: play}
      tasks:
        - name: show
          command: echo {{ from_inventory }} {{ only_default }} {{ from_play }}
          register: shown
          failed_when: shown.stdout.strip() != "inv default play"
    """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.results()


def test_flush_handlers_runs_them_where_it_stands(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    log = tmp_path / "root" / "order"
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - name: change
          copy: {{dest: "{tmp_path}/root/conf", content: "{{{{ v }}}}"}}
          notify: record
        - meta: flush_handlers
        - name: after
          shell: echo after >> {log}
          changed_when: false
      handlers:
        - name: record
          shell: echo handler >> {log}
    """
    assert run_playbook(play, local_inventory, extra=["v=1"]).exit_code == 0
    assert log.read_text() == "handler\nafter\n"
    assert run_playbook(play, local_inventory, extra=["v=1"]).exit_code == 0
    assert log.read_text() == "handler\nafter\nafter\n"


CHECKED = """
- hosts: all
  gather_facts: false
  tasks:
    - name: probe
      command: uname -s
      register: probe
      changed_when: "'Linux' not in probe.stdout"
    - name: uses probe
      command: echo {{ probe.stdout | default('none') }}
      when: probe.rc is none or probe.rc == 0
      register: echoed
    - name: marker
      shell: touch {{ root }}/ran
    - name: forced
      shell: touch {{ root }}/forced
      check_mode: false
      changed_when: false
"""


def test_check_mode_skips_commands_and_registers_the_same_keys(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    real = run_playbook(CHECKED, local_inventory)
    assert real.exit_code == 0, real.results()
    (tmp_path / "root" / "ran").unlink()
    checked = run_playbook(CHECKED, local_inventory, check=True)
    assert checked.exit_code == 0, checked.results()
    assert checked.status("probe") == "skipped"
    assert checked.status("uses probe") == "skipped"
    assert checked.status("marker") == "skipped"
    assert checked.status("forced") == "ok"
    assert (tmp_path / "root" / "forced").exists(), "check_mode: false did not run"
    assert not (tmp_path / "root" / "ran").exists(), "check mode ran a command"


def test_check_mode_keeps_registered_keys_for_later_conditions(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - name: would run
          command: {{cmd: "echo u", creates: "{tmp_path}/root/nothing"}}
          register: r
          changed_when: "'u' in r.stdout"
        - name: reads it
          command: {{cmd: "true", creates: "{tmp_path}/root"}}
          failed_when: r.stdout_lines | length > 0 or r.rc is not none
    """
    outcome = run_playbook(play, local_inventory, check=True)
    assert outcome.exit_code == 0, outcome.results()
    assert outcome.status("would run") == "ok"
    assert outcome.status("reads it") == "ok"


def test_another_playbook_never_drops_pending_notifications(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    log = tmp_path / "root" / "handled"
    first = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - copy: {{dest: "{tmp_path}/root/app.conf", content: "{{{{ v }}}}"}}
          notify: restart app
        - command: "{{{{ 'false' if fail else 'true' }}}}"
          changed_when: false
      handlers:
        - name: restart app
          shell: echo app >> {log}
    """
    other = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - copy: {{dest: "{tmp_path}/root/other.conf", content: "{{{{ v }}}}"}}
          notify: restart other
      handlers:
        - name: restart other
          shell: echo other >> {log}
    """
    failed = run_playbook(first, local_inventory, extra=["v=1", "fail=true"], name="app.yml")
    assert failed.exit_code == 2 and not log.exists()
    assert run_playbook(other, local_inventory, extra=["v=1"], name="other.yml").exit_code == 0
    assert log.read_text() == "other\n"
    again = run_playbook(first, local_inventory, extra=["v=1", "fail=false"], name="app.yml")
    assert again.exit_code == 0
    assert log.read_text() == "other\napp\n", "the notification of app.yml was dropped"


def test_a_task_ended_midway_keeps_its_notification(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - name: changes, then hangs
          shell: {{cmd: "touch {root}/changed && sleep {{{{ hang }}}}", creates: "{root}/changed"}}
          timeout: 1
          notify: restart
      handlers:
        - name: restart
          shell: echo restarted >> {root}/restarts
    """
    timed_out = run_playbook(play, local_inventory, extra=["hang=30"])
    assert timed_out.exit_code == 2 and (root / "changed").exists()
    again = run_playbook(play, local_inventory, extra=["hang=0"])
    assert again.exit_code == 0 and again.status("changes, then hangs") == "ok"
    assert (root / "restarts").read_text() == "restarted\n", "the notification was lost"
