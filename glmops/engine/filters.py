"""Ansible's Jinja filters, tests and lookups: the names, arguments and output Ansible users
rely on (ansible-core 2.19), so a template renders to the same bytes under glmops.

The tables here are installed on every template environment (templating.make_environment).
"""

from __future__ import annotations

import base64
import glob
import hashlib
import itertools
import json
import os
import random
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import yaml

from glmops.engine.yamlsrc import load_yaml_text

#: What `omit` renders to; a module argument equal to it is left unset (Ansible's placeholder).
OMIT = "__omit_place_holder__glmops"


def to_json(value: Any, **kwargs: Any) -> str:
    """Ansible's: keys in their order, unless sort_keys=True is asked."""
    return json.dumps(value, **kwargs)


def to_nice_json(value: Any, indent: int = 4, sort_keys: bool = True, **kwargs: Any) -> str:
    return json.dumps(value, indent=indent, sort_keys=sort_keys, separators=(",", ": "), **kwargs)


class _Dumper(yaml.SafeDumper):
    """YAML as Ansible writes it: strings that are text, lists indented under their key."""


def to_yaml(value: Any, **kwargs: Any) -> str:
    kwargs.setdefault("default_flow_style", None)
    return yaml.dump(value, Dumper=_Dumper, allow_unicode=True, **kwargs)


def to_nice_yaml(value: Any, indent: int = 4, sort_keys: bool = True, **kwargs: Any) -> str:
    return yaml.dump(
        value,
        Dumper=_Dumper,
        indent=indent,
        allow_unicode=True,
        default_flow_style=False,
        sort_keys=sort_keys,
        **kwargs,
    )


def to_bool(value: Any) -> bool:
    """Ansible's `bool`: yes/on/true/1 (any case) are true."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "on", "true", "1", "y")


def ternary(value: Any, true_value: Any, false_value: Any, none_value: Any = None) -> Any:
    if value is None and none_value is not None:
        return none_value
    return true_value if value else false_value


def regex_replace(
    value: Any, pattern: str, replacement: str = "", ignorecase: bool = False, count: int = 0
) -> str:
    return re.sub(pattern, replacement, str(value), count=count, flags=re.I if ignorecase else 0)


def regex_search(value: Any, pattern: str, ignorecase: bool = False) -> str | None:
    match = re.search(pattern, str(value), flags=re.I if ignorecase else 0)
    return match.group(0) if match else None


def regex_findall(value: Any, pattern: str, ignorecase: bool = False) -> list[Any]:
    return re.findall(pattern, str(value), flags=re.I if ignorecase else 0)


def combine(*dicts: dict[str, Any], recursive: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in dicts:
        for key, value in item.items():
            if recursive and isinstance(value, dict) and isinstance(result.get(key), dict):
                value = combine(result[key], value, recursive=True)
            result[key] = value
    return result


def extract(key: Any, container: Any, morekeys: Any = None) -> Any:
    """Ansible's `extract`: `container[key]`, then each of `morekeys` in turn
    (`groups['web'] | map('extract', hostvars, 'port')`)."""
    value = container[key]
    for more in [] if morekeys is None else morekeys if isinstance(morekeys, list) else [morekeys]:
        value = value[more]
    return value


def dict2items(value: dict, key_name: str = "key", value_name: str = "value") -> list[dict]:
    if not isinstance(value, dict):
        raise jinja2.exceptions.FilterArgumentError("dict2items requires a dictionary")
    return [{key_name: k, value_name: v} for k, v in value.items()]


def items2dict(value: list, key_name: str = "key", value_name: str = "value") -> dict:
    return {item[key_name]: item[value_name] for item in value}


def flatten(value: list, levels: int | None = None, skip_nulls: bool = True) -> list:
    flat: list[Any] = []
    for item in value:
        if skip_nulls and item in (None, "None", "null"):
            continue
        if isinstance(item, list | tuple) and (levels is None or levels > 0):
            flat.extend(flatten(list(item), None if levels is None else levels - 1, skip_nulls))
        else:
            flat.append(item)
    return flat


def unique(value: list) -> list:
    seen: list[Any] = []
    for item in value:
        if item not in seen:
            seen.append(item)
    return seen


def difference(a: list, b: list) -> list:
    return unique([x for x in a if x not in b])


def intersect(a: list, b: list) -> list:
    return unique([x for x in a if x in b])


def union(a: list, b: list) -> list:
    return unique(list(a) + list(b))


def symmetric_difference(a: list, b: list) -> list:
    return unique([x for x in a if x not in b] + [x for x in b if x not in a])


def product(*lists: list) -> list:
    return [list(combo) for combo in itertools.product(*lists)]


def zip_lists(*lists: list) -> list:
    return [list(combo) for combo in zip(*lists, strict=False)]


def zip_longest(*lists: list, fillvalue: Any = None) -> list:
    return [list(combo) for combo in itertools.zip_longest(*lists, fillvalue=fillvalue)]


def random_pick(end: Any, start: int | None = None, step: int | None = None, seed: Any = None):
    """Ansible's `random`: a number below `end` (from start, by step), or an item of a list."""
    rng = random.Random(seed) if seed is not None else random.SystemRandom()
    if isinstance(end, int) and not isinstance(end, bool):
        return rng.randrange(start or 0, end, step or 1)
    if hasattr(end, "__iter__"):
        if start is not None or step is not None:
            raise jinja2.exceptions.FilterArgumentError("start and step apply to numbers only")
        return rng.choice(list(end))
    raise jinja2.exceptions.FilterArgumentError("random takes a number or a list")


def hash_value(value: Any, hashtype: str = "sha1") -> str:
    digest = hashlib.new(hashtype)
    digest.update(str(value).encode())
    return digest.hexdigest()


def password_hash(value: Any, hashtype: str = "sha512", salt: str | None = None) -> str:
    """A crypt(3) hash (`/etc/shadow`); sha512 and sha256, as the system's crypt makes them."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:  # Python 3.13 has no crypt: refuse, never a wrong hash
            raise jinja2.exceptions.FilterArgumentError(
                "password_hash needs Python's crypt module (Python < 3.13)"
            ) from None
    methods = {"sha512": crypt.METHOD_SHA512, "sha256": crypt.METHOD_SHA256}
    if hashtype not in methods:
        raise jinja2.exceptions.FilterArgumentError(
            f"password_hash: {hashtype!r} not supported by glmops (sha512, sha256)"
        )
    prefix = "$6$" if hashtype == "sha512" else "$5$"
    return crypt.crypt(str(value), f"{prefix}{salt}" if salt else crypt.mksalt(methods[hashtype]))


def mandatory(value: Any, msg: str | None = None) -> Any:
    if isinstance(value, jinja2.Undefined):
        raise jinja2.exceptions.UndefinedError(msg or "mandatory variable not defined")
    return value


FILTERS = {
    "to_json": to_json,
    "to_nice_json": to_nice_json,
    "from_json": json.loads,
    "to_yaml": to_yaml,
    "to_nice_yaml": to_nice_yaml,
    "from_yaml": load_yaml_text,  # aliases bounded: host output may be a bomb
    "quote": lambda value: shlex.quote(str(value)),
    "bool": to_bool,
    "ternary": ternary,
    "regex_replace": regex_replace,
    "regex_search": regex_search,
    "regex_findall": regex_findall,
    "regex_escape": lambda value: re.escape(str(value)),
    "b64encode": lambda value: base64.b64encode(str(value).encode()).decode(),
    "b64decode": lambda value: base64.b64decode(str(value)).decode(),
    "combine": combine,
    "extract": extract,
    "basename": lambda value: os.path.basename(str(value)),
    "dirname": lambda value: os.path.dirname(str(value)),
    "expanduser": lambda value: os.path.expanduser(str(value)),
    "splitext": lambda value: list(os.path.splitext(str(value))),
    "dict2items": dict2items,
    "items2dict": items2dict,
    "split": lambda value, sep=None, maxsplit=-1: str(value).split(sep, maxsplit),
    "flatten": flatten,
    "unique": unique,
    "difference": difference,
    "intersect": intersect,
    "union": union,
    "symmetric_difference": symmetric_difference,
    "product": product,
    "zip": zip_lists,
    "zip_longest": zip_longest,
    "random": random_pick,
    "hash": hash_value,
    "checksum": lambda value: hash_value(value, "sha1"),
    "md5": lambda value: hash_value(value, "md5"),
    "sha1": lambda value: hash_value(value, "sha1"),
    "password_hash": password_hash,
    "mandatory": mandatory,
    "type_debug": lambda value: type(value).__name__,
}


def _status(result: Any, key: str) -> bool:
    if not isinstance(result, dict):
        raise jinja2.exceptions.TemplateRuntimeError(
            f"the '{key}' test expects a registered task result, got {type(result).__name__}"
        )
    return bool(result.get(key))


def _loose_version(text: str) -> list[Any]:
    """distutils' LooseVersion, which Ansible's `version` test uses by default: numbers compare
    as numbers, letters as text (`1.10 > 1.9`, `2.19.4-ubuntu1` is valid)."""
    parts = re.split(r"(\d+|[a-z]+|\.)", str(text).lower())
    return [int(p) if p.isdigit() else p for p in parts if p and p != "."]


def version_test(
    value: Any, other: Any, operator: str = "eq", strict: bool = False, version_type: str = "loose"
) -> bool:
    """Ansible's `version` test (loose comparison; `version_type='pep440'` for PEP 440)."""
    ops = dict.fromkeys(("lt", "<"), "lt") | dict.fromkeys(("le", "<="), "le")
    ops |= dict.fromkeys(("gt", ">"), "gt") | dict.fromkeys(("ge", ">="), "ge")
    ops |= dict.fromkeys(("eq", "==", "="), "eq") | dict.fromkeys(("ne", "!=", "<>"), "ne")
    if operator not in ops:
        raise jinja2.exceptions.TemplateRuntimeError(f"version: invalid operator {operator!r}")
    if version_type == "pep440":
        from packaging.version import InvalidVersion, Version

        try:
            left, right = Version(str(value)), Version(str(other))
        except InvalidVersion as error:
            raise jinja2.exceptions.TemplateRuntimeError(f"version: {error}") from None
    elif version_type == "loose" and not strict:
        left, right = _loose_version(value), _loose_version(other)  # type: ignore[assignment]
    else:
        raise jinja2.exceptions.TemplateRuntimeError(
            f"version: not supported by glmops: version_type {version_type!r} (loose, pep440)"
        )
    try:
        return getattr(left, f"__{ops[operator]}__")(right)
    except TypeError:
        raise jinja2.exceptions.TemplateRuntimeError(
            f"version: cannot compare {value!r} with {other!r}"
        ) from None


TESTS = {
    "failed": lambda r: _status(r, "failed"),
    "failure": lambda r: _status(r, "failed"),
    "succeeded": lambda r: not _status(r, "failed"),
    "success": lambda r: not _status(r, "failed"),
    "successful": lambda r: not _status(r, "failed"),
    "changed": lambda r: _status(r, "changed"),
    "change": lambda r: _status(r, "changed"),
    "skipped": lambda r: _status(r, "skipped"),
    "skip": lambda r: _status(r, "skipped"),
    "version": version_test,
    "version_compare": version_test,
    "match": lambda value, pattern, ignorecase=False: bool(
        re.match(pattern, str(value), flags=re.I if ignorecase else 0)
    ),
    "search": lambda value, pattern, ignorecase=False: bool(
        re.search(pattern, str(value), flags=re.I if ignorecase else 0)
    ),
    "regex": lambda value, pattern, ignorecase=False: bool(
        re.search(pattern, str(value), flags=re.I if ignorecase else 0)
    ),
    "contains": lambda seq, item: item in seq,
    "subset": lambda a, b: all(x in b for x in a),
    "superset": lambda a, b: all(x in a for x in b),
    "truthy": bool,
    "falsy": lambda value: not value,
    "exists": lambda path: os.path.exists(os.path.expanduser(str(path))),
    "file": lambda path: os.path.isfile(os.path.expanduser(str(path))),
    "directory": lambda path: os.path.isdir(os.path.expanduser(str(path))),
    "link": lambda path: os.path.islink(os.path.expanduser(str(path))),
    "abs": lambda path: os.path.isabs(str(path)),
}


def _find(context: jinja2.runtime.Context, name: str, subdir: str) -> Path:
    """A lookup's file, as Ansible searches it: `subdir/` beside the playbook, then beside it."""
    base = Path(str(context.get("playbook_dir") or "."))
    for candidate in (base / subdir / name, base / name):
        if candidate.is_file():
            return candidate
    raise jinja2.exceptions.TemplateRuntimeError(
        f"lookup: file {name!r} not found (searched {base / subdir} and {base})"
    )


def fileglob(playbook_dir: str, patterns: list[str]) -> list[str]:
    """Files matching each pattern, as Ansible's fileglob searches: under files/ beside the
    playbook, else beside the playbook; absolute paths, sorted per pattern."""
    base, found = Path(playbook_dir), []
    for pattern in patterns:
        roots = [Path("/")] if pattern.startswith("/") else [base / "files", base]
        root = next((r for r in roots if (r / pattern).parent.is_dir()), roots[-1])
        found += [p for p in sorted(glob.glob(str(root / pattern))) if os.path.isfile(p)]
    return found


def _lookup_values(context: jinja2.runtime.Context, plugin: str, terms: tuple) -> list[Any]:
    if plugin == "env":
        return [os.environ.get(str(term), "") for term in terms]
    if plugin == "file":
        return [_find(context, str(t), "files").read_text().rstrip("\n") for t in terms]
    if plugin == "template":
        found = [_find(context, str(t), "templates") for t in terms]
        env = context.environment
        return [env.from_string(path.read_text()).render(context.get_all()) for path in found]
    if plugin == "pipe":
        return [
            subprocess.run(
                str(t), shell=True, capture_output=True, text=True, check=True
            ).stdout.rstrip("\n")
            for t in terms
        ]
    if plugin == "fileglob":
        return fileglob(str(context.get("playbook_dir") or "."), [str(t) for t in terms])
    if plugin == "vars":
        return [context.resolve(str(term)) for term in terms]
    raise jinja2.exceptions.TemplateRuntimeError(f"lookup {plugin!r} is not supported by glmops")


#: The lookups glmops runs (on the controller, as Ansible's do).
LOOKUPS = ("env", "file", "template", "pipe", "fileglob", "vars")


@jinja2.pass_context
def lookup(context: jinja2.runtime.Context, plugin: str, *terms: Any, wantlist: bool = False):
    """`lookup('env', 'HOME')`: one term gives its value; several, their values joined by ','."""
    values = _lookup_values(context, plugin, terms)
    if wantlist:
        return values
    return values[0] if len(values) == 1 else ",".join(str(v) for v in values)


@jinja2.pass_context
def query(context: jinja2.runtime.Context, plugin: str, *terms: Any) -> list[Any]:
    return _lookup_values(context, plugin, terms)


GLOBALS = {"lookup": lookup, "query": query, "q": query, "omit": OMIT}
