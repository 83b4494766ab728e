"""Ansible's task dialect turned into glmops' own at load: `k=v` arguments parsed as Ansible
parses them, `with_*` loops, `loop_control`, `ansible.builtin.` names.

Only meaning-preserving rewrites live here; what glmops cannot do the same way is refused by
glmops/engine/ansible_support.py.
"""

from __future__ import annotations

import re
from typing import Any

from glmops.engine.filters import dict2items, flatten

#: `ansible.builtin.copy` and `ansible.legacy.copy` are glmops' `copy`.
BUILTIN_PREFIXES = ("ansible.builtin.", "ansible.legacy.")

#: The `k=v` words Ansible takes out of a free-form command line (the rest is the command).
COMMAND_KV_KEYS = ("creates", "removes", "chdir", "executable", "stdin")

#: `with_<name>` loops glmops runs, and how their value becomes the item list.
WITH_LOOPS = ("items", "list", "dict", "fileglob", "indexed_items")

_KV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def module_name(key: str) -> str:
    for prefix in BUILTIN_PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def split_args(text: str) -> list[str]:
    """Split on whitespace outside quotes and `{{ }}`/`{% %}`, keeping the quotes (Ansible's
    split_args): `content="a b" dest={{ x }}` is two words."""
    words: list[str] = []
    word, quote, depth, i = "", "", 0, 0
    while i < len(text):
        char, pair = text[i], text[i : i + 2]
        if not quote and pair in ("{{", "{%"):
            depth, word, i = depth + 1, word + pair, i + 2
            continue
        if not quote and depth and pair in ("}}", "%}"):
            depth, word, i = depth - 1, word + pair, i + 2
            continue
        if char in "'\"" and not depth and (not quote or char == quote) and text[i - 1 : i] != "\\":
            quote = "" if quote else char
        if char.isspace() and not quote and not depth:
            if word:
                words.append(word)
            word = ""
        else:
            word += char
        i += 1
    if quote:
        raise ValueError(f"unbalanced quote in arguments: {text}")
    if word:
        words.append(word)
    return words


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def parse_kv(text: str, module: str, free_form: str | None) -> dict[str, Any] | str:
    """A task's string arguments as Ansible reads them.

    command/shell: the `creates=`/`chdir=`/... words become arguments, the rest the command.
    Other modules: every word is `key=value`; a module with a free-form argument (debug's msg)
    keeps a string that is not all `key=value` words as that argument.
    """
    words = split_args(text)
    if module in ("command", "shell"):
        params: dict[str, Any] = {}
        rest = []
        for word in words:
            match = _KV.match(word)
            if match and match.group(1) in COMMAND_KV_KEYS:
                params[match.group(1)] = _unquote(match.group(2))
            else:
                rest.append(word)
        if not params:
            return text
        return {**params, "cmd": " ".join(rest)}
    pairs = [_KV.match(word) for word in words]
    if all(pairs) and pairs:
        return {m.group(1): _unquote(m.group(2)) for m in pairs if m}
    if free_form:
        return text
    bad = next(word for word, match in zip(words, pairs, strict=True) if not match)
    raise ValueError(f"arguments of '{module}' must be key=value words (not {bad!r})")


def expand_with(kind: str, value: Any, variables: dict[str, Any]) -> list[Any]:
    """The item list of a rendered `with_<kind>:` value, as Ansible's lookup builds it."""
    if kind == "items":
        return flatten(value if isinstance(value, list) else [value], levels=1, skip_nulls=False)
    if kind == "list":
        return list(value) if isinstance(value, list) else [value]
    if kind == "indexed_items":
        items = flatten(value if isinstance(value, list) else [value], levels=1)
        return [[index, item] for index, item in enumerate(items)]
    if kind == "dict":
        if not isinstance(value, dict):
            raise ValueError(f"with_dict expects a mapping, got {type(value).__name__}")
        return dict2items(value)
    if kind == "fileglob":
        from glmops.engine.filters import fileglob

        terms = value if isinstance(value, list) else [value]
        return fileglob(str(variables.get("playbook_dir") or "."), [str(t) for t in terms])
    raise ValueError(f"with_{kind} is not supported by glmops")


def ansible_facts(facts: dict[str, Any] | None) -> dict[str, Any]:
    """Ansible's names for the facts glmops gathers (`ansible_facts` and `ansible_<name>`);
    facts glmops does not gather stay undefined, never guessed."""
    if not facts:
        return {}
    kernel, os_info = facts.get("kernel") or {}, facts.get("os") or {}
    memory = facts.get("memory") or {}
    named = {
        "hostname": str(facts.get("hostname") or "").split(".")[0] or None,
        "nodename": facts.get("hostname"),
        "kernel": kernel.get("release"),
        "architecture": kernel.get("machine"),
        "machine": kernel.get("machine"),
        "processor_vcpus": facts.get("cpu_count"),
        "distribution_version": os_info.get("version_id"),
        "distribution_release": os_info.get("codename"),
        "memtotal_mb": (memory.get("total_bytes") or 0) // (1 << 20) or None,
        "python_version": (facts.get("python") or {}).get("version"),
    }
    found = {key: value for key, value in named.items() if value is not None}
    return {"ansible_facts": found, **{f"ansible_{key}": value for key, value in found.items()}}
