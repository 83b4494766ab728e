"""serial, max_fail_percentage, any_errors_fatal, run_once and delegate_to over real SSH, on three
testbed hosts: the order is read from markers the hosts wrote, and the delegate's files from the
delegate itself (nsenter, not through glmops)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.testbed import Testbed
from tests.conftest import Runner
from tests.testbed.conftest import booted, host_read

pytestmark = pytest.mark.testbed

FIRST_INDEX = 201
HOSTS = [f"tb{FIRST_INDEX + i}" for i in range(3)]
A, B, ROUTER = HOSTS


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with booted(tmp_path_factory.mktemp("fleet-engine-testbed"), FIRST_INDEX, 3) as testbed:
        yield testbed


@pytest.fixture
def inventory(bed: Testbed, tmp_path: Path) -> Path:
    """The testbed's inventory, each host with a `colour` of its own."""
    path = tmp_path / "hosts.yml"
    shutil.copy(bed.inventory_path, path)
    text = path.read_text()
    for host in HOSTS:
        text = text.replace(f"{host}: {{", f"{host}: {{colour: {host}-colour, ", 1)
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def clean(bed: Testbed) -> None:
    for host in HOSTS:
        bed.exec(host, ["sh", "-c", "rm -rf /tmp/fleet; mkdir -p /tmp/fleet"])


def marks(bed: Testbed, host: str, name: str) -> list[int]:
    text = host_read(bed, host, f"/tmp/fleet/{name}")
    return [int(word) for word in text.split()] if text else []


ROLL = """
- hosts: {hosts}
  gather_facts: false
  serial: {{serial}}
  max_fail_percentage: {{limit}}
  tasks:
    - name: start
      shell: date +%s%N >> /tmp/fleet/start
    - name: work
      shell: "sleep 0.2; test {{{{ inventory_hostname }}}} != {{{{ fail_on | default('none') }}}}"
    - name: end
      shell: date +%s%N >> /tmp/fleet/end
"""


def roll(serial: object, limit: object) -> str:
    return ROLL.format(hosts=",".join(HOSTS), serial=serial, limit=limit)


def test_serial_one_rolls_host_by_host(run_playbook: Runner, inventory: Path, bed: Testbed) -> None:
    outcome = run_playbook(roll(1, 0), inventory)
    assert outcome.exit_code == 0, outcome.stderr
    spans = [(marks(bed, h, "start"), marks(bed, h, "end")) for h in HOSTS]
    assert all(len(start) == len(end) == 1 for start, end in spans), spans
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end[0] < start[0], "a batch started before the one before it ended"
    recap = next(e for e in outcome.events if e["event"] == "recap")
    assert recap["plays"][0]["batches"] == [[h] for h in HOSTS]


def test_max_fail_percentage_stops_the_roll(
    run_playbook: Runner, inventory: Path, bed: Testbed
) -> None:
    outcome = run_playbook(roll(1, 0), inventory, extra=[f"fail_on={B}"])
    assert outcome.exit_code == 2
    assert marks(bed, A, "end") and marks(bed, B, "start") and not marks(bed, B, "end")
    assert not marks(bed, ROUTER, "start"), "the roll went on past the failed batch"
    play = next(e for e in outcome.events if e["event"] == "recap")["plays"][0]
    assert (play["stopped_by_batch"], play["not_reached"]) == (2, [ROUTER])
    assert "max_fail_percentage 0" in play["stopped"]


def test_any_errors_fatal_stops_every_host(
    run_playbook: Runner, inventory: Path, bed: Testbed
) -> None:
    outcome = run_playbook(
        roll("null", "null").replace("  tasks:", "  any_errors_fatal: true\n  tasks:"),
        inventory,
        extra=[f"fail_on={B}"],
    )
    assert outcome.exit_code == 2
    assert all(marks(bed, h, "start") and not marks(bed, h, "end") for h in HOSTS)
    play = next(e for e in outcome.events if e["event"] == "recap")["plays"][0]
    assert f"any_errors_fatal: 'work' failed on {B}" in play["stopped"]


DELEGATE = f"""
- hosts: {A},{B}
  gather_facts: false
  tasks:
    - name: tell the router
      copy: {{dest: "/tmp/fleet/from-{{{{ inventory_hostname }}}}", content: "{{{{ colour }}}}\\n"}}
      delegate_to: {ROUTER}
    - name: update the load balancer once
      shell: echo {{{{ colour }}}} {{{{ suffix | default('') }}}} >> /tmp/fleet/once
      delegate_to: {ROUTER}
      run_once: true
      register: once
    - name: what the load balancer said
      copy: {{dest: /tmp/fleet/said, content: "{{{{ once.rc }}}}\\n"}}
"""


def test_delegate_to_and_run_once_act_on_the_router_with_the_hosts_variables(
    run_playbook: Runner, inventory: Path, bed: Testbed
) -> None:
    outcome = run_playbook(DELEGATE, inventory)
    assert outcome.exit_code == 0, outcome.stderr
    assert host_read(bed, ROUTER, f"/tmp/fleet/from-{A}") == f"{A}-colour\n"
    assert host_read(bed, ROUTER, f"/tmp/fleet/from-{B}") == f"{B}-colour\n"
    assert host_read(bed, ROUTER, "/tmp/fleet/once") == f"{A}-colour\n", "not once, or not A's"
    for host in (A, B):
        assert host_read(bed, host, "/tmp/fleet/once") is None
        assert host_read(bed, host, "/tmp/fleet/said") == "0\n", "run_once did not register"
    told = [e for e in outcome.results() if e["task"] == "tell the router"]
    assert {(e["host"], e["delegate"]) for e in told} == {(A, ROUTER), (B, ROUTER)}
    assert bed.exec(ROUTER, ["test", "-e", f"/var/lib/glmops/run-{ROUTER}.lock"]).returncode == 0
    assert set(outcome.recap()) == {A, B}

    before = {name: host_read(bed, ROUTER, f"/tmp/fleet/{name}") for name in ("once", "from-" + A)}
    check = run_playbook(DELEGATE, inventory, check=True, extra=["suffix=again", "colour=new"])
    assert check.exit_code == 3, check.stderr
    assert check.status("tell the router", A) == "changed"
    after = {name: host_read(bed, ROUTER, f"/tmp/fleet/{name}") for name in before}
    assert after == before, "check mode changed the delegate"
