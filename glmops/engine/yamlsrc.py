"""YAML loading that remembers where each value came from, so errors can name file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from glmops.errors import InputError


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


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
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
        return loader.get_single_data()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else None
        raise InputError(
            f"invalid YAML: {error.problem}{_excerpt(text, mark)}", source=str(path), line=line
        ) from None
    finally:
        loader.dispose()


def _excerpt(text: str, mark: yaml.Mark | None) -> str:
    """`, column C:` and the offending line with a caret under the column (as Ansible shows)."""
    if mark is None:
        return ""
    lines = text.splitlines()
    shown = lines[mark.line] if mark.line < len(lines) else ""
    return f", column {mark.column + 1}:\n    {shown}\n    {' ' * mark.column}^ here"


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
