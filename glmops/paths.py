"""Where glmops finds the files it ships beside its code: playbooks, templates, the Triton
kernels (backend/) and the host checks (tests/host/).

In a checkout they are top-level folders next to the package; an installed wheel carries them
as package data under `glmops/_shipped/` (setup.py copies them in at build time). This module
is the one place that knows both.
"""

from __future__ import annotations

from pathlib import Path

from glmops.errors import GlmopsError

PACKAGE = Path(__file__).resolve().parent
#: Folder names, relative to the checkout and to `_shipped/` alike.
SHIPPED = ("playbooks", "templates", "backend", "tests/host")


def root() -> Path:
    """The folder that holds playbooks/, templates/, backend/ and tests/host/."""
    for candidate in (PACKAGE / "_shipped", PACKAGE.parent):
        if (candidate / "playbooks").is_dir() and (candidate / "templates").is_dir():
            return candidate
    raise GlmopsError(
        f"glmops' playbooks and templates are missing (looked in {PACKAGE / '_shipped'} and "
        f"{PACKAGE.parent}); reinstall glmops from a wheel or run it from a checkout"
    )


def playbooks() -> Path:
    return root() / "playbooks"


def templates() -> Path:
    return root() / "templates"


def backend() -> Path:
    return root() / "backend"


def host_checks() -> Path:
    return root() / "tests" / "host"
