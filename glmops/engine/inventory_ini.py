"""Ansible's other inventory forms, read into the YAML layout's shape (with file and line, so
errors point at the INI line): an INI file, and a comma list (`-i web1,web2,`).

    [web]
    web1 ansible_host=10.0.0.1 port=8000
    [web:vars]
    ntp=pool.ntp.org
    [all:children]
    web

Values on a host line are Python literals where they parse as one (`port=8000` is a number),
else strings; values in a `[group:vars]` section are strings: both as Ansible reads them.
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any

from glmops.engine.yamlsrc import SourceMap
from glmops.errors import InputError

_SECTION = re.compile(r"^\[([^\]:]+)(?::(vars|children))?\]\s*$")


def _map(source: str, line: int) -> SourceMap:
    mapping = SourceMap()
    mapping.source, mapping.line, mapping.key_lines = source, line, {}
    return mapping


def _put(mapping: SourceMap, key: Any, value: Any, line: int) -> None:
    mapping[key] = value
    mapping.key_lines[key] = line


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def looks_like_ini(text: str) -> bool:
    """Whether an inventory file is INI: a `[section]` line or a bare host line first."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "---")):
            continue
        return bool(_SECTION.match(line)) or (":" not in line.split("=")[0])
    return False


def parse_ini(text: str, source: str) -> SourceMap:
    root = _map(source, 1)
    groups: dict[str, SourceMap] = {}

    def group(name: str, line: int) -> SourceMap:
        if name not in groups:
            groups[name] = _map(source, line)
            if name != "all":
                _put(root, name, groups[name], line)
        return groups[name]

    _put(root, "all", group("all", 1), 1)
    current, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if section := _SECTION.match(line):
            current, kind = section.group(1).strip(), section.group(2) or "hosts"
            group(current, number)
            continue
        body = group(current, number)
        try:
            words = shlex.split(line, comments=True)
        except ValueError as error:
            raise InputError(f"INI inventory: {error}", source=source, line=number) from None
        if kind == "children":
            children = body.setdefault("children", _map(source, number))
            _put(children, words[0], group(words[0], number), number)
            root.pop(words[0], None)  # a child is reached through its parent, not from the top
            continue
        pairs = [word.partition("=") for word in words[1 if kind == "hosts" else 0 :]]
        if bad := next((k for k, sep, _ in pairs if not sep), None):
            raise InputError(
                f"INI inventory: expected key=value, got {bad!r}", source=source, line=number
            )
        if kind == "vars":
            variables = body.setdefault("vars", _map(source, number))
            for key, _, value in pairs:
                _put(variables, key, value, number)
            continue
        if re.search(r"\[[^\]]*:[^\]]*\]", words[0]):
            raise InputError(
                f"not supported by glmops: host ranges like {words[0]!r} in an INI inventory",
                source=source,
                line=number,
            )
        hosts = body.setdefault("hosts", _map(source, number))
        host_vars = _map(source, number)
        for key, _, value in pairs:
            _put(host_vars, key, _literal(value), number)
        _put(hosts, words[0], host_vars or None, number)
    if "ungrouped" in groups and not groups["ungrouped"]:
        del root["ungrouped"]
    return root


def parse_host_list(spec: str) -> SourceMap:
    """`-i web1,web2,`: those hosts, in `all`."""
    root, hosts = _map(spec, 1), _map(spec, 1)
    for name in (part.strip() for part in spec.split(",")):
        if name:
            _put(hosts, name, None, 1)
    all_group = _map(spec, 1)
    _put(all_group, "hosts", hosts, 1)
    _put(root, "all", all_group, 1)
    return root
