"""Inventory: hosts, nested groups and their variables, in the Ansible YAML layout.

    all:
      vars: {...}
      hosts: {name: {address: ..., other vars}}
      children: {group: {hosts: ..., vars: ..., children: ...}}

plus `group_vars/<group>.yml` and `host_vars/<host>.yml` beside the inventory file. Variable
precedence, lowest first: group `all`, parent groups, child groups (deeper wins; siblings in name
order), group_vars files over inline group vars, the host's inline vars, host_vars files, then
extra vars from the command line (`-e k=v`).

`localhost`, when the inventory defines no such host, is the controller itself (Ansible's
implicit localhost): a local connection, the `all` group's variables (and host_vars/localhost.yml,
extra vars), in no group, so `all` and globs never include it; it is there once it is named.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from glmops.engine.yamlsrc import SourceMap, load_yaml, where
from glmops.errors import InputError

GROUP_KEYS = frozenset({"hosts", "vars", "children"})
LOCALHOST = "localhost"


@dataclass(frozen=True)
class ConnKey:
    """One typed connection setting an inventory may give a host."""

    types: tuple[type, ...]
    default: Any
    doc: str
    choices: tuple[str, ...] = ()


def _key(default: Any, types: tuple[type, ...], doc: str, choices: tuple[str, ...] = ()) -> Any:
    """A ConnectionSpec field that an inventory sets under the same name: its default, the
    types it accepts, its meaning and its choices (read back as CONNECTION_KEYS)."""
    return field(default=default, metadata={"types": types, "doc": doc, "choices": choices})


@dataclass(frozen=True)
class ConnectionSpec:
    """How to reach one host: the validated connection keys of its merged variables.

    The one table of the connection keys an inventory may set, with their defaults."""

    address: str = field(  # always set: the host's name when the inventory gives none
        metadata={
            "types": (str,),
            "doc": "host name or IP to connect to (default: the host's name)",
            "choices": (),
        }
    )
    user: str | None = _key(None, (str,), "SSH user (default: ~/.ssh/config, then the local user)")
    port: int | None = _key(None, (int,), "SSH port (default: ~/.ssh/config, then 22)")
    key_file: str | None = _key(None, (str,), "private key file for SSH authentication")
    jump: str | None = _key(None, (str,), "jump host, as for ssh -J: [user@]host[:port]")
    become: bool = _key(False, (bool,), "run tasks through sudo")
    connection: str = _key("ssh", (str,), "how to reach the host", ("ssh", "local"))
    host_key_checking: str = _key(
        "accept-new", (str,), "unknown host keys: record them, or refuse", ("accept-new", "strict")
    )
    connect_timeout: float = _key(15, (int, float), "seconds to establish the SSH connection")
    persist: float = _key(
        0,
        (int, float),
        "seconds an SSH connection stays open after a run, for the next run to use (OpenSSH "
        "ControlPersist, a socket only this user can open); 0: closed with the run",
    )
    command_timeout: float = _key(3600, (int, float), "default seconds one remote command may run")
    state_dir: str | None = _key(
        None,
        (str,),
        "glmops' state on the host: pending notifications, run lock, backups "
        "(default: /var/lib/glmops as root, else ~/.local/state/glmops)",
    )


CONNECTION_KEYS: dict[str, ConnKey] = {
    spec.name: ConnKey(
        spec.metadata["types"],
        None if spec.default is MISSING else spec.default,
        spec.metadata["doc"],
        spec.metadata["choices"],
    )
    for spec in fields(ConnectionSpec)
}


@dataclass
class Host:
    """A host with its groups and fully merged variables."""

    name: str
    groups: list[str]
    vars: dict[str, Any]
    connection: ConnectionSpec


@dataclass
class _Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


@dataclass
class Inventory:
    """The loaded inventory: hosts by name and groups by name, in file order."""

    path: Path
    hosts: dict[str, Host]
    groups: dict[str, list[str]]
    #: What the implicit localhost gets: the `all` group's variables, host_vars, extra vars.
    localhost_vars: dict[str, Any] = field(default_factory=dict)
    _implicit: Host | None = field(default=None, repr=False)

    def host(self, name: str) -> Host | None:
        """The host called `name`: an inventory host, or the implicit localhost, or None.

        The implicit localhost is the controller when the inventory defines no `localhost`
        (Ansible's: a local connection, the variables above). It is in no group and never in
        `hosts`, so nothing that walks the inventory's hosts meets it; only a lookup by name
        (this, `select()`) finds it, always the same object."""
        if name in self.hosts:
            return self.hosts[name]
        if name != LOCALHOST:
            return None
        if self._implicit is None:
            merged = {**self.localhost_vars, "connection": "local", "address": LOCALHOST}
            where_set = SourceMap()
            where_set.source, where_set.line, where_set.key_lines = str(self.path), 1, {}
            spec = _connection_spec(LOCALHOST, merged, where_set)
            self._implicit = Host(LOCALHOST, [], merged, spec)
        return self._implicit

    def select(self, pattern: str) -> list[Host]:
        """Hosts matching a pattern: names, groups or globs, joined by ',' or ':'; '!x' excludes.

        Raises InputError naming the inventory when the pattern matches no host.
        """
        chosen: dict[str, Host] = {}
        excluded: set[str] = set()
        for term in pattern.replace(":", ",").split(","):
            term = term.strip()
            if not term:
                continue
            target = excluded if term.startswith("!") else chosen
            for host in self._match(term.lstrip("!")):
                if target is excluded:
                    excluded.add(host.name)
                else:
                    chosen[host.name] = host
        selected = [host for name, host in chosen.items() if name not in excluded]
        if not selected:
            raise InputError(
                f"'{pattern}' matches no host in this inventory", source=str(self.path)
            )
        return selected

    def _match(self, term: str) -> list[Host]:
        if term in self.groups:
            return [self.hosts[name] for name in self.groups[term]]
        named = self.host(term)
        if named is not None:
            return [named]
        names = [name for name in self.groups["all"] if fnmatch.fnmatchcase(name, term)]
        for group, members in self.groups.items():
            if fnmatch.fnmatchcase(group, term):
                names.extend(members)
        return [self.hosts[name] for name in dict.fromkeys(names)]


def parse_extra_vars(items: list[str]) -> dict[str, Any]:
    """`-e` values, as in Ansible: `k=v` (v parsed as a YAML scalar, so `-e port=8001` is an
    integer), a JSON or YAML mapping (`-e '{"k": [1, 2]}'`), or `@FILE` (a YAML/JSON file)."""
    import yaml

    extra: dict[str, Any] = {}
    for item in items:
        if item.startswith("@"):
            extra.update(load_vars_file(Path(item[1:]), f"-e {item}"))
            continue
        if item.lstrip().startswith("{"):
            try:
                value = yaml.safe_load(item)
            except yaml.YAMLError as error:
                raise InputError(f"-e {item!r}: not a JSON/YAML mapping: {error}") from None
            if not isinstance(value, dict):
                raise InputError(f"-e {item!r}: not a JSON/YAML mapping")
            extra.update(value)
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"-e {item!r}: expected KEY=VALUE, a JSON mapping or @FILE")
        try:
            extra[key.strip()] = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            extra[key.strip()] = raw
    return extra


def load_vars_file(path: Path, what: str) -> dict[str, Any]:
    """A YAML (or JSON) file of variables: a mapping at the top (-e @FILE, vars_files)."""
    data = load_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{what}: the file must hold a mapping of variables", source=str(path))
    return dict(data)


def _inventory_data(path: Path) -> Any:
    """The inventory's groups: a YAML file, an INI file, or a comma list (`web1,web2,`)."""
    from glmops.engine import inventory_ini

    if "," in str(path) and not path.exists():
        return inventory_ini.parse_host_list(str(path))
    if path.suffix not in (".yml", ".yaml", ".json") and path.is_file():
        text = path.read_text()
        if inventory_ini.looks_like_ini(text):
            return inventory_ini.parse_ini(text, str(path))
    return load_yaml(path)


#: Ansible's inventory connection variables and glmops' own names for them.
ANSIBLE_ALIASES = {
    "ansible_host": "address",
    "ansible_ssh_host": "address",
    "ansible_port": "port",
    "ansible_ssh_port": "port",
    "ansible_user": "user",
    "ansible_ssh_user": "user",
    "ansible_connection": "connection",
    "ansible_ssh_private_key_file": "key_file",
    "ansible_private_key_file": "key_file",
    "ansible_become": "become",
}
#: Ansible connection variables with no glmops meaning: refused, never silently ignored.
ANSIBLE_REFUSED = (
    "ansible_password",
    "ansible_ssh_pass",
    "ansible_become_password",
    "ansible_become_pass",
    "ansible_become_user",
    "ansible_become_method",
    "ansible_become_exe",
    "ansible_become_flags",
    "ansible_python_interpreter",
    "ansible_shell_type",
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
)


def _ansible_aliases(host: str, merged: dict[str, Any], inline: SourceMap) -> None:
    """Map `ansible_host` & co. onto glmops' keys (both spellings at once must agree)."""
    located = {"source": inline.source, "line": inline.line}
    for key in ANSIBLE_REFUSED:
        if key in merged:
            raise InputError(
                f"host '{host}': not supported by glmops: the inventory variable '{key}' "
                "(see docs/ansible.md or `glmops doc --ansible`)",
                **where(inline, key) if key in inline else located,
            )
    for alias, own in ANSIBLE_ALIASES.items():
        if alias not in merged:
            continue
        value = merged[alias]
        if own == "connection" and value in ("smart", "paramiko", "ssh"):
            value = "ssh"
        if own == "become" and isinstance(value, str):
            value = value.strip().lower() in ("yes", "true", "1", "on")
        if own in merged and merged[own] != value:
            raise InputError(
                f"host '{host}': '{alias}' ({value!r}) and '{own}' ({merged[own]!r}) disagree",
                **where(inline, alias) if alias in inline else located,
            )
        merged[own] = value


def load_inventory(
    path: Path,
    extra_vars: dict[str, Any] | None = None,
    connection_defaults: dict[str, Any] | None = None,
) -> Inventory:
    """Load and validate an inventory (file, INI file or comma list) and the group_vars/ and
    host_vars/ beside it; `connection_defaults` (-u, -c, -b) apply where a host sets none. The
    variables the fleet derives from it (`fleet_replica`) come with glmops.run.load_inventory,
    the loader every verb uses."""
    data = _inventory_data(path)
    if not isinstance(data, SourceMap):
        raise InputError(
            "an inventory must be a mapping of groups (start with 'all:')", source=str(path)
        )
    groups: dict[str, _Group] = {"all": _Group("all")}
    host_inline: dict[str, SourceMap] = {}
    for name, body in data.items():
        _read_group(str(name), body, data, groups, host_inline)
        if name != "all":
            groups["all"].children.append(str(name))
    depth = _depths(groups)
    for name in list(groups):
        groups[name].vars.update(_vars_file(_folder(path) / "group_vars", name))
    hosts: dict[str, Host] = {}
    membership = _membership(groups)
    for host_name in host_inline:
        host_groups = sorted(membership.get(host_name, {"all"}), key=lambda g: (depth[g], g))
        merged: dict[str, Any] = {}
        for group in host_groups:
            merged.update(groups[group].vars)
        merged.update(host_inline[host_name])
        merged.update(_vars_file(_folder(path) / "host_vars", host_name))
        merged.update(extra_vars or {})
        _ansible_aliases(host_name, merged, host_inline[host_name])
        for key, value in (connection_defaults or {}).items():
            merged.setdefault(key, value)
        spec = _connection_spec(host_name, merged, host_inline[host_name])
        hosts[host_name] = Host(host_name, [g for g in host_groups if g != "all"], merged, spec)
    members = {g: [h for h in host_inline if g in membership.get(h, set())] for g in groups}
    members["all"] = list(host_inline)
    localhost_vars = {
        **groups["all"].vars,
        **_vars_file(_folder(path) / "host_vars", LOCALHOST),
        **(extra_vars or {}),
    }
    return Inventory(path=path, hosts=hosts, groups=members, localhost_vars=localhost_vars)


def _folder(path: Path) -> Path:
    """Where group_vars/ and host_vars/ are: beside the file (a comma list: the current one)."""
    return path.parent if path.exists() else Path(".")


def _read_group(
    name: str,
    body: Any,
    parent: SourceMap,
    groups: dict[str, _Group],
    host_inline: dict[str, SourceMap],
) -> None:
    if body is None:
        body = SourceMap()
        body.source, body.line, body.key_lines = parent.source, parent.line_of(name), {}
    if not isinstance(body, SourceMap):
        raise InputError(f"group '{name}' must be a mapping", **where(parent, name))
    for key in body:
        if key not in GROUP_KEYS:
            raise InputError(
                f"unknown key '{key}' in group '{name}' (allowed: hosts, vars, children)",
                **where(body, key),
            )
    group = groups.setdefault(name, _Group(name))
    group_vars = body.get("vars") or {}
    if not isinstance(group_vars, dict):
        raise InputError(f"'vars' of group '{name}' must be a mapping", **where(body, "vars"))
    group.vars.update(group_vars)
    hosts = body.get("hosts") or _empty_map(body, "hosts")
    if not isinstance(hosts, SourceMap):  # an `!unsafe` mapping has no lines to name
        raise InputError(f"'hosts' of group '{name}' must be a mapping", **where(body, "hosts"))
    for host_name, host_body in hosts.items():
        _check_host_name(host_name, hosts)
        if host_body is not None and not isinstance(host_body, SourceMap):
            raise InputError(
                f"host '{host_name}' must be a mapping of variables", **where(hosts, host_name)
            )
        known = host_inline.get(host_name)
        if host_body and known:
            raise InputError(
                f"duplicate host '{host_name}': already defined with variables at "
                f"{known.source}:{known.line}; define its variables in one place",
                **where(hosts, host_name),
            )
        if host_body or host_name not in host_inline:
            host_inline[host_name] = host_body or _empty_map(hosts, host_name)
        group.hosts.append(host_name)
    children = body.get("children") or _empty_map(body, "children")
    if not isinstance(children, SourceMap):
        raise InputError(
            f"'children' of group '{name}' must be a mapping", **where(body, "children")
        )
    for child, child_body in children.items():
        _read_group(str(child), child_body, children, groups, host_inline)
        group.children.append(str(child))


def _check_host_name(name: Any, hosts: SourceMap) -> None:
    """A host name names files (its run log, its lock on the host) and is an ssh argument:
    no whitespace or control character, no `/`, not `.` or `..`, no leading `-`."""
    bad = (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or name.startswith("-")
        or any(c.isspace() or ord(c) < 32 or ord(c) == 127 or c == "/" for c in name)
    )
    if bad:
        raise InputError(
            f"invalid host name {name!r}: it names files, so no '/', whitespace or control "
            "character, not '.' or '..', and no leading '-'",
            **where(hosts, name),
        )


def _empty_map(parent: SourceMap, key: str) -> SourceMap:
    empty = SourceMap()
    empty.source, empty.line, empty.key_lines = parent.source, parent.line_of(key), {}
    return empty


def _depths(groups: dict[str, _Group]) -> dict[str, int]:
    """Each group's depth below `all` (the longest path), which orders variable precedence."""
    depth = {"all": 0}
    frontier = ["all"]
    for _ in range(len(groups) + 1):
        next_frontier = []
        for name in frontier:
            for child in groups[name].children:
                if depth.get(child, -1) < depth[name] + 1:
                    depth[child] = depth[name] + 1
                    next_frontier.append(child)
        if not next_frontier:
            return depth
        frontier = next_frontier
    raise InputError("group children form a cycle")


def _membership(groups: dict[str, _Group]) -> dict[str, set[str]]:
    """For each host, every group it belongs to, directly or through a child group."""
    result: dict[str, set[str]] = {}

    def visit(group: str, ancestors: tuple[str, ...]) -> None:
        chain = (*ancestors, group)
        for host in groups[group].hosts:
            result.setdefault(host, set()).update(chain)
        for child in groups[group].children:
            visit(child, chain)

    visit("all", ())
    return result


def _vars_file(folder: Path, name: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    candidates = [folder / f"{name}.yml", folder / f"{name}.yaml"]
    if (folder / name).is_dir():
        candidates += sorted((folder / name).glob("*.y*ml"))
    for candidate in candidates:
        if candidate.is_file():
            data = load_yaml(candidate)
            if data is None:
                continue
            if not isinstance(data, dict):
                raise InputError("a vars file must be a mapping", source=str(candidate))
            merged.update(data)
    return merged


def _connection_spec(host: str, merged: dict[str, Any], inline: SourceMap) -> ConnectionSpec:
    values: dict[str, Any] = {}
    for key in merged:
        near = difflib.get_close_matches(str(key), CONNECTION_KEYS, n=1, cutoff=0.8)
        if key not in CONNECTION_KEYS and near:
            raise InputError(
                f"host '{host}': unknown key '{key}' (did you mean '{near[0]}'?)",
                **where(inline, key) if key in inline else {"source": inline.source},
            )
    for key, spec in CONNECTION_KEYS.items():
        value = merged.get(key, spec.default)
        if value is None:
            continue
        if isinstance(value, bool) and bool not in spec.types or not isinstance(value, spec.types):
            expected = " or ".join(t.__name__ for t in spec.types)
            raise InputError(
                f"host '{host}': '{key}' must be {expected}, got {value!r}",
                **where(inline, key) if key in inline else {"source": inline.source},
            )
        if spec.choices and value not in spec.choices:
            raise InputError(
                f"host '{host}': '{key}' must be one of {', '.join(spec.choices)}, got {value!r}",
                **where(inline, key) if key in inline else {"source": inline.source},
            )
        values[key] = value
    values.setdefault("address", host)
    return ConnectionSpec(**values)
