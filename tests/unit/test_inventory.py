"""Inventory loading: layout, precedence, connection keys, and errors that name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmops.engine.inventory import load_inventory, parse_extra_vars
from glmops.errors import InputError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def inventory_file(tmp_path: Path) -> Path:
    write(tmp_path / "group_vars" / "gpu.yml", "level: gpu-file\nfrom_gpu_file: 1\n")
    write(tmp_path / "host_vars" / "h1.yml", "level: host-file\n")
    return write(
        tmp_path / "hosts.yml",
        """\
all:
  vars: {level: all, port: 2222, user: ops}
  hosts:
    lone: {address: 10.0.0.9}
  children:
    gpu:
      vars: {level: gpu}
      children:
        sm120:
          vars: {level: sm120}
          hosts:
            h1: {address: 10.0.0.1, become: true}
            h2: {address: 10.0.0.2, level: host}
    cpu:
      hosts:
        c1: {connection: local}
""",
    )


def test_groups_nested_and_precedence(inventory_file: Path) -> None:
    inv = load_inventory(inventory_file)
    assert set(inv.hosts) == {"lone", "h1", "h2", "c1"}
    assert inv.hosts["h1"].groups == ["gpu", "sm120"]
    # all < gpu (inline) < gpu (group_vars file) < sm120 < host inline < host_vars file
    assert inv.hosts["h1"].vars["level"] == "host-file"
    assert inv.hosts["h2"].vars["level"] == "host"
    assert inv.hosts["h2"].vars["from_gpu_file"] == 1
    assert inv.hosts["lone"].vars["level"] == "all"


def test_extra_vars_win(inventory_file: Path) -> None:
    inv = load_inventory(inventory_file, parse_extra_vars(["level=cli", "port=2200"]))
    assert inv.hosts["h1"].vars["level"] == "cli"
    assert inv.hosts["h1"].connection.port == 2200


def test_connection_spec(inventory_file: Path) -> None:
    inv = load_inventory(inventory_file)
    h1 = inv.hosts["h1"].connection
    assert (h1.address, h1.user, h1.port, h1.become) == ("10.0.0.1", "ops", 2222, True)
    assert inv.hosts["c1"].connection.connection == "local"
    assert inv.hosts["c1"].connection.address == "c1"


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu", {"h1", "h2"}),
        ("sm120,lone", {"h1", "h2", "lone"}),
        ("h*", {"h1", "h2"}),
        ("all:!gpu", {"lone", "c1"}),
        ("c1", {"c1"}),
    ],
)
def test_select(inventory_file: Path, pattern: str, expected: set[str]) -> None:
    assert {h.name for h in load_inventory(inventory_file).select(pattern)} == expected


def test_limit_matching_nothing_names_the_file(inventory_file: Path) -> None:
    with pytest.raises(InputError, match=r"hosts\.yml: 'nope\*' matches no host"):
        load_inventory(inventory_file).select("nope*")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("all:\n  hostz: {}\n", 2, "unknown key 'hostz' in group 'all'"),
        ("all:\n  hosts:\n    a: {port: twenty}\n", 3, "'port' must be int"),
        ("all:\n  hosts:\n    a: {become: 'yes'}\n", 3, "'become' must be bool"),
        ("all:\n  hosts:\n    a: {connection: docker}\n", 3, "must be one of ssh, local"),
        ("all:\n  hosts:\n    a: {adress: 1.2.3.4}\n", 3, "did you mean 'address'"),
        ("all:\n  hosts:\n    a: {}\n    a: {}\n", 4, "duplicate key 'a'"),
        ("all:\n  hosts:\n    a: [1]\n", 3, "must be a mapping"),
        ("all:\n  hosts: !unsafe\n    a:\n", 2, "'hosts' of group 'all' must be a mapping"),
        ("all:\n  children: !unsafe\n    g:\n", 2, "'children' of group 'all' must be"),
        ("all:\n  hosts: {a: {}\n", None, "invalid YAML"),
        (
            "all:\n  children:\n    g1: {hosts: {a: {port: 1}}}\n    g2: {hosts: {a: {port: 2}}}\n",
            4,
            "duplicate host 'a'",
        ),
    ],
)
def test_errors_name_file_and_line(
    tmp_path: Path, text: str, line: int | None, message: str
) -> None:
    path = write(tmp_path / "inv.yml", text)
    with pytest.raises(InputError) as raised:
        load_inventory(path)
    assert message in str(raised.value)
    assert str(path) in str(raised.value)
    if line is not None:
        assert raised.value.line == line


def test_same_host_in_two_groups_is_one_host(tmp_path: Path) -> None:
    path = write(
        tmp_path / "inv.yml",
        """\
all:
  children:
    a: {hosts: {h: {address: 1.1.1.1}}}
    b: {hosts: {h: null}, vars: {x: 1}}
""",
    )
    inv = load_inventory(path)
    assert list(inv.hosts) == ["h"]
    assert inv.hosts["h"].groups == ["a", "b"] and inv.hosts["h"].vars["x"] == 1


def test_extra_vars_parse() -> None:
    assert parse_extra_vars(["a=1", "b=x y", "c=true", "d="]) == {
        "a": 1,
        "b": "x y",
        "c": True,
        "d": "",
    }
    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_extra_vars(["novalue"])
