"""Every value in a unit file is checked and escaped by systemd's rules: the real templates are
rendered with hostile values, and the result is read back as systemd reads it (lines ending at
LF or CR, backslash continuation, sections, specifiers, ExecStart's quoting) and, where
systemd-analyze exists, verified by it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest

from glmops import paths
from glmops.engine.templating import make_environment
from glmops.gpu.serving import ServeError, serve_flags
from glmops.unitfile import UnitValueError
from tests.support.serving_inputs import BASE, facts

INJECTED = "ExecStartPre=/bin/touch /tmp/glmops-pwned"


def render(template: str, **variables: Any) -> str:
    env = make_environment(jinja2.FileSystemLoader(str(paths.templates())))
    return env.get_template(template).render(**variables)


def unit_lines(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) as systemd reads a unit: a line ends at LF, CR or CRLF, a
    trailing backslash joins the next line, `#`/`;` lines are comments."""
    section, out, pending = "", [], ""
    for raw in re.split(r"\r\n|\r|\n", text):
        line = pending + raw
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("["):
            section = stripped
            continue
        key, _, value = stripped.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def exec_words(value: str) -> list[str]:
    """ExecStart='s words as systemd splits them (double quotes with C escapes, `%%`, `$$`)."""
    words, word, i, quoted, started = [], "", 0, False, False
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            word += {"n": "\n", "t": "\t"}.get(value[i + 1], value[i + 1])
            i += 2
            started = True
            continue
        if c == '"':
            quoted, started = not quoted, True
        elif c == " " and not quoted:
            if started:
                words.append(word)
            word, started = "", False
        else:
            word, started = word + c, True
        i += 1
    if started:
        words.append(word)
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def setting(lines: list[tuple[str, str, str]], key: str) -> list[str]:
    return [v for _, k, v in lines if k == key]


def serve_unit(variables: dict[str, Any]) -> tuple[str, Any]:
    config = serve_flags(facts(8, "12.0"), {**BASE, **variables})
    data = config.as_data()
    return render("systemd/vllm-glm5.service.j2", serve=data), config


CONTROL = {"newline": "\n", "carriage-return": "\r", "escape": "\x1b", "nul": "\x00"}


@pytest.mark.parametrize("field", ["vllm_user", "vllm_home", "vllm_served_model_name"])
@pytest.mark.parametrize("char", list(CONTROL))
def test_a_control_character_in_a_unit_value_is_refused(hostile, field: str, char: str) -> None:
    value = f"vllm{CONTROL[char]}[Service]{CONTROL[char]}{INJECTED}"
    try:
        text, _ = serve_unit({field: value})
        refused = False
    except ServeError:
        refused, text = True, ""
    hostile.check(
        f"vLLM unit, {char} in {field}",
        refused and INJECTED not in text,
        "rendered a unit holding the injected line",
    )


@pytest.mark.parametrize("field", ["vllm_user", "vllm_home"])
def test_a_trailing_backslash_is_refused(hostile, field: str) -> None:
    try:
        serve_unit({field: "/var/lib/vllm\\"})
        refused = False
    except ServeError:
        refused = True
    hostile.check(f"vLLM unit, trailing backslash in {field}", refused, "it joins the next line")


def test_every_argv_word_reads_back_as_given(hostile) -> None:
    extra = ["--x=a b", "$(id)", "${HOME}", "%h%n", '"', "\\", "'single'", "--y=\\\\x"]
    text, config = serve_unit({"vllm_extra_args": extra, "vllm_served_model_name": "m%i $x"})
    lines = unit_lines(text)
    read = exec_words(setting(lines, "ExecStart")[0])
    description = setting(lines, "Description")[0].replace("%%", "%")
    hostile.check(
        "vLLM unit, argv words with quotes, $, %, backslashes",
        read == config.argv and len(setting(lines, "ExecStart")) == 1,
        f"systemd would run {read}, glmops meant {config.argv}",
    )
    hostile.check(
        "vLLM unit, specifier in the model name",
        description.startswith("vLLM serving m%i $x "),
        f"Description reads {description!r}",
    )


def test_the_template_itself_refuses_what_it_cannot_escape(hostile) -> None:
    """Defence in depth: a value that reaches the template unchecked (a reason comment, the
    unit name) is refused by the filter, not written."""
    _, config = serve_unit({})
    for key, value in (("reasons", {"--x": f"why\n{INJECTED}"}), ("unit_name", f"u\r{INJECTED}")):
        try:
            text = render("systemd/vllm-glm5.service.j2", serve={**config.as_data(), key: value})
        except UnitValueError:
            text = ""
        hostile.check(f"vLLM unit template, newline in {key}", INJECTED not in text, text[:200])


def env_file_values(text: str) -> dict[str, str]:
    """KEY="value" lines as EnvironmentFile= reads them (C escapes in double quotes)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        assert value.startswith('"') and value.endswith('"'), line
        out[key] = re.sub(r"\\(.)", r"\1", value[1:-1])
    return out


def test_environment_values_read_back_and_cannot_add_variables(hostile) -> None:
    odd = 'a "b" \\c $d %e `f`'
    _, config = serve_unit({"vllm_env": {"ODD": odd}})
    text = render("systemd/vllm-glm5.env.j2", serve=config.as_data(), vllm_api_key="k-123")
    values = env_file_values(text)
    hostile.check(
        "vLLM environment file, quotes and backslashes",
        values["ODD"] == odd and values["VLLM_API_KEY"] == "k-123",
        f"read back {values.get('ODD')!r}",
    )
    try:
        serve_unit({"vllm_env": {"ODD": "x\nLD_PRELOAD=/tmp/evil.so"}})
        refused = False
    except ServeError:
        refused = True
    hostile.check("vLLM environment file, newline in a value", refused, "a variable was added")
    try:
        text = render(
            "systemd/vllm-glm5.env.j2", serve=config.as_data(), vllm_api_key="k\nLD_PRELOAD=/x"
        )
    except UnitValueError:
        text = ""
    hostile.check("vLLM environment file, newline in the API key", "LD_PRELOAD" not in text, text)


ROUTER = ["/opt/vllm-router/bin/vllm-router", "--host", "10.0.0.1", "--port", "30000"]


@pytest.mark.parametrize("char", list(CONTROL))
def test_the_router_unit_refuses_a_control_character(hostile, char: str) -> None:
    argv = [*ROUTER, "--policy", f"round_robin{CONTROL[char]}{INJECTED}"]
    try:
        text = render("systemd/vllm-router.service.j2", fleet_router_argv=argv)
    except UnitValueError:
        text = ""
    hostile.check(f"router unit, {char} in the policy", INJECTED not in text, text[-300:])


def test_the_router_unit_is_quoted_for_systemd_not_a_shell(hostile) -> None:
    argv = [*ROUTER, "--policy", "it's $HOME %h", "--worker-urls", "http://a:8000/?x=1&y=$z"]
    lines = unit_lines(render("systemd/vllm-router.service.j2", fleet_router_argv=argv))
    read = exec_words(setting(lines, "ExecStart")[0])
    hostile.check("router unit, quote, $ and % in words", read == argv, f"systemd reads {read}")


GATE = ["/opt/vllm-router/bin/python", "/opt/vllm-router/glmops_router_gate.py", "--listen"]


@pytest.mark.parametrize("char", list(CONTROL))
def test_the_router_gate_unit_and_key_file_refuse_a_control_character(hostile, char: str) -> None:
    texts = []
    for template, variables in (
        (
            "systemd/vllm-router-gate.service.j2",
            {
                "fleet_router_gate_argv": [*GATE, f"10.0.0.1{CONTROL[char]}{INJECTED}"],
                "fleet_router_gate_env": "/etc/glmops/vllm-router-gate.env",
            },
        ),
        (
            "systemd/vllm-router-gate.env.j2",
            {"fleet_router_admin_secret": f"k{CONTROL[char]}LD_PRELOAD=/x"},
        ),
    ):
        try:
            texts.append(render(template, **variables))
        except UnitValueError:
            texts.append("")
    hostile.check(
        f"router gate unit and key file, {char} in a value",
        INJECTED not in texts[0] and "LD_PRELOAD" not in texts[1],
        str(texts),
    )


def test_the_router_gate_key_file_reads_back_as_the_key(hostile) -> None:
    """What systemd's EnvironmentFile= reads (a double-quoted value, backslash escapes)."""
    key = 'a"b\\c$d %e'
    text = render("systemd/vllm-router-gate.env.j2", fleet_router_admin_secret=key)
    line = next(line for line in text.splitlines() if line.startswith("GLMOPS_ROUTER_ADMIN_KEY="))
    value = line.split("=", 1)[1]
    read = re.sub(r"\\(.)", r"\1", value[1:-1]) if value.startswith('"') else value
    hostile.check("router gate key file, quotes and escapes", read == key, f"{value!r}")


RAY = {
    "role": "head",
    "replica": "r1",
    "head": "10.0.0.1:6379",
    "user": "root",
    "argv": ["/opt/v/bin/ray", "start", "--head", "--block"],
    "stop_argv": ["/opt/v/bin/ray", "stop"],
}


def test_a_host_reported_interface_name_cannot_add_unit_lines(hostile) -> None:
    """The gang's interface and address come from the host (`ip route get`): host data."""
    hostile_env = {"NCCL_SOCKET_IFNAME": f"eth0\n{INJECTED}", "VLLM_HOST_IP": "10.0.0.1"}
    try:
        text = render("systemd/ray.service.j2", ray={**RAY, "env": hostile_env})
    except UnitValueError:
        text = ""
    hostile.check("ray unit, newline in an interface name", INJECTED not in text, text[-300:])
    odd = {"GLOO_SOCKET_IFNAME": 'e "0" $x %i \\y'}
    lines = unit_lines(render("systemd/ray.service.j2", ray={**RAY, "env": odd}))
    read = [exec_words(v) for v in setting(lines, "Environment")]
    hostile.check(
        "ray unit, quotes, $, % in an environment value",
        read == [[f"GLOO_SOCKET_IFNAME={odd['GLOO_SOCKET_IFNAME']}"]],
        f"systemd reads {read}",
    )


def test_systemd_analyze_accepts_the_escaped_units(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed: the units were read back by the rules above")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text("#!/bin/sh\n")
    (venv / "bin" / "vllm").chmod(0o755)
    extra = ["--x=a b", "$(id)", "%h", '"', "\\"]
    text, _ = serve_unit(
        {"vllm_venv": str(venv), "vllm_user": "root", "vllm_extra_args": extra, "vllm_home": "/"}
    )
    unit = tmp_path / "glmops-hostile-vllm.service"
    unit.write_text(text)
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True
    )
    problems = [line for line in checked.stderr.splitlines() if unit.name in line]
    assert not problems, checked.stderr


def test_systemd_analyze_accepts_the_router_gate_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed: the unit was read back by the rules above")
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    env = tmp_path / "gate.env"
    env.write_text(render("systemd/vllm-router-gate.env.j2", fleet_router_admin_secret="k" * 43))
    argv = [str(python), "/opt/x/glmops_router_gate.py", "--listen", "fe80::1%eth0", "--port", "1"]
    unit = tmp_path / "glmops-router-gate.service"
    unit.write_text(
        render(
            "systemd/vllm-router-gate.service.j2",
            fleet_router_gate_argv=argv,
            fleet_router_gate_env=str(env),
        )
    )
    read = exec_words(setting(unit_lines(unit.read_text()), "ExecStart")[0])
    assert [w.replace("%%", "%") for w in read] == argv
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True
    )
    problems = [line for line in checked.stderr.splitlines() if unit.name in line]
    assert not problems, checked.stderr
