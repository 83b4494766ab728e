"""The modules and task keys a real playbook needs beside the GPU modules, through the real
executor on a local connection: each converges, and a second run changes nothing."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.engine import Runner


def test_loop_debug_assert_set_fact_and_fail(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - name: folders
          file: {{path: "{root}/{{{{ name }}}}", state: directory}}
          loop: [a, b, c]
          loop_var: name
          register: made
        - name: count
          set_fact: {{made_count: "{{{{ made.results | length }}}}", word: hello}}
        - name: show
          debug: {{msg: "{{{{ word }}}} {{{{ made_count }}}}"}}
        - name: check
          assert:
            that: ["made_count | int == 3", "made.results[0].name == 'a'"]
        - name: stop
          fail: {{msg: "stopped on purpose"}}
          when: stop | default(false)
    """
    first = run_playbook(play, local_inventory)
    assert first.exit_code == 0, first.results()
    assert sorted(p.name for p in root.iterdir()) == ["a", "b", "c"]
    assert first.status("folders") == "changed"
    assert next(e["msg"] for e in first.results() if e["task"] == "show") == "hello 3"
    second = run_playbook(play, local_inventory)
    assert second.changed() == 0 and second.status("folders") == "ok"
    stopped = run_playbook(play, local_inventory, extra=["stop=true"])
    assert stopped.exit_code == 2 and stopped.results()[-1]["msg"] == "stopped on purpose"
    failing = run_playbook(
        play.replace("made_count | int == 3", "made_count | int == 4"), local_inventory
    )
    assert failing.status("check") == "failed"
    assert "assertion failed: made_count | int == 4" in failing.results()[-1]["msg"]


def test_file_link_and_touch(run_playbook: Runner, local_inventory: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "target").write_text("t")
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - file: {{path: "{root}/link", state: link, src: "{root}/target"}}
        - file: {{path: "{root}/empty", state: touch, mode: "0600"}}
    """
    assert run_playbook(play, local_inventory).exit_code == 0
    assert os.readlink(root / "link") == f"{root}/target"
    assert (root / "empty").read_text() == "" and (root / "empty").stat().st_mode & 0o777 == 0o600
    assert run_playbook(play, local_inventory).changed() == 0
    os.remove(root / "link")
    os.symlink("/elsewhere", root / "link")
    assert run_playbook(play, local_inventory).changed() == 1
    assert os.readlink(root / "link") == f"{root}/target"


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ('{path: "ROOT/missing", mode: "0644"}', "ROOT/missing does not exist"),
        ('{path: "ROOT/missing", state: file}', "ROOT/missing does not exist"),
        ('{path: "ROOT/plain", state: directory}', "ROOT/plain is a file"),
        ('{path: "ROOT/dir", state: file}', "ROOT/dir is a directory"),
    ],
)
def test_file_fails_in_check_mode_exactly_where_the_run_fails(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path, task: str, message: str
) -> None:
    """As in Ansible: without `state`, a missing path is an error (never a new directory), and
    `--check` predicts the real run's failure instead of a change."""
    root = tmp_path / "root"
    (root / "plain").write_text("x")
    (root / "dir").mkdir()
    play = "- hosts: all\n  gather_facts: false\n  tasks:\n    - file: " + task + "\n"
    play = play.replace("ROOT", str(root))
    before = sorted(p.name for p in root.iterdir())
    for check in (True, False):
        outcome = run_playbook(play, local_inventory, check=check)
        assert outcome.exit_code == 2, (check, outcome.results())
        assert message.replace("ROOT", str(root)) in outcome.results()[0]["msg"]
    assert sorted(p.name for p in root.iterdir()) == before


def test_file_without_state_keeps_what_the_path_is(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "plain").write_text("x")
    (root / "dir").mkdir()
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - file: {{path: "{root}/plain", mode: "0640"}}
        - file: {{path: "{root}/dir", mode: "0750"}}
    """
    assert run_playbook(play, local_inventory, check=True).exit_code == 3
    outcome = run_playbook(play, local_inventory)
    assert outcome.exit_code == 0, outcome.results()
    assert (root / "plain").stat().st_mode & 0o777 == 0o640
    assert (root / "dir").stat().st_mode & 0o777 == 0o750
    assert run_playbook(play, local_inventory).changed() == 0


def test_lineinfile_and_blockinfile(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    conf = tmp_path / "root" / "app.conf"
    conf.write_text("# app\nport=8000\nmode=slow\n")
    conf.chmod(0o640)
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - lineinfile: {{path: "{conf}", regexp: "^port=", line: "port=9000"}}
        - lineinfile: {{path: "{conf}", line: "debug=1", insertafter: "^# app"}}
        - lineinfile: {{path: "{conf}", regexp: "^mode=", state: absent}}
        - blockinfile: {{path: "{conf}", block: "a=1\\nb=2"}}
    """
    assert run_playbook(play, local_inventory).exit_code == 0
    assert conf.read_text() == (
        "# app\ndebug=1\nport=9000\n"
        "# BEGIN GLMOPS MANAGED BLOCK\na=1\nb=2\n# END GLMOPS MANAGED BLOCK\n"
    )
    assert conf.stat().st_mode & 0o777 == 0o640
    assert run_playbook(play, local_inventory).changed() == 0
    changed = play.replace("a=1\\nb=2", "a=1")
    assert run_playbook(changed, local_inventory).changed() == 1
    assert conf.read_text().count("GLMOPS MANAGED BLOCK") == 2 and "b=2" not in conf.read_text()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    folder = tmp_path / "www"
    folder.mkdir()
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(folder))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()


def test_get_url_checks_the_checksum_and_unarchive_converges(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path, served: tuple[str, Path]
) -> None:
    url, www = served
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in (("pkg/one.txt", b"1\n"), ("pkg/two.txt", b"2\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text))
    (www / "pkg.tgz").write_bytes(buffer.getvalue())
    sha = hashlib.sha256(buffer.getvalue()).hexdigest()
    root = tmp_path / "root"
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - get_url:
            url: "{url}/pkg.tgz"
            dest: "{root}/pkg.tgz"
            checksum: "sha256:{{{{ sha }}}}"
        - unarchive: {{src: "{root}/pkg.tgz", dest: "{root}", remote_src: true}}
    """
    assert run_playbook(play, local_inventory, extra=[f"sha={sha}"]).exit_code == 0
    assert (root / "pkg" / "two.txt").read_text() == "2\n"
    assert run_playbook(play, local_inventory, extra=[f"sha={sha}"]).changed() == 0
    (root / "pkg.tgz").unlink()
    wrong = run_playbook(play, local_inventory, extra=["sha=" + "f" * 64])
    assert wrong.exit_code == 2 and "is not the wanted" in wrong.results()[0]["msg"]
    assert not (root / "pkg.tgz").exists()


def test_apt_version_pin_is_idempotent(run_playbook: Runner, local_inventory: Path) -> None:
    import subprocess

    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "bash"], capture_output=True, text=True
    ).stdout
    if not version:
        pytest.skip("no dpkg here")
    play = """
    - hosts: all
      gather_facts: false
      tasks:
        - apt: {name: "bash={{ v }}"}
    """
    pinned = run_playbook(play, local_inventory, check=True, extra=[f"v={version}"])
    assert pinned.exit_code == 0 and pinned.results()[0]["status"] == "ok", pinned.results()
    glob = run_playbook(play, local_inventory, check=True, extra=[f"v={version[:3]}*"])
    assert glob.exit_code == 0
    other = run_playbook(play, local_inventory, check=True, extra=["v=0.0-none"])
    assert other.exit_code == 3 and "would install bash=0.0-none" in other.results()[0]["msg"]


def test_vars_files_environment_no_log_and_become_user(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    (tmp_path / "vars.yml").write_text("from_file: filed\n")
    out = tmp_path / "root" / "out"
    outcome = run_playbook(
        f"""
    - hosts: all
      gather_facts: false
      vars_files: [vars.yml]
      environment: {{GREETING: "{{{{ from_file }}}}"}}
      tasks:
        - name: env
          shell: echo "$GREETING $EXTRA" > {out}
          environment: {{EXTRA: "x y"}}
        - name: hidden
          shell: echo the-hidden-output; exit 3
          no_log: true
          ignore_errors: true
        - name: as nobody
          command: id -un
          become: true
          become_user: nobody
          register: who
          failed_when: who.stdout.strip() != "nobody"
    """,
        local_inventory,
    )
    assert out.read_text() == "filed x y\n"
    hidden = next(e for e in outcome.results() if e["task"] == "hidden")
    assert hidden["status"] == "failed" and "the-hidden-output" not in str(outcome.events)
    logs = "".join(p.read_text() for p in outcome.run_dir.glob("*.log"))
    assert "the-hidden-output" not in logs
    assert outcome.status("as nobody") == "changed", outcome.results()[-1]["msg"]


def test_messages_keep_the_case_of_paths(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        f"""
    - hosts: all
      gather_facts: false
      tasks:
        - file: {{path: "{tmp_path}/root/MixedCase Dir", state: directory}}
    """,
        local_inventory,
    )
    assert f"Create directory {tmp_path}/root/MixedCase Dir" == outcome.results()[0]["msg"]
