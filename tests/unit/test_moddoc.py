"""The module list in docs/playbooks.md is the one `glmops doc` prints, from the argument
tables."""

from __future__ import annotations

from pathlib import Path

from glmops.cli.moddoc import module_list, readme_with_list
from glmops.modules import REGISTRY

README = Path(__file__).resolve().parents[2] / "docs" / "playbooks.md"


def test_readme_module_list_matches_the_modules() -> None:
    text = README.read_text()
    assert readme_with_list(text) == text, (
        "docs/playbooks.md's module list is stale: "
        "run python3 -m glmops.cli.moddoc --write docs/playbooks.md"
    )
    for name in REGISTRY:
        assert f"- `{name}`:" in module_list()


def test_doc_says_each_sentence_once() -> None:
    from glmops.cli.moddoc import describe

    for name in REGISTRY:
        text = describe(name)
        first = " ".join(text.split("\n\n")[0].split())
        sentence = first.split(": ", 1)[1].split(". ")[0]
        assert " ".join(text.split()).count(sentence) == 1, text


def test_template_doc_gives_the_src_lookup_order() -> None:
    from glmops.cli.moddoc import describe

    text = " ".join(describe("template").split())
    assert "beside the playbook, then in the playbook's parent folder, then in glmops' own" in text
