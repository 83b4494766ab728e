"""YAML loading that remembers where each value came from, so errors can name file and line.

Aliases are bounded: a document whose aliases would expand to more than MAX_ALIASED_NODES
values (a "billion laughs" bomb of a few hundred bytes) is refused when it loads, naming the
file and line, before anything walks the expanded tree. `!unsafe` marks a value as data that
is never rendered as a template (as in Ansible).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from glmops.engine.unsafe import mark_unsafe
from glmops.errors import InputError, TemplateError

#: How many values aliases may add to one document: far above any real inventory or
#: playbook, far below what makes walking the values slow.
MAX_ALIASED_NODES = 100_000


class SourceMap(dict):
    """A mapping from YAML that knows its file and the line of itself and of each key."""

    source: str
    line: int
    key_lines: dict[Any, int]

    def line_of(self, key: Any) -> int:
        return self.key_lines.get(key, self.line)


class SourceList(list):
    """A sequence from YAML that knows its file and the line of itself and of each item."""

    source: str
    line: int
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    source = "<string>"


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> SourceMap:
    loader.flatten_mapping(node)
    result = SourceMap()
    result.source, result.line, result.key_lines = loader.source, node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise InputError(
                f"duplicate key {key!r} (first defined on line {result.key_lines[key]})",
                source=loader.source,
                line=key_node.start_mark.line + 1,
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> SourceList:
    result = SourceList(loader.construct_object(child, deep=True) for child in node.value)
    result.source, result.line = loader.source, node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


def _construct_unsafe(loader: _Loader, node: yaml.Node) -> Any:
    """`!unsafe 'text {{ not a template }}'`: the value as data (a string, list or mapping)."""
    if isinstance(node, yaml.ScalarNode):
        return mark_unsafe(loader.construct_scalar(node))
    if isinstance(node, yaml.SequenceNode):
        return mark_unsafe(_construct_sequence(loader, node))
    return mark_unsafe(_construct_mapping(loader, node))


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
_Loader.add_constructor("!unsafe", _construct_unsafe)


class _PlainLoader(yaml.SafeLoader):
    """Plain YAML (no source lines) for text from elsewhere: the `from_yaml` filter."""


def check_aliases(root: yaml.Node | None, source: str) -> None:
    """Refuse a document whose aliases expand to more than MAX_ALIASED_NODES values (or
    refer to a node that holds them), naming the line of the collection that crosses it.
    Linear in the document: each node's expanded size is counted once."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    aliased = 0

    def size(node: yaml.Node, parent_line: int) -> int:
        nonlocal aliased
        key = id(node)
        if key in open_nodes:
            raise InputError(
                "a YAML alias refers to a value that holds it", source=source, line=parent_line
            )
        if key in sizes:  # a second reference: an alias
            aliased += sizes[key]
            if aliased > MAX_ALIASED_NODES:
                raise InputError(
                    f"YAML aliases expand to more than {MAX_ALIASED_NODES} values"
                    " (an alias bomb?); refused",
                    source=source,
                    line=parent_line,
                )
            return sizes[key]
        open_nodes.add(key)
        line = node.start_mark.line + 1
        if isinstance(node, yaml.SequenceNode):
            children: list[yaml.Node] = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        total = 1 + sum(size(child, line) for child in children)
        open_nodes.discard(key)
        sizes[key] = total
        return total

    if root is not None:
        size(root, root.start_mark.line + 1)


def _load(loader: yaml.SafeLoader, source: str) -> Any:
    node = loader.get_single_node()
    check_aliases(node, source)
    return None if node is None else loader.construct_document(node)


def load_yaml_text(text: str) -> Any:
    """Parse YAML text that came from elsewhere (the `from_yaml` filter), aliases bounded."""
    loader = _PlainLoader(text)
    try:
        return _load(loader, "<from_yaml>")
    except (InputError, yaml.YAMLError) as error:
        raise TemplateError(f"from_yaml: {error}") from None
    finally:
        loader.dispose()


# Dumped back (the `to_yaml` filter, state files) as the plain mapping and list they are.
yaml.SafeDumper.add_representer(SourceMap, yaml.SafeDumper.represent_dict)
yaml.SafeDumper.add_representer(SourceList, yaml.SafeDumper.represent_list)


def load_yaml(path: Path) -> Any:
    """Parse one YAML file; syntax errors and duplicate keys become InputError with the line."""
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror}", source=str(path)) from None
    loader = _Loader(text)
    loader.source = str(path)
    try:
        return _load(loader, str(path))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else None
        raise InputError(f"invalid YAML: {error.problem}", source=str(path), line=line) from None
    finally:
        loader.dispose()


def where(value: Any, key: Any = None) -> dict[str, Any]:
    """Keyword arguments for InputError locating `value` (or its `key`) in its YAML file."""
    if isinstance(value, SourceMap):
        return {
            "source": value.source,
            "line": value.line_of(key) if key is not None else value.line,
        }
    if isinstance(value, SourceList):
        line = value.item_lines[key] if isinstance(key, int) else value.line
        return {"source": value.source, "line": line}
    return {}
