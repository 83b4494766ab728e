"""What of Ansible's playbook language glmops runs: one table, the source of `glmops doc
--ansible`, docs/ansible.md and the load-time refusals.

A feature glmops does not run is refused when the playbook loads, by name ("not supported by
glmops: X"), never guessed at with a did-you-mean and never ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from glmops.errors import InputError

DOCS = "docs/ansible.md (or `glmops doc --ansible`)"


@dataclass(frozen=True)
class Feature:
    name: str
    #: "supported", "partly" (with the difference) or "unsupported".
    status: str
    note: str = ""


FEATURES: tuple[Feature, ...] = (
    # task keywords and loops
    Feature(
        "loop, with_items, with_list, with_dict, with_indexed_items, with_fileglob", "supported"
    ),
    Feature("loop_control: loop_var, index_var, label", "supported"),
    Feature("loop_control: pause, extended, extended_allitems", "unsupported"),
    Feature(
        "with_nested, with_together, with_subelements, with_sequence, with_first_found, "
        "with_random_choice, with_lines",
        "unsupported",
        "use loop with the product/zip/subelements filters",
    ),
    Feature("when, changed_when, failed_when, until/retries/delay, register", "supported"),
    Feature("notify, handlers, listen", "supported"),
    Feature("ignore_errors, no_log, environment, vars, args, check_mode, run_once", "supported"),
    Feature("delegate_to, any_errors_fatal, serial, max_fail_percentage", "supported"),
    Feature("tags, --tags, --skip-tags, always, never", "supported"),
    Feature("become, become_user (templated too)", "supported", "through sudo or runuser"),
    Feature("become_method, become_flags, become_exe", "unsupported", "glmops uses sudo"),
    Feature("async, poll", "unsupported", "use a systemd unit for long work"),
    Feature("local_action, delegate_facts, throttle, debugger, action", "unsupported"),
    Feature("module_defaults, collections", "unsupported"),
    Feature("k=v arguments (`file: path=/x state=directory`)", "supported"),
    Feature("ansible.builtin.X and ansible.legacy.X module names", "supported"),
    # modules
    Feature(
        "modules: command, shell, copy, template, file, lineinfile, blockinfile, stat, debug, "
        "assert, fail, set_fact, apt, systemd, get_url, unarchive, wait_for, reboot, meta",
        "supported",
        "arguments outside `glmops doc MODULE` are refused at load",
    ),
    Feature("copy of a directory (src: dir/ or dir)", "supported"),
    Feature(
        "modules: user, group, service, pip, git, uri, cron, mount, package, yum, dnf, replace, "
        "apt_repository, apt_key, sysctl, hostname, find, fetch, slurp, synchronize, raw, script, "
        "setup, gather_facts, pause, add_host, group_by, authorized_key, "
        "known_hosts, tempfile, wait_for_connection, systemd_service, service_facts, "
        "package_facts, async_status",
        "unsupported",
        "glmops' own modules: `glmops doc`",
    ),
    # templating
    Feature("Jinja settings of the template module (trim_blocks)", "supported"),
    Feature(
        "filters: to_json, to_nice_json, to_yaml, to_nice_yaml, from_json, from_yaml, "
        "dict2items, items2dict, split, flatten, unique, difference, intersect, union, "
        "symmetric_difference, product, zip, zip_longest, random, hash, checksum, md5, sha1, "
        "password_hash, combine, extract, default, ternary, bool, regex_replace, regex_search, "
        "regex_findall, regex_escape, b64encode, b64decode, basename, dirname, expanduser, "
        "splitext, quote, mandatory, type_debug, and Jinja's own",
        "supported",
        "password_hash: sha512 and sha256 only",
    ),
    Feature(
        "tests: failed, changed, succeeded, success, skipped, version, version_compare, match, "
        "search, regex, contains, subset, superset, truthy, falsy, exists, file, directory, link",
        "supported",
    ),
    Feature("lookup/query: env, file, template, pipe, fileglob, vars; omit", "supported"),
    Feature("other lookups (password, url, first_found, ...)", "unsupported"),
    Feature("filters and tests in template files checked when the playbook loads", "supported"),
    # variables, inventory, facts
    Feature("vars, vars_files, -e k=v / JSON / @file", "supported"),
    Feature(
        "ansible_host, ansible_port, ansible_user, ansible_connection, "
        "ansible_ssh_private_key_file, ansible_become",
        "supported",
        "mapped to glmops' address, port, user, connection, key_file, become",
    ),
    Feature("ansible_password, ansible_become_password, ansible_python_interpreter", "unsupported"),
    Feature(
        "facts: ansible_hostname, ansible_kernel, ansible_facts[...] and a few more",
        "partly",
        "only the facts glmops gathers (`glmops facts`); the others are undefined",
    ),
    Feature("INI inventory, -i host1,host2, , -u, -c local|ssh, -b/--become", "supported"),
    Feature("dynamic inventory scripts and plugins", "unsupported"),
    # play structure and output
    Feature(
        "block/rescue/always (ansible_failed_task, ansible_failed_result), include_tasks, "
        "import_tasks, include_vars, include_role, import_role, roles (tasks, handlers, "
        "templates, files, defaults, vars, meta dependencies), pre_tasks, post_tasks, "
        "import_playbook, --start-at-task, --force-handlers, meta: flush_handlers",
        "partly",
        "refused by name: include_tasks' apply, templated import_tasks or role names, "
        "vars_from/defaults_from/handlers_from, blocks or includes in handlers, the old include",
    ),
    Feature("play keyword connection (local, ssh)", "supported"),
    Feature("play keywords: remote_user, strategy, order, vars_prompt", "unsupported"),
    Feature("check mode (--check), --diff", "supported"),
    Feature(
        "recap",
        "supported",
        "ok counts changed tasks too, as Ansible's does",
    ),
    Feature("one line per loop item, with loop_control.label", "supported"),
)

#: Ansible task keywords glmops refuses by name (they would change what a task does).
UNSUPPORTED_TASK_KEYS = frozenset(
    {
        "async",
        "poll",
        "local_action",
        "delegate_facts",
        "throttle",
        "debugger",
        "module_defaults",
        "collections",
        "become_method",
        "become_flags",
        "become_exe",
        "connection",
        "remote_user",
        "action",
        "include",
        "with_nested",
        "with_together",
        "with_subelements",
        "with_sequence",
        "with_first_found",
        "with_random_choice",
        "with_lines",
        "with_cartesian",
        "with_inventory_hostnames",
    }
)

#: Ansible's builtin modules that glmops has no module for.
UNSUPPORTED_MODULES = frozenset(
    {
        "user", "group", "service", "pip", "git", "uri", "cron", "mount", "package", "yum",
        "dnf", "replace", "apt_repository", "apt_key", "sysctl", "hostname", "find", "fetch",
        "slurp", "synchronize", "raw", "script", "setup", "gather_facts",
        "pause", "add_host", "group_by", "authorized_key", "known_hosts", "tempfile",
        "wait_for_connection", "systemd_service", "service_facts", "package_facts",
        "async_status", "iptables", "getent", "expect", "deb822_repository", "dpkg_selections",
        "debconf", "validate_argument_spec", "ping",
    }
)  # fmt: skip

#: Ansible play keywords glmops refuses by name.
UNSUPPORTED_PLAY_KEYS = frozenset(
    {
        "remote_user",
        "strategy",
        "order",
        "vars_prompt",
        "module_defaults",
        "collections",
        "become_method",
        "ignore_unreachable",
        "throttle",
        "port",
    }
)


def refusal(what: str) -> str:
    return f"not supported by glmops: {what} (see {DOCS})"


def refuse_task_keys(raw: Any, known: set[str] | frozenset[str]) -> None:
    """Refuse, at load, the first key of a task that is an Ansible feature glmops lacks."""
    from glmops.engine.ansible_args import module_name
    from glmops.engine.yamlsrc import where

    for key in raw:
        if key in known:
            continue
        name = module_name(str(key))
        if key in UNSUPPORTED_TASK_KEYS:
            raise InputError(refusal(f"the task keyword '{key}'"), **where(raw, key))
        if name in UNSUPPORTED_MODULES or str(key).startswith("ansible."):
            raise InputError(refusal(f"the module '{key}'"), **where(raw, key))
        if "." in str(key):  # a collection's module (community.general.x)
            raise InputError(refusal(f"the collection module '{key}'"), **where(raw, key))


def refuse_play_key(raw: Any, key: str) -> None:
    from glmops.engine.yamlsrc import where

    if key in UNSUPPORTED_PLAY_KEYS:
        raise InputError(refusal(f"the play keyword '{key}'"), **where(raw, key))


_STATUS_TITLES = {
    "supported": "Supported",
    "partly": "Partly supported (with the difference)",
    "unsupported": "Not supported (refused when the playbook loads)",
}


def support_table() -> str:
    """The Markdown tables of docs/ansible.md and `glmops doc --ansible`."""
    lines: list[str] = []
    for status, title in _STATUS_TITLES.items():
        lines += [f"### {title}", "", "| feature | note |", "|---|---|"]
        lines += [f"| {f.name} | {f.note} |" for f in FEATURES if f.status == status]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
