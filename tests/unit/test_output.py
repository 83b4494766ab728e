"""What a person and a script read: full tables when piped, start lines and heartbeats, -vv
details, one versioned JSON event schema, and masking by value."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops.cli.main import main
from glmops.engine.output import SCHEMA, Reporter, console
from glmops.engine.results import HostTally
from glmops.engine.runlog import Masker
from tests.support.engine import Runner

LONG_HOST = "gpu-node-rack12-slot07-very-long-hostname-for-the-datacenter.example.internal"


def test_piped_tables_are_never_cut() -> None:
    out = io.StringIO()
    reporter = Reporter(Masker(), stdout=out, stderr=io.StringIO())
    reporter.recap({LONG_HOST: HostTally(ok=3)}, "runs/x", 0)
    assert LONG_HOST in out.getvalue()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  vars: {{state_dir: '{tmp_path}/state'}}\n"
        "  hosts:\n    here: {connection: local}\n"
    )
    return tmp_path


def test_minus_vv_shows_command_stdout_and_stderr(workdir: Path) -> None:
    (workdir / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - shell: echo to-stdout; echo to-stderr >&2\n"
    )
    result = CliRunner().invoke(main, ["run", "play.yml", "-i", "hosts.yml", "-vv"])
    assert result.exit_code == 0, result.output
    for text in ("$ echo to-stdout; echo to-stderr >&2", "rc=0", "to-stdout", "to-stderr"):
        assert text in result.stderr, result.stderr


def test_json_events_share_one_versioned_schema(workdir: Path) -> None:
    (workdir / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: say\n      command: echo hi\n"
    )
    result = CliRunner().invoke(main, ["run", "play.yml", "-i", "hosts.yml", "--json"])
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events and all(e["schema"] == SCHEMA for e in events)
    start = next(e for e in events if e["event"] == "task_start")
    done = next(e for e in events if e["event"] == "task")
    assert start["source"] == done["source"] == "play.yml:4"
    assert done["rc"] == 0 and done["duration"] >= 0
    facts = CliRunner().invoke(main, ["facts", "here", "-i", "hosts.yml", "--json"])
    lines = [json.loads(line) for line in facts.stdout.splitlines()]
    assert [(e["schema"], e["event"], e["host"]) for e in lines] == [(SCHEMA, "facts", "here")]


def test_first_heartbeat_comes_after_one_interval(
    run_playbook: Runner, local_inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import glmops.engine.executor

    monkeypatch.setattr(glmops.engine.executor, "HEARTBEAT_SECONDS", 0.8)
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      tasks:
        - name: slow step
          command: sleep 1.4
    """,
        local_inventory,
    )
    assert outcome.exit_code == 0
    assert outcome.stderr.count("still running: here 'slow step'") == 1, outcome.stderr
    assert "start here slow step" in " ".join(outcome.stderr.split())


def test_masking_goes_by_secret_names_and_values_not_words_inside_names(
    run_playbook: Runner, local_inventory: Path
) -> None:
    outcome = run_playbook(
        """
    - hosts: all
      gather_facts: false
      vars:
        db_password: hunter2-long-secret
        tokenizer_name: glmtokenizer
        root_password: root
        user: root
      tasks:
        - name: show
          shell: echo "{{ db_password }} {{ tokenizer_name }} user={{ user }}"; exit 1
    """,
        local_inventory,
    )
    msg = outcome.results()[0]["msg"]
    assert "hunter2-long-secret" not in msg and "********" in msg
    # a secret is masked whichever variable holds it, also where a plain name shows it
    assert "glmtokenizer" in msg and "user=********" in msg, msg


def test_a_secret_cut_short_by_a_long_repr_is_masked_on_both_sides_of_the_cut() -> None:
    # pytest's own truncation of long reprs, as a failed host check's traceback shows them
    from _pytest._io.saferepr import saferepr

    from glmops.engine.runlog import CUT_SECRET

    secret = "hf_CutShort0123456789abcdef"
    masker = Masker()
    masker.add_secret_vars({"hf_token": secret, "vllm_env": f"HF_TOKEN={secret} " + "x" * 300})
    host_vars = {"vllm_env": f"HF_TOKEN={secret} " + "x" * 300}
    prefix = "{'vllm_env': 'HF_TOKEN="
    heads = set()
    for maxsize in range(2 * len(prefix) + 3, 2 * (len(prefix) + len(secret)) + 2):
        shown = saferepr(host_vars, maxsize=maxsize)
        kept = shown.split("...")[0].removeprefix(prefix)  # the head of the secret pytest kept
        assert secret.startswith(kept), shown
        heads.add(len(kept))
        masked = masker.mask(shown)
        if len(kept) >= CUT_SECRET:
            assert kept not in masked and "HF_TOKEN=********..." in masked, masked
        else:
            assert masked == shown
    assert heads == set(range(len(secret))), "every cut inside the secret was tried"
    tails = set()
    for maxsize in range(9, 2 * len(secret) + 6):  # a tail of the secret right after "..."
        shown = saferepr({"x": "y" * 300 + secret}, maxsize=maxsize)
        kept = shown.split("...")[1].removesuffix("'}")
        if not secret.endswith(kept):
            continue  # the cut fell before the secret: the whole of it is shown, and masked
        tails.add(len(kept))
        masked = masker.mask(shown)
        if len(kept) >= CUT_SECRET:
            assert kept not in masked and masked.endswith("...********'}"), masked
        else:
            assert masked == shown
    assert set(range(1, len(secret))) <= tails, "every tail length was tried"
    for dots in ("...", "....", "......"):  # a head that ends in "." leaves a longer run
        assert masker.mask(f"'{secret[:9]}{dots}{secret[-9:]}'") == f"'********{dots}********'"
    assert masker.mask("a plain ... line.... end") == "a plain ... line.... end"


def test_old_run_directories_are_pruned(tmp_path: Path) -> None:
    from glmops.engine.runlog import RUNS_KEPT, RunLog

    root = tmp_path / "runs"
    for i in range(RUNS_KEPT + 5):
        (root / f"20250101-{i:06d}-abcdef").mkdir(parents=True)
    (root / "not-a-run").mkdir()
    log = RunLog(root, Masker())
    runs = sorted(p.name for p in root.iterdir())
    assert len(runs) == RUNS_KEPT + 1 and "not-a-run" in runs and log.path.name in runs
    assert "20250101-000005-abcdef" not in runs and "20250101-000006-abcdef" in runs


def test_glmops_run_shows_batches_and_why_a_roll_stopped(workdir: Path) -> None:
    hosts = "".join(
        f"    {n}: {{connection: local, state_dir: '{workdir}/state-{n}'}}\n" for n in "abc"
    )
    (workdir / "fleet.yml").write_text(
        f"all:\n  hosts:\n{hosts}    lb: {{connection: local, state_dir: '{workdir}/state-lb'}}\n"
    )
    (workdir / "roll.yml").write_text(
        "- hosts: a,b,c\n  gather_facts: false\n  serial: 1\n  max_fail_percentage: 0\n"
        "  tasks:\n    - name: roll\n      command: \"{{ 'false' if inventory_hostname == 'b'"
        " else 'true' }}\"\n"
        "    - {name: tell, debug: {msg: hi}, delegate_to: lb}\n"
    )
    result = CliRunner().invoke(main, ["run", "roll.yml", "-i", "fleet.yml"])
    assert result.exit_code == 2, result.output
    out = result.stdout
    for text in (
        "batch 1/3: a\n",
        "batch 2/3: b\n",
        "batch 3/3: c (not run)",
        "stopped by batch 2/3: 1 of 1 host(s) failed (100%), more than max_fail_percentage 0",
        "never reached: c",
    ):
        assert text in out, out
    assert "BATCH 2/3 b" in result.stderr and "a -> lb tell" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "line",
    [
        "[dim]       start tb1 directory[/]",
        "[bold]PLAY all[/] [dim](8 host(s))[/]",
        "x \\[not markup] :smile: a",
        "[green]ok[/] tb1 — a message with :thumbs_up:",
        "  [dim]because[/] a \\\\[x] b",
        "[dim]a\tb[/]\tc",
        "cr\rx",
    ],
)
def test_a_line_to_a_log_is_written_as_rich_writes_it(line: str) -> None:
    """The console's short way for text to a file without colour writes what rich would."""
    from rich.console import Console

    ours, rich = io.StringIO(), io.StringIO()
    console(ours).print(line)
    Console(file=rich, highlight=False, soft_wrap=True, width=100_000).print(line)
    assert ours.getvalue() == rich.getvalue()
    ours, rich = io.StringIO(), io.StringIO()
    console(ours).print(line, markup=False)
    Console(file=rich, highlight=False, soft_wrap=True, width=100_000).print(line, markup=False)
    assert ours.getvalue() == rich.getvalue()
