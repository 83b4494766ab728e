"""The module contract: plan (would it change, and why; with a diff), then apply.

A module is one class registered by name. The executor calls `plan()`; a plan that needs no
change is reported `ok` with its reason; in check mode a plan that needs a change is reported
`changed` (would change) with its diff and never applied; otherwise `apply()` runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from glmops.context import TaskContext
    from glmops.results import TaskResult


@dataclass(frozen=True)
class Arg:
    """One module argument: its type, default and meaning (validated before a task runs)."""

    types: type | tuple[type, ...]
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] = ()
    doc: str = ""


@dataclass
class Plan:
    """A module's answer to "would this change the host?".

    change: True (would change), False (already as desired; `reason` says why), or None (the
    module only observes the host, e.g. waits for a port: skipped in check mode).
    """

    change: bool | None
    reason: str
    diff: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def data_public(self) -> dict[str, Any]:
        """The data worth registering: everything but raw file contents."""
        return {key: value for key, value in self.data.items() if not isinstance(value, bytes)}


class Module:
    """Base class: subclasses set `name` and `args`, and implement `plan` and `apply`."""

    name: ClassVar[str]
    args: ClassVar[dict[str, Arg]] = {}
    #: Argument that a plain string value fills (`command: echo hi`).
    free_form: ClassVar[str | None] = None
    #: A change by this module can change gathered facts, so they are gathered again.
    changes_facts: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any]):
        self.params = params

    @classmethod
    def normalize(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """Reshape raw arguments when the playbook loads (before templating)."""
        return raw

    def plan(self, ctx: TaskContext) -> Plan:
        raise NotImplementedError

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        raise NotImplementedError


REGISTRY: dict[str, type[Module]] = {}


def register(cls: type[Module]) -> type[Module]:
    """Class decorator: make a module available to playbooks under `cls.name`."""
    REGISTRY[cls.name] = cls
    return cls


def validate_params(module: type[Module], raw: Any) -> tuple[dict[str, Any], list[str]]:
    """Fill defaults and return (params, problems); types are checked after templating."""
    if isinstance(raw, str) and module.free_form:
        raw = {module.free_form: raw}
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return {}, [f"arguments of '{module.name}' must be a mapping"]
    raw = module.normalize(dict(raw))
    problems = [
        f"unknown argument '{key}' for module '{module.name}' (allowed: "
        f"{', '.join(sorted(module.args))})"
        for key in raw
        if key not in module.args
    ]
    params = {key: raw.get(key, spec.default) for key, spec in module.args.items()}
    problems += [
        f"module '{module.name}' needs argument '{key}'"
        for key, spec in module.args.items()
        if spec.required and key not in raw
    ]
    return params, problems


def check_types(module: type[Module], params: dict[str, Any]) -> list[str]:
    """Problems with rendered argument values (wrong type, not one of the choices).

    A number given where text is expected (`content: "{{ version }}"`) becomes text.
    """
    problems = []
    for key, spec in module.args.items():
        value = params.get(key)
        if value is None:
            continue
        types = spec.types if isinstance(spec.types, tuple) else (spec.types,)
        if types == (str,) and isinstance(value, int | float) and not isinstance(value, bool):
            value = params[key] = str(value)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            problems.append(
                f"argument '{key}' of '{module.name}' must be {expected}, got {value!r}"
            )
        elif spec.choices and value not in spec.choices:
            problems.append(
                f"argument '{key}' of '{module.name}' must be one of "
                f"{', '.join(map(str, spec.choices))}, got {value!r}"
            )
    return problems
