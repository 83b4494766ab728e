"""Untrusted values: data that is never rendered as a template (Ansible's "unsafe" values).

What a host, a helper or the Hub says (registered results, facts, helper replies, Hub file
names), what `set_fact` stored, and a YAML value tagged `!unsafe` is wrapped in these types
where it enters the run. The renderer (glmops.engine.templating) hands such a value through as
it is, however many `{{` it holds, and a rendering that read one gives an untrusted result.
The types are subclasses of str, dict and list, so everything else uses them unchanged.
"""

from __future__ import annotations

from typing import Any

import yaml


class UnsafeText(str):
    """A string that is data, never a template."""

    __slots__ = ()


class UnsafeDict(dict):
    """A mapping from an untrusted source; its keys and values are untrusted too."""


class UnsafeList(list):
    """A sequence from an untrusted source; its items are untrusted too."""


UNSAFE_TYPES = (UnsafeText, UnsafeDict, UnsafeList)


def mark_unsafe(value: Any) -> Any:
    """`value` with every string in it (keys included) untrusted, containers copied as the
    untrusted containers; numbers, booleans and None are data already."""
    if isinstance(value, UNSAFE_TYPES) and not isinstance(value, (dict, list)):
        return value
    if isinstance(value, str):
        return UnsafeText(value)
    if isinstance(value, dict):
        return UnsafeDict((mark_unsafe(k), mark_unsafe(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return UnsafeList(mark_unsafe(item) for item in value)
    return value


def is_unsafe(value: Any) -> bool:
    """Whether `value` came from an untrusted source (a marked string or container)."""
    return isinstance(value, UNSAFE_TYPES)


# Written out (state files, the `to_yaml` filter) as the plain string, mapping and list they are.
for _dumper in (yaml.SafeDumper, yaml.Dumper):
    _dumper.add_representer(UnsafeText, yaml.SafeDumper.represent_str)
    _dumper.add_representer(UnsafeDict, yaml.SafeDumper.represent_dict)
    _dumper.add_representer(UnsafeList, yaml.SafeDumper.represent_list)
