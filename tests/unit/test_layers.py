"""The package's floors, as each folder's docstring states them, checked on the import graph.

Every `import` in glmops/ counts, at module level or inside a function (a lazy import is
still an arrow), parsed with ast. A broken rule names the file and what it imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "glmops"

#: Ground floor: data and errors every floor may use; they import only each other.
GROUND = {"glmops", "errors", "paths", "pins", "unitfile", "__version__"}

#: Folder (or top-level module) -> the folders and modules it may import, besides itself and
#: the ground floor. `engine` runs modules, so it may reach the registry (glmops.modules and
#: modules.base) and the typed facts (gpu.facts); nothing else above it.
ALLOWED: dict[str, set[str]] = {
    "hosthelpers": set(),
    "gpu": {"hosthelpers"},
    "engine": {"hosthelpers", "gpu.facts", "modules", "modules.base"},
    "modules": {"hosthelpers", "engine", "gpu", "fleet", "model"},
    "model": {"hosthelpers", "engine", "gpu"},
    "fleet": {"hosthelpers", "engine", "gpu"},
    "testbed": {"hosthelpers", "engine", "gpu"},
    "run": {"hosthelpers", "engine", "gpu", "fleet", "model"},
    "cli": {"hosthelpers", "engine", "gpu", "fleet", "model", "modules", "run", "testbed"},
    "__main__": {"cli"},
}

#: The engine's run machinery: the policy floors (gpu, modules, model, fleet) never drive a
#: run. (Its sessions are the one door to a host, which the model phase opens too.)
RUNNER = {"executor", "play_loop", "task_run", "delegation"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(path: Path, known: set[str]) -> list[str]:
    """What the file imports, as module names (`from pkg import sub` is pkg.sub when sub is a
    module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append(sub if sub in known else node.module)
    return found


def floor(module: str) -> str:
    """glmops.engine.context -> engine; glmops.run -> run; glmops.errors -> errors."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "glmops"


def allowed(source: str, target: str) -> bool:
    here, there = floor(source), floor(target)
    if there in GROUND or here == there:
        return True
    if here in GROUND:
        return False
    rules = ALLOWED[here]
    rest = target.split(".", 1)[1]
    return any(rest == r or rest.startswith(r + ".") for r in rules)


def arrows() -> list[tuple[str, str]]:
    known = modules()
    return [
        (name, target)
        for name, path in sorted(known.items())
        for target in imports(path, set(known))
        if target == "glmops" or target.startswith("glmops.")
    ]


def test_every_arrow_keeps_to_the_stated_floors() -> None:
    broken = [f"{s} -> {t}" for s, t in arrows() if not allowed(s, t)]
    assert not broken, "imports that break the layering:\n" + "\n".join(broken)


def test_only_the_cli_imports_the_cli() -> None:
    broken = [
        f"{s} -> {t}"
        for s, t in arrows()
        if floor(t) == "cli" and floor(s) not in ("cli", "__main__")
    ]
    assert not broken, broken


def test_policy_floors_never_drive_a_run() -> None:
    broken = [
        f"{s} -> {t}"
        for s, t in arrows()
        if floor(s) in ("gpu", "modules", "model", "fleet")
        and floor(t) == "engine"
        and t.split(".")[2:3]
        and t.split(".")[2] in RUNNER
    ]
    assert not broken, broken


def test_host_helpers_are_stdlib_only() -> None:
    """They run on hosts with a bare python3: at module level the standard library and
    _envelope only, nowhere glmops. (The vLLM helpers import vllm and torch inside functions:
    they run under the host venv's python.)"""
    stdlib = set(sys.stdlib_module_names) | {"_envelope", "__future__"}
    broken = []
    for path in (ROOT / "hosthelpers").glob("*.py"):
        tree = ast.parse(path.read_text())
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                ours = name.startswith("glmops.hosthelpers")
                if name.startswith("glmops") and not ours:
                    broken.append(f"{path.name}: {name}")
                elif id(node) in top_level and name.split(".")[0] not in stdlib and not ours:
                    broken.append(f"{path.name}: {name} (at module level)")
    assert not broken, broken


def test_no_import_circles_between_files() -> None:
    """No file reaches itself through imports, lazy ones included (a circle closed by a lazy
    import is still a circle a reader must walk)."""
    graph: dict[str, set[str]] = {}
    for source, target in arrows():
        graph.setdefault(source, set()).add(target)
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in state:
                walk(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    assert not circles, circles


def test_the_rules_catch_a_wrong_arrow() -> None:
    """The checker itself: arrows the rules forbid are refused, allowed ones pass."""
    assert not allowed("glmops.engine.executor", "glmops.cli.main")
    assert not allowed("glmops.engine.inventory", "glmops.fleet.topology")
    assert not allowed("glmops.gpu.gpus", "glmops.engine.executor")
    assert not allowed("glmops.errors", "glmops.engine.context")
    assert allowed("glmops.engine.context", "glmops.gpu.facts")
    assert allowed("glmops.run", "glmops.fleet.roll")
