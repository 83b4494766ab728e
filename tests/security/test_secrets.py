"""Secrets stay secret: task environments never reach argv, masking covers the forms a secret
takes and every variable holding it, run folders and logs are private, and nothing runs as
root from a temp name another user could have placed first."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from glmops.engine.runlog import Masker, RunLog
from glmops.hosthelpers import gguf_split
from glmops.modules.nvidia_driver import keyring_commands
from tests.support.engine import Runner

TOKEN = "envtok-7f3a9c2e51"  # noqa: S105 - a made-up secret


@contextmanager
def cmdline_sampler(needle: str) -> Iterator[list[str]]:
    """Every process command line on this machine that holds `needle`, sampled until the
    block ends (any user can read /proc/*/cmdline)."""
    seen: list[str] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        text = Path(entry.path, "cmdline").read_bytes().decode(errors="replace")
                    except OSError:
                        continue
                    if needle in text:
                        seen.append(text.replace("\0", " "))
            time.sleep(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()


def test_task_environment_reaches_the_process_but_never_argv(
    run_playbook: Runner, local_inventory: Path, hostile
) -> None:
    value = f"{TOKEN} 'quoted' \"double\" $(id) \\\nsecond line"
    play = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - name: env
          shell: sleep 1; printf '%s' "$API_TOKEN" > "{{{{ root }}}}/env.out"; cat
          environment:
            API_TOKEN: {json.dumps(value)}
            PLAIN: plain
    """
    with cmdline_sampler(TOKEN) as seen:
        outcome = run_playbook(play, local_inventory)
    assert outcome.exit_code == 0, outcome.stderr
    arrived = (local_inventory.parent / "root" / "env.out").read_text() == value
    hostile.check(
        "task environment value on argv",
        not seen and arrived,
        f"argv held it: {seen[:1]}; arrived in the process: {arrived}",
    )


def written(secret: object, *texts: str) -> str:
    """What the run log holds after writing `texts` with `secret` known to the masker."""
    folder = Path(os.environ.get("TMPDIR", "/tmp"))  # noqa: S108 - read back, then removed
    masker = Masker()
    masker.add_secret_vars({"db_password": secret, "user": "root"})
    log = RunLog(folder / f"glmops-mask-{os.getpid()}-{time.monotonic_ns()}", masker)
    for text in texts:
        log.write("h", text)
    content = (log.path / "h.log").read_text()
    subprocess.run(["rm", "-rf", str(log.path.parent)], check=True)
    return content


def test_masking_covers_derived_forms(hostile) -> None:
    secret = 'it\'s a "pass\\word" ü-9c1e'
    forms = {
        "shell-quoted": shlex.quote(secret),
        "json-encoded": json.dumps(secret),
        "json-unicode": json.dumps(secret, ensure_ascii=False),
        "repr": repr(secret),
    }
    for name, form in forms.items():
        content = written(secret, f"$ echo {form}")
        hostile.check(f"masking, {name} secret", form not in content, f"log holds {form}")
    content = written(48151623, "pin=48151623")
    hostile.check("masking, integer secret", "48151623" not in content, f"log: {content!r}")


def test_a_secret_held_by_a_plain_named_variable_is_masked(
    run_playbook: Runner, local_inventory: Path, hostile
) -> None:
    play = """
    - hosts: all
      gather_facts: false
      vars:
        api_token: sEcReT-held-twice-4411
        header_value: sEcReT-held-twice-4411
        pin_password: 90817263
      tasks:
        - name: leak
          shell: "echo {{ header_value }} {{ api_token | quote }} {{ pin_password }}; exit 1"
    """
    outcome = run_playbook(play, local_inventory)
    logs = "".join(p.read_text() for p in outcome.run_dir.glob("*.log"))
    shown = json.dumps(outcome.events) + outcome.stderr + logs
    hostile.check(
        "masking, secret held by a plain-named variable",
        "sEcReT-held-twice" not in shown and "90817263" not in shown,
        "the run log or output shows the secret",
    )


def test_run_folders_and_logs_are_private(tmp_path: Path, hostile) -> None:
    old = os.umask(0o022)
    try:
        log = RunLog(tmp_path / "runs", Masker())
        log.write("h", "text")
        folder = log.host_dir("h")
    finally:
        os.umask(old)
    modes = {
        "run folder": stat.S_IMODE(log.path.stat().st_mode),
        "host folder": stat.S_IMODE(folder.stat().st_mode),
        "log": stat.S_IMODE((log.path / "h.log").stat().st_mode),
    }
    hostile.check(
        "run log modes under umask 022",
        modes == {"run folder": 0o700, "host folder": 0o700, "log": 0o600},
        f"modes { ({k: oct(v) for k, v in modes.items()}) }",
    )


@contextmanager
def served(body: bytes) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/file"
    finally:
        server.shutdown()
        server.server_close()


def test_the_cuda_keyring_is_fetched_into_a_private_folder(tmp_path: Path, hostile) -> None:
    """The install command, run for real with a dpkg that records what it was given."""
    bin_dir, tmp = tmp_path / "bin", tmp_path / "tmp"
    bin_dir.mkdir()
    tmp.mkdir()
    record = tmp_path / "dpkg.json"
    (bin_dir / "dpkg").write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        "deb = sys.argv[-1]; st = os.stat(os.path.dirname(deb))\n"
        f"json.dump({{'deb': deb, 'mode': st.st_mode & 0o777, 'body': open(deb).read()}}, "
        f"open({str(record)!r}, 'w'))\n"
    )
    (bin_dir / "dpkg").chmod(0o755)
    with served(b"keyring package") as url:
        command = keyring_commands(url)[0]
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp)}
        done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)
    got = json.loads(record.read_text()) if record.exists() else {}
    deb = got.get("deb", "")
    hostile.check(
        "cuda keyring at a fixed /tmp name",
        done.returncode == 0
        and got.get("body") == "keyring package"
        and deb.startswith(f"{tmp}/")
        and got.get("mode") == 0o700
        and not Path(deb).parent.exists(),
        f"rc {done.returncode} {done.stderr[-200:]!r}; dpkg got {got}",
    )


def test_get_url_never_writes_through_a_planted_temp_name(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path, hostile
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("victim's content")
    folder = tmp_path / "dl"
    folder.mkdir()
    (folder / ".keyring.deb.glmops-download").symlink_to(victim)  # the old fixed temp name
    body = b"downloaded bytes"
    with served(body) as url:
        play = f"""
        - hosts: all
          gather_facts: false
          tasks:
            - get_url:
                url: {url}
                dest: {folder}/keyring.deb
                checksum: sha256:{hashlib.sha256(body).hexdigest()}
        """
        outcome = run_playbook(play, local_inventory)
    hostile.check(
        "get_url through a planted temp link",
        outcome.exit_code == 0
        and victim.read_text() == "victim's content"
        and (folder / "keyring.deb").read_bytes() == body,
        f"exit {outcome.exit_code}; victim now {victim.read_text()!r}",
    )


def test_gguf_split_records_never_write_through_a_planted_temp_name(
    tmp_path: Path, hostile
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("victim's content")
    record = tmp_path / "model.gguf.glmops.json"
    Path(f"{record}.tmp").symlink_to(victim)  # the old fixed temp name
    gguf_split.write_atomic(str(record), '{"ok": true}\n')
    hostile.check(
        "gguf_split sidecar through a planted temp link",
        victim.read_text() == "victim's content" and json.loads(record.read_text()) == {"ok": True},
        f"victim now {victim.read_text()!r}",
    )
