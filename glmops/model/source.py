"""Where the model's files come from: Hugging Face repos, pinned revisions, include patterns.

Declared in the inventory (`model_source`, usually on a group) and read once per run on the
controller. GLM-5: the GGUF shards from `unsloth/GLM-5-GGUF` (`UD-Q4_K_XL/*`) plus the config
and tokenizer files of the base repo `zai-org/GLM-5`, which vLLM reads beside a GGUF.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from glmops.errors import InputError
from glmops.pins import DEFAULT_MODEL_DIR

#: Files of the base model's repo that vLLM needs beside a GGUF (config and tokenizer).
DEFAULT_CONFIG_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: The folder of model_dir each part lands in: deploy's gguf_shards and glm5_hf_config_dir.
PARTS = ("weights", "config")


@dataclass(frozen=True)
class RepoSpec:
    """One Hub repo at one revision, narrowed by glob patterns (huggingface_hub's syntax)."""

    part: str  # "weights" or "config": the folder under model_dir
    repo: str
    revision: str  # as declared: a commit sha, a branch or a tag
    include: tuple[str, ...]
    optional: bool = False  # config files that a repo may lack (e.g. chat_template.jinja)

    @property
    def pinned(self) -> bool:
        return bool(COMMIT.match(self.revision))


@dataclass(frozen=True)
class ModelSource:
    repos: tuple[RepoSpec, ...]

    @property
    def key(self) -> str:
        """Names the controller's cache of this source: same declaration, same cache."""
        text = json.dumps([[r.part, r.repo, r.revision, list(r.include)] for r in self.repos])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_source(value: Any, where: str) -> ModelSource:
    """`model_source` from the inventory; an InputError names `where` and the bad key."""
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: model_source must be a mapping with repo, revision, include")
    unknown = set(value) - {"repo", "revision", "include", "config"}
    if unknown:
        raise InputError(f"{where}: model_source has unknown key(s) {', '.join(sorted(unknown))}")
    weights = _repo_spec("weights", value, f"{where}: model_source", required_include=True)
    repos = [weights]
    config = value.get("config")
    if config is not None:
        if not isinstance(config, Mapping):
            raise InputError(f"{where}: model_source.config must be a mapping (repo, revision)")
        repos.append(_repo_spec("config", config, f"{where}: model_source.config"))
    return ModelSource(tuple(repos))


def _repo_spec(
    part: str, value: Mapping[str, Any], where: str, *, required_include: bool = False
) -> RepoSpec:
    repo = value.get("repo")
    if not isinstance(repo, str) or not REPO_ID.match(repo):
        raise InputError(f"{where}.repo must be a Hub repo id like org/name, not {repo!r}")
    revision = value.get("revision", "main")
    if not isinstance(revision, str) or not revision or revision.startswith("-"):
        raise InputError(f"{where}.revision must be a commit sha, branch or tag")
    include = value.get("include")
    if include is None and not required_include:
        return RepoSpec(part, repo, revision, DEFAULT_CONFIG_FILES, optional=True)
    if isinstance(include, str):
        include = [include]
    if not include or not all(isinstance(p, str) and p for p in include):
        raise InputError(f"{where}.include must be a non-empty list of glob patterns")
    return RepoSpec(part, repo, revision, tuple(include))


SAFE_PATH = re.compile(r"/[A-Za-z0-9._/-]*")


def model_dir(variables: Mapping[str, Any]) -> str:
    """The host's model folder: files land in <model_dir>/weights/... and <model_dir>/config/."""
    path = str(variables.get("model_dir") or DEFAULT_MODEL_DIR).rstrip("/")
    # It is written into an authorized_keys command (rrsync's folder): plain path characters only.
    if not SAFE_PATH.fullmatch(path) or "/../" in f"{path}/":
        raise InputError(
            f"model_dir must be an absolute path of letters, digits and . _ - / without '..', "
            f"not {path!r}"
        )
    return path
