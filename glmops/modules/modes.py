"""File modes as `chmod` reads them: octal ("0644") or symbolic ("u+x", "go-w", "a=rX,u+w").

Modules pass a symbolic mode to the host's chmod unchanged, and compare the mode it will give
with the file's current one through `resulting_mode`, which follows GNU chmod: clauses apply in
order, `X` is execute only for a directory or a file some class may already execute, and a
clause that names no class (`+x`) leaves the bits set in the umask alone.
"""

from __future__ import annotations

import re

OCTAL = re.compile(r"[0-7]{3,4}")
CLAUSE = re.compile(r"([ugoa]*)((?:[-+=](?:[ugo]|[rwxXst]*))+)")
ACTION = re.compile(r"([-+=])([ugo]|[rwxXst]*)")
#: Each class's rwx bits (shift) and special bit.
CLASSES = {"u": (6, 0o4000), "g": (3, 0o2000), "o": (0, 0o1000)}


def is_symbolic(spec: str) -> bool:
    return not OCTAL.fullmatch(spec)


def check_symbolic(spec: str) -> str:
    """`spec` when every comma-separated clause is chmod's `[ugoa]*([-+=]([rwxXst]*|[ugo]))+`."""
    if not spec or not all(CLAUSE.fullmatch(c) for c in spec.split(",")):
        raise ValueError(
            f"mode {spec!r} is neither an octal mode such as '0644' nor a symbolic one "
            "such as 'u+x' or 'go-w,a+rX'"
        )
    return spec


def needs_umask(spec: str) -> bool:
    """Whether a clause names no class, so that chmod consults the umask."""
    return is_symbolic(spec) and any(not c or c[0] not in "ugoa" for c in spec.split(","))


def resulting_mode(spec: str, current: int, is_dir: bool, umask: int = 0o022) -> int:
    """The mode (permission and special bits) that `chmod spec` gives a file now at `current`."""
    if not is_symbolic(spec):
        return int(spec, 8)
    mode = current & 0o7777
    for clause in spec.split(","):
        who, actions = CLAUSE.fullmatch(clause).groups()  # type: ignore[union-attr]
        classes = set(who.replace("a", "ugo")) or {"u", "g", "o"}
        mask = ~umask if not who else ~0
        for op, perms in ACTION.findall(actions):
            bits = _bits(perms, classes, mode, is_dir, bool(who)) & (mask | 0o7000)
            if op == "+":
                mode |= bits
            elif op == "-":
                mode &= ~bits
            else:
                mode = (mode & ~_cleared(classes, is_dir)) | bits
    return mode


def _bits(perms: str, classes: set[str], mode: int, is_dir: bool, named: bool) -> int:
    if perms in CLASSES:  # copy another class's rwx: g=u
        shift = CLASSES[perms][0]
        rwx = (mode >> shift) & 0o7
        return sum(rwx << CLASSES[c][0] for c in classes)
    rwx = sum({"r": 4, "w": 2, "x": 1}.get(p, 0) for p in perms)
    if "X" in perms and (is_dir or mode & 0o111):
        rwx |= 1
    bits = sum(rwx << CLASSES[c][0] for c in classes)
    if "s" in perms:
        bits |= sum(CLASSES[c][1] for c in classes if c in "ug")
    if "t" in perms and ("o" in classes or not named):
        bits |= 0o1000
    return bits


def _cleared(classes: set[str], is_dir: bool) -> int:
    """What `=` clears, umask or not: the classes' rwx and special bits (GNU chmod keeps a
    directory's set-id bits unless named)."""
    bits = sum(0o7 << CLASSES[c][0] for c in classes)
    specials = sum(CLASSES[c][1] for c in classes)
    return bits | (specials & 0o1000 if is_dir else specials)
