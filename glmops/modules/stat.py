"""stat: what a path on the host is (Ansible's `stat`), registered for later `when:`s."""

from __future__ import annotations

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.modules.base import Arg, Module, Plan, register

#: GNU stat's fields, in the order the probe prints them (one per line; the name last).
_FORMAT = "%F\\n%a\\n%s\\n%u\\n%g\\n%U\\n%G\\n%Y\\n%i\\n%h"
_KINDS = {
    "regular file": "isreg",
    "regular empty file": "isreg",
    "directory": "isdir",
    "symbolic link": "islnk",
    "fifo": "isfifo",
    "socket": "issock",
    "block special file": "isblk",
    "character special file": "ischr",
}


@register
class Stat(Module):
    """Look at `path` on the host without changing it, as Ansible's stat.

    `register:` holds `stat.exists`,
    `isdir`, `isreg`, `islnk`, `mode` ("0644"), `size`, `uid`, `gid`, `pw_name`, `gr_name`,
    `mtime` and, for a regular file, `checksum` (sha1, as Ansible's)."""

    name = "stat"
    result_defaults = {"stat": {"exists": False}}
    args = {
        "path": Arg(str, required=True, doc="the path on the host"),
        "follow": Arg(bool, default=False, doc="follow a symbolic link"),
        "get_checksum": Arg(bool, default=True, doc="sha1 of a regular file"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        path = self.params["path"]
        follow = "-L " if self.params["follow"] else ""
        probe = ctx.run(f"stat {follow}--printf {quote(_FORMAT)} -- {quote(path)}")
        if not probe.ok:
            return Plan(False, f"{path} does not exist", data={"stat": {"exists": False}})
        kind, mode, size, uid, gid, owner, group, mtime, inode, links = probe.stdout.splitlines()
        info = {
            "exists": True,
            "path": path,
            "mode": f"{int(mode, 8):04o}",
            "size": int(size),
            "uid": int(uid),
            "gid": int(gid),
            "pw_name": owner,
            "gr_name": group,
            "mtime": float(mtime),
            "inode": int(inode),
            "nlink": int(links),
            **{flag: _KINDS.get(kind) == flag for flag in set(_KINDS.values())},
        }
        if info["islnk"]:
            target = ctx.run(f"readlink -- {quote(path)}")
            info["lnk_source"] = info["lnk_target"] = target.stdout.rstrip("\n")
        if info["isreg"] and self.params["get_checksum"]:
            digest = ctx.run(f"sha1sum -- {quote(path)}", check=True, what=f"checksum {path}")
            info["checksum"] = digest.stdout.split()[0]
        return Plan(False, f"{path}: {kind}, mode {info['mode']}", data={"stat": info})
