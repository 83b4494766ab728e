"""The module contract: plan (would it change, and why; with a diff), then apply.

A module is one class registered by name. The executor calls `plan()`; a plan that needs no
change is reported `ok` with its reason; in check mode a plan that needs a change is reported
`changed` (would change) with its diff and never applied; otherwise `apply()` runs.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from glmops.errors import ModuleError

if TYPE_CHECKING:
    from glmops.engine.context import TaskContext
    from glmops.engine.results import TaskResult


@dataclass(frozen=True)
class Arg:
    """One module argument: its type, default and meaning (validated before a task runs)."""

    types: type | tuple[type, ...]
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] = ()
    doc: str = ""
    #: Turns a rendered value into the module's form; raises ValueError with the reason.
    convert: Callable[[Any], Any] | None = None
    #: The host variable that supplies the argument when the task leaves it unset (then
    #: `default`): for tasks glmops builds itself, such as `glmops status`'s, which no playbook
    #: passes values to. Read by `Module.bound_params`, type-checked like a passed value.
    var: str | None = None


def file_mode(value: Any, symbolic: bool = False) -> str:
    """An octal file mode as text ("0644"), or with `symbolic` also chmod's "u+x" form.

    An unquoted YAML `0644` arrives as the integer 420, the number the user meant; it is
    written back in octal, as Ansible does. Text must be 3 or 4 octal digits.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= 0o7777:
            raise ValueError(f"mode {value} is out of range (0 to 07777)")
        return f"{value:04o}"
    text = str(value)
    if symbolic and not re.fullmatch(r"[0-7]+", text):
        from glmops.modules.modes import check_symbolic

        return check_symbolic(text)
    if not re.fullmatch(r"[0-7]{3,4}", text):
        raise ValueError(f"mode {text!r} is not an octal mode such as '0644'")
    return text.zfill(4)


def mode_arg(default: str | None = None, symbolic: bool = False) -> Arg:
    """The `mode:` argument that file-writing modules share (`symbolic`: chmod's u+x too,
    for modules that compare it with the file's current mode, glmops.modules.modes)."""
    if symbolic:
        return Arg(
            (str, int),
            default=default,
            convert=lambda v: file_mode(v, symbolic=True),
            doc="octal (0644) or symbolic (u+x, go-w) mode, as chmod reads it",
        )
    return Arg((str, int), default=default, convert=file_mode, doc="octal mode, e.g. 0644")


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
        """The data worth registering: everything but raw file contents and the keys that start
        with `_` (what a plan hands its own apply, e.g. the steps it planned)."""
        return {
            key: value
            for key, value in self.data.items()
            if not isinstance(value, bytes) and not key.startswith("_")
        }


class Module:
    """Base class: subclasses set `name` and `args`, and implement `plan` and `apply`."""

    name: ClassVar[str]
    args: ClassVar[dict[str, Arg]] = {}
    #: Argument that a plain string value fills (`command: echo hi`).
    free_form: ClassVar[str | None] = None
    #: Takes any argument names (`set_fact: {name: value}`); `args` then lists none.
    any_args: ClassVar[bool] = False
    #: A change by this module can change gathered facts, so they are gathered again.
    changes_facts: ClassVar[bool] = False
    #: Keys `register:` always holds for this module, with these values when the module did
    #: not run (check mode, a false `when`), so expressions over them never meet an undefined.
    result_defaults: ClassVar[dict[str, Any]] = {}
    #: Evaluates expressions or renders templates over all of the host's variables (debug,
    #: assert, template): the one way a module sees variables it does not declare as `args`.
    variable_scope: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any]):
        self.params = {key: _unset(spec) for key, spec in self.args.items()} | params

    def bound_params(self, ctx: TaskContext) -> dict[str, Any]:
        """The arguments, each unset one that names a host variable (`Arg.var`) taken from it
        and checked like a passed value."""
        bound = {
            key: ctx.vars[spec.var]
            for key, spec in self.args.items()
            if spec.var and self.params.get(key) is None and ctx.vars.get(spec.var) is not None
        }
        problems = check_types(type(self), bound)
        if problems:
            raise ModuleError(f"{problems[0]} (from its host variable)")
        defaults = {
            key: spec.default
            for key, spec in self.args.items()
            if spec.var and self.params.get(key) is None and key not in bound
        }
        return {**self.params, **defaults, **bound}

    def scope(self, ctx: TaskContext) -> dict[str, Any]:
        """All of the host's variables, for modules that declare `variable_scope`."""
        if not self.variable_scope:
            raise TypeError(f"module {self.name} reads only its arguments and facts")
        return ctx.vars

    @classmethod
    def normalize(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """Reshape raw arguments when the playbook loads (before templating)."""
        return raw

    def checks(self) -> list[str]:
        """Commands `plan` runs (through `ctx.run`, without stdin) that read the host and
        depend on the arguments alone: the play may run them ahead, several tasks' in one
        round trip, and `plan` then gets their answers without asking the host again."""
        return []

    def plan(self, ctx: TaskContext) -> Plan:
        raise NotImplementedError

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        raise NotImplementedError


def _unset(spec: Arg) -> Any:
    """An argument's value when a task does not pass it; one bound to a host variable stays
    None until `Module.bound_params` looks the variable up."""
    return None if spec.var else spec.default


#: Which file of this package defines each module: the registry knows every name without
#: importing a file, and imports one the first time a play names a module in it (start-up
#: cost). tests/unit/test_module_registry.py holds this table to what the files register.
_NAMED_AS_THEIR_FILE = [
    "apt",
    "command",
    "copy",
    "deploy_status",
    "file",
    "get_url",
    "gguf_model",
    "helper",
    "hf_model",
    "include_vars",
    "lineinfile",
    "meta",
    "model_manifest",
    "nvidia_driver",
    "python_venv",
    "reboot",
    "router_workers",
    "secret_template",
    "stat",
    "system_user",
    "systemd",
    "unarchive",
    "vllm_backend_ask",
    "vllm_backend_check",
    "vllm_drain",
    "vllm_gang",
    "vllm_gang_pending",
    "vllm_gang_restart",
    "vllm_gang_state",
    "vllm_install",
    "vllm_patchset",
    "vllm_ready",
    "vllm_selection_preflight",
    "vllm_serve_config",
    "vllm_soak",
    "wait_for",
    "wheelhouse",
]
MODULE_FILES: dict[str, str] = {
    **{name: name for name in _NAMED_AS_THEIR_FILE},
    "shell": "command",
    "template": "copy",
    "blockinfile": "lineinfile",
    **{name: "control" for name in ("assert", "debug", "fail", "set_fact")},
}


class ModuleRegistry(MutableMapping[str, "type[Module]"]):
    """Module classes by name, each file imported when one of its modules is first looked up."""

    def __init__(self, files: dict[str, str]) -> None:
        self._files = files
        self._loaded: dict[str, type[Module]] = {}

    def __getitem__(self, name: str) -> type[Module]:
        if name not in self._loaded and name in self._files:
            importlib.import_module(f"glmops.modules.{self._files[name]}")
        return self._loaded[name]

    def __setitem__(self, name: str, cls: type[Module]) -> None:
        self._loaded[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._files

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._files.keys() | self._loaded.keys()))

    def __len__(self) -> int:
        return len(self._files.keys() | self._loaded.keys())


REGISTRY = ModuleRegistry(MODULE_FILES)


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
    if module.any_args:
        return dict(raw), []
    problems = [
        f"unknown argument '{key}' for module '{module.name}' (allowed: "
        f"{', '.join(sorted(module.args))})"
        for key in raw
        if key not in module.args
    ]
    params = {key: raw.get(key, _unset(spec)) for key, spec in module.args.items()}
    problems += [
        f"module '{module.name}' needs argument '{key}'"
        for key, spec in module.args.items()
        if spec.required and key not in raw
    ]
    for key, spec in module.args.items():
        value = raw.get(key)
        if spec.convert is None or value is None or "{" in str(value):
            continue  # templated values are checked once rendered
        try:
            params[key] = spec.convert(value)
        except ValueError as error:
            problems.append(f"argument '{key}' of '{module.name}': {error}")
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
        if spec.convert is not None:
            try:
                value = params[key] = spec.convert(value)
            except ValueError as error:
                problems.append(f"argument '{key}' of '{module.name}': {error}")
                continue
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
