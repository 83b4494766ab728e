"""The engine against real hosts over real SSH: idempotency, check mode, failures, host keys,
handlers, timeouts, sudo, and hostile values."""

from __future__ import annotations

import shutil
import stat
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from glmops.engine import connection
from glmops.testbed import Testbed
from tests.support.engine import Runner
from tests.support.testbed import host_read

pytestmark = pytest.mark.testbed

CONVERGE = """
- hosts: testbed
  tasks:
    - name: app folder
      file: {path: /opt/app, state: directory, mode: "0755"}
    - name: config
      copy:
        dest: /opt/app/app.conf
        content: "host={{ inventory_hostname }} port={{ app_port | default(8000) }}\\n"
        mode: "0644"
      notify: restart app
    - name: unit
      copy:
        dest: /etc/systemd/system/app.service
        content: |
          [Service]
          ExecStart=/bin/sleep infinity
          [Install]
          WantedBy=multi-user.target
      notify: restart app
    - name: app running
      systemd: {name: app, state: started, enabled: true}
    - name: a package that is there
      apt: {name: [procps, openssh-server]}
  handlers:
    - name: restart app
      systemd: {name: app, state: restarted}
"""


def test_second_run_changes_nothing(
    run_playbook: Runner,
    inventory: Path,
    testbed: Testbed,
    hosts: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """...in three commands per host, as root over SSH: who we are, the lock, the pending
    notifications and the facts in one; the checks run ahead in another; the apt task's
    package query (apt's check is not run ahead) in the last."""
    first = run_playbook(CONVERGE, inventory)
    assert first.exit_code == 0, first.results()
    for host in hosts:
        assert host_read(testbed, host, "/opt/app/app.conf") == f"host={host} port=8000\n"
        assert testbed.exec(host, ["systemctl", "is-active", "app"]).stdout.strip() == "active"
    sent: Counter[str] = Counter()
    for name in ("run", "hold"):
        sends = getattr(connection.SSHConnection, name)

        def counted(self, command, _sends=sends, **kwargs):  # type: ignore[no-untyped-def]
            sent[self.host] += 1
            return _sends(self, command, **kwargs)

        monkeypatch.setattr(connection.SSHConnection, name, counted)
    second = run_playbook(CONVERGE, inventory)
    assert second.exit_code == 0 and second.changed() == 0, second.results()
    assert sent == dict.fromkeys(hosts, 3)


def test_check_mode_changes_nothing(
    run_playbook: Runner, inventory: Path, testbed: Testbed, hosts: list[str]
) -> None:
    assert run_playbook(CONVERGE, inventory).exit_code == 0
    pid_before = testbed.exec(hosts[0], ["systemctl", "show", "-p", "MainPID", "app"]).stdout
    outcome = run_playbook(CONVERGE, inventory, check=True, diff=True, extra=["app_port=9999"])
    assert outcome.exit_code == 3
    diff = next(e["diff"] for e in outcome.results(hosts[0]) if e["task"] == "config")
    assert "+host=tb" in diff and "port=9999" in diff
    for host in hosts:
        assert host_read(testbed, host, "/opt/app/app.conf") == f"host={host} port=8000\n"
    assert (
        testbed.exec(hosts[0], ["systemctl", "show", "-p", "MainPID", "app"]).stdout == pid_before
    )


def test_unreachable_host_stops_only_itself(run_playbook: Runner, inventory: Path) -> None:
    inventory.write_text(
        inventory.read_text() + "    ghosts:\n      hosts:\n"
        "        ghost: {address: 10.231.250.2, connect_timeout: 2}\n"
    )
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      tasks:
        - {name: touch, command: "touch /tmp/reached"}
    """,
        inventory,
    )
    assert outcome.exit_code == 4
    recap = outcome.recap()
    assert recap["ghost"]["unreachable"] == 1
    assert all(recap[h]["changed"] == 1 for h in recap if h != "ghost")


def test_changed_host_key_is_refused(
    run_playbook: Runner, inventory: Path, testbed: Testbed, hosts: list[str]
) -> None:
    play = """
    - hosts: testbed
      gather_facts: false
      tasks:
        - {name: hello, command: "true"}
    """
    assert run_playbook(play, inventory).exit_code == 0  # records the keys (accept-new)
    testbed.regenerate_host_keys(hosts[1])
    outcome = run_playbook(play, inventory)
    assert outcome.exit_code == 4
    refused = outcome.results(hosts[1])[0]
    assert refused["status"] == "unreachable"
    assert "REMOTE HOST KEY CHANGED" in refused["msg"] and "ssh-keygen -f" in refused["msg"]
    assert outcome.recap()[hosts[0]]["changed"] == 1


def test_strict_refuses_unknown_keys(run_playbook: Runner, inventory: Path) -> None:
    outcome = run_playbook(
        """
    - hosts: testbed
      gather_facts: false
      tasks: [{command: "true"}]
    """,
        inventory,
        strict=True,
    )
    assert outcome.exit_code == 4
    assert "host key checking is strict" in outcome.results()[0]["msg"]


HANDLER = """
- hosts: {host}
  gather_facts: false
  tasks:
    - name: config
      copy: {{dest: /opt/handler.conf, content: "{{{{ version }}}}\\n"}}
      notify: count
    - name: later step
      command: "{{{{ 'false' if fail_later else 'true' }}}}"
      changed_when: false
  handlers:
    - name: count
      shell: echo fired >> /opt/handler.count
"""


def test_handler_once_only_on_change_and_survives_failure(
    run_playbook: Runner, inventory: Path, testbed: Testbed, hosts: list[str]
) -> None:
    host = hosts[2]
    testbed.exec(host, ["rm", "-f", "/opt/handler.conf", "/opt/handler.count"])
    play = HANDLER.format(host=host)
    failed = run_playbook(play, inventory, extra=["version=1", "fail_later=true"])
    assert failed.exit_code == 2
    assert host_read(testbed, host, "/opt/handler.count") is None  # failed host: no handlers
    replayed = run_playbook(play, inventory, extra=["version=1", "fail_later=false"])
    assert replayed.exit_code == 0
    assert replayed.status("config") == "ok"  # nothing changed this time, yet...
    assert host_read(testbed, host, "/opt/handler.count") == "fired\n"  # ...the kept one ran
    quiet = run_playbook(play, inventory, extra=["version=1", "fail_later=false"])
    assert quiet.changed() == 0
    changed = run_playbook(play, inventory, extra=["version=2", "fail_later=false"])
    assert changed.exit_code == 0
    assert host_read(testbed, host, "/opt/handler.count") == "fired\nfired\n"


LIMITED = """
- hosts: {host}
  tasks:
    - name: a unit systemd starts at most twice an hour
      copy:
        dest: /etc/systemd/system/limited.service
        content: |
          [Unit]
          StartLimitIntervalSec=3600
          StartLimitBurst=2
          [Service]
          ExecStart=/bin/sleep infinity
    - name: restarted, as a deploy asks
      systemd: {{name: limited, state: restarted}}
"""


def test_a_restart_asked_for_is_not_refused_by_the_start_limit(
    run_playbook: Runner, inventory: Path, testbed: Testbed, hosts: list[str]
) -> None:
    """StartLimitBurst= is there to stop a crash loop, but systemd counts every start: the
    third deploy within the hour would be refused ("start-limit-hit") if the module did not
    clear the count first."""
    host = hosts[1]
    pids = []
    for _ in range(4):
        outcome = run_playbook(LIMITED.format(host=host), inventory)
        assert outcome.exit_code == 0, outcome.stderr
        shown = testbed.exec(host, ["systemctl", "show", "limited", "-p", "MainPID"]).stdout
        pids.append(shown.strip())
    assert len(set(pids)) == 4 and "MainPID=0" not in pids, pids


def test_hung_command_times_out_and_others_finish(
    run_playbook: Runner, inventory: Path, hosts: list[str]
) -> None:
    started = time.monotonic()
    outcome = run_playbook(
        f"""
    - hosts: testbed
      gather_facts: false
      tasks:
        - name: hangs on one host
          shell: "{{{{ 'sleep 600' if inventory_hostname == '{hosts[0]}' else 'true' }}}}"
          timeout: 3
        - name: after
          command: "true"
    """,
        inventory,
    )
    assert time.monotonic() - started < 60
    assert outcome.exit_code == 2
    assert outcome.status("hangs on one host", hosts[0]) == "failed"
    assert "timed out" in outcome.results(hosts[0])[0]["msg"]
    for host in hosts[1:]:
        assert outcome.status("after", host) == "changed"


def test_sudo_password_on_stdin_never_logged(
    run_playbook: Runner, inventory: Path, testbed: Testbed, hosts: list[str]
) -> None:
    inventory.write_text(inventory.read_text().replace("user: root", "user: deploy"))
    play = f"""
    - hosts: {hosts[0]}
      become: true
      tasks:
        - name: root-owned file
          copy: {{dest: /etc/glmops-sudo-test, content: "via sudo\\n", mode: "0600"}}
        - name: who
          command: id -u
          register: who
          changed_when: false
          failed_when: who.stdout.strip() != "0"
    """
    outcome = run_playbook(play, inventory, sudo_password="testbed-sudo")
    assert outcome.exit_code == 0, outcome.results()
    owner = testbed.exec(hosts[0], ["stat", "-c", "%U %a", "/etc/glmops-sudo-test"]).stdout
    assert owner.strip() == "root 600"
    logs = "".join(p.read_text() for p in outcome.run_dir.rglob("*.log"))
    assert "sudo" in logs and "testbed-sudo" not in logs
    wrong = run_playbook(play, inventory, sudo_password="wrong-password")
    assert wrong.exit_code == 2


HOSTILE = "a b'\"; touch /tmp/pwned1; $(touch /tmp/pwned2) `touch /tmp/pwned3`\n x"


def test_hostile_values_never_execute(
    run_playbook: Runner, inventory: Path, testbed: Testbed, hosts: list[str]
) -> None:
    host = hosts[0]
    (inventory.parent / "host_vars").mkdir()
    (inventory.parent / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump({"evil": HOSTILE}))
    outcome = run_playbook(
        f"""
    - hosts: {host}
      gather_facts: false
      tasks:
        - name: echo it
          command: echo {{{{ evil }}}}
          register: echoed
          failed_when: echoed.stdout != evil
        - name: as a path
          file: {{path: "/tmp/hostile/{{{{ evil | replace('/', '_') }}}}", state: directory}}
        - name: as content, in a path
          copy:
            dest: "/tmp/hostile/{{{{ evil | replace('/', '_') }}}}/f"
            content: "{{{{ evil }}}}"
        - name: shell, quoted by the author
          shell: printf '%s' {{{{ evil | quote }}}} > /tmp/hostile/printed
        - name: creates
          command: {{cmd: "true", creates: "/tmp/{{{{ evil }}}}"}}
    """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.results()
    for marker in ("/tmp/pwned1", "/tmp/pwned2", "/tmp/pwned3"):
        assert testbed.exec(host, ["test", "-e", marker]).returncode != 0, marker
    assert host_read(testbed, host, "/tmp/hostile/printed") == HOSTILE
    folder = "/tmp/hostile/" + HOSTILE.replace("/", "_")
    assert host_read(testbed, host, folder + "/f") == HOSTILE


def test_jump_host(run_playbook: Runner, inventory: Path, hosts: list[str]) -> None:
    """The second host is reached through the first (ProxyJump): it sees the jump host's address
    as the SSH client, not the controller's."""
    jump_address = f"10.231.{hosts[0][2:]}.2"
    (inventory.parent / "host_vars").mkdir(exist_ok=True)
    (inventory.parent / "host_vars" / f"{hosts[1]}.yml").write_text(f"jump: root@{jump_address}\n")
    outcome = run_playbook(
        f"""
    - hosts: {hosts[1]}
      gather_facts: false
      tasks:
        - name: client
          shell: echo $SSH_CONNECTION
          register: client
          changed_when: false
          failed_when: client.stdout.split()[0] != "{jump_address}"
    """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.results()


def test_apt_installs_and_removes(
    run_playbook: Runner, inventory: Path, testbed: Testbed, hosts: list[str]
) -> None:
    """apt against Debian's real mirror: a stale (never updated) cache is refreshed first."""
    host = hosts[2]
    play = f"""
    - hosts: {host}
      gather_facts: false
      tasks:
        - apt: {{name: tree, state: "{{{{ wanted }}}}", cache_valid_time: 600}}
    """
    installed = run_playbook(play, inventory, extra=["wanted=present"])
    assert installed.exit_code == 0, installed.results()
    assert testbed.exec(host, ["tree", "--version"]).returncode == 0
    assert run_playbook(play, inventory, extra=["wanted=present"]).changed() == 0
    removed = run_playbook(play, inventory, extra=["wanted=absent"])
    assert removed.changed() == 1
    assert testbed.exec(host, ["sh", "-c", "command -v tree"]).returncode != 0


def test_a_persistent_connection_serves_the_next_run_and_only_its_user(
    run_playbook: Runner,
    inventory: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`persist`: the first run leaves one OpenSSH master per host, behind a socket only this
    user can open (0600, in a 0700 folder); the second run goes through it (the same master
    process, no new handshake); `close_shared` ends it."""
    from glmops.engine.connection import ConnectionSettings
    from glmops.engine.inventory import load_inventory
    from glmops.engine.openssh import close_shared

    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # room for socket names
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    doc = yaml.safe_load(inventory.read_text())
    doc["all"]["vars"]["persist"] = 60
    inventory.write_text(yaml.safe_dump(doc))
    first = run_playbook(CONVERGE, inventory)
    assert first.exit_code == 0, first.results()
    folder = runtime / "glmops" / "ssh"
    sockets = sorted(folder.iterdir())
    assert len(sockets) == 3 and oct(folder.stat().st_mode & 0o777) == "0o700"
    assert all(stat.S_ISSOCK(s.stat().st_mode) for s in sockets)
    assert {oct(s.stat().st_mode & 0o777) for s in sockets} == {"0o600"}

    def masters() -> list[str]:
        argv = ["ssh", "-o", f"ControlPath={folder}/%C", "-O", "check"]
        found = []
        for host in load_inventory(inventory).select("testbed"):
            spec = host.connection
            done = subprocess.run(
                [*argv, "-l", str(spec.user), spec.address], capture_output=True, text=True
            )
            found.append(done.stderr.strip())
        return found

    before = masters()
    assert all(line.startswith("Master running") for line in before), before
    second = run_playbook(CONVERGE, inventory)
    assert second.exit_code == 0 and second.changed() == 0, second.results()
    assert masters() == before  # the same master processes served the second run
    for host in load_inventory(inventory).select("testbed"):
        close_shared(host.connection, ConnectionSettings())
    assert not list(folder.iterdir())
    shutil.rmtree(runtime)


def test_task_environment_under_sudo_reaches_the_command_never_a_command_line(
    run_playbook: Runner, inventory: Path, testbed: Testbed, hosts: list[str]
) -> None:
    """Over real sshd and sudo -S: the value arrives, and no process on the host (the sshd
    session's shell, sudo, the command) carries it in /proc/*/cmdline while the task runs."""
    inventory.write_text(inventory.read_text().replace("user: root", "user: deploy"))
    token = "envtok-ssh-4e1b9d"
    play = f"""
    - hosts: {hosts[0]}
      become: true
      tasks:
        - name: look for the value in every command line
          shell: >-
            printf '%s\\n' "${{API_TOKEN%% *}}" > /root/pattern;
            cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\000' '\\n'
            | grep -cFf /root/pattern > /root/seen || true;
            printf '%s' "$API_TOKEN" > /root/arrived
          environment:
            API_TOKEN: "{token} 'q' $x"
    """
    outcome = run_playbook(play, inventory, sudo_password="testbed-sudo")
    assert outcome.exit_code == 0, outcome.results()
    assert testbed.exec(hosts[0], ["cat", "/root/arrived"]).stdout == f"{token} 'q' $x"
    assert testbed.exec(hosts[0], ["cat", "/root/seen"]).stdout.strip() == "0"
