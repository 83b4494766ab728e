"""Playbooks: a YAML list of plays, each with hosts, vars, tasks and handlers; the loader
every caller uses. A play's own keys are read by glmops/engine/playparse.py, its body (blocks,
imports, includes, roles) by glmops/engine/structure.py and roles.py, into the types of
glmops/engine/nodes.py.

Tasks are validated when the playbook loads (module known, arguments known, keys known), so a
typo fails before any host is touched, with the file and line.
"""

from __future__ import annotations

from pathlib import Path

from glmops.engine import playparse
from glmops.engine.loading import MAX_DEPTH, unsupported
from glmops.engine.nodes import Play
from glmops.engine.structure import play_structure
from glmops.engine.yamlsrc import SourceList, SourceMap, load_yaml, where
from glmops.errors import InputError


def load_playbook(path: Path) -> list[Play]:
    """The plays of a playbook (`import_playbook` items replaced by the imported plays)."""
    return load_plays(path)


def load_plays(path: Path, seen: tuple[Path, ...] = ()) -> list[Play]:
    """A playbook's plays, `import_playbook` items replaced by the plays of that file (found
    beside the importing file)."""
    if path.resolve() in seen or len(seen) > MAX_DEPTH:
        raise InputError("import_playbook imports itself (a cycle)", source=str(path))
    data = load_yaml(path)
    if not isinstance(data, SourceList) or not data:
        raise InputError("a playbook must be a non-empty list of plays", source=str(path))
    plays: list[Play] = []
    for index, item in enumerate(data):
        if isinstance(item, SourceMap) and "import_playbook" in item:
            for key in item:
                if key not in ("import_playbook", "name"):
                    raise unsupported(f"'{key}' on import_playbook", item, key)
            name = item["import_playbook"]
            if not isinstance(name, str) or "{{" in name:
                raise unsupported("import_playbook of anything but a file name", item)
            target = path.parent / name
            if not target.is_file():
                raise InputError(
                    f"import_playbook: file '{name}' not found beside {path}",
                    **where(item, "import_playbook"),
                )
            plays += load_plays(target, (*seen, path.resolve()))
        else:
            play = playparse._play(item, data, index)
            play_structure(item, play)
            plays.append(play)
    return plays
