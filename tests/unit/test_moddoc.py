"""README's module list is the one `glmops doc` prints, generated from the argument tables."""

from __future__ import annotations

from pathlib import Path

from glmops.moddoc import module_list, readme_with_list
from glmops.modules import REGISTRY

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_module_list_matches_the_modules() -> None:
    text = README.read_text()
    assert readme_with_list(text) == text, (
        "README's module list is stale: run python3 -m glmops.moddoc --write README.md"
    )
    for name in REGISTRY:
        assert f"- `{name}`:" in module_list()
