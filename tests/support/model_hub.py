"""A Hub with a split GGUF model for `glmops up` on testbed hosts: olah (tests/support/
hub_server.py) serving a real split set and its base repo's config, the inventory that points
the hosts at it, and the CLI environment that reaches it."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from glmops.testbed import Testbed
from tests.support.hub_server import HubRepo, olah_server

#: The quantisation folder of the repo and the stem of its shards, as unsloth names them.
QUANT = "UD-Q4_K_XL"
STEM = f"GLM-5-{QUANT}"


@contextmanager
def split_gguf_hub(
    work: Path, source: Mapping[str, Any], base_files: Mapping[str, bytes], **split: Any
) -> Iterator[tuple[str, list[Path]]]:
    """olah (in `work/hub`) serving a split GGUF set written to `work/gguf` (`split`: the
    splitter's options) under `source["repo"]`, and `base_files` under its config repo;
    yields (endpoint, the shards). Needs the `gguf` package (a test extra)."""
    from tests.support.gguf_models import split_set

    first = split_set(work / "gguf", stem=STEM, **split)
    shards = sorted(first.parent.glob(f"{STEM}-*-of-*.gguf"))
    with olah_server(work / "hub") as (endpoint, mirrors):
        weights = HubRepo(mirrors, source["repo"])
        for shard in shards:
            weights.put(f"{QUANT}/{shard.name}", shard.read_bytes())
        weights.commit()
        base = HubRepo(mirrors, source["config"]["repo"])
        for name, data in base_files.items():
            base.put(name, data)
        base.commit()
        yield endpoint, shards


def hub_inventory(bed: Testbed, home: Path, source: Mapping[str, Any], **host_vars: Any) -> Path:
    """`home/hosts.yml`: the bed's hosts fetching `source` (a small disk margin), with
    `host_vars` (`model_dir`, ...) for every host."""
    doc = yaml.safe_load(bed.inventory_path.read_text())
    doc["all"]["vars"].update(
        model_source=dict(source),
        model_disk_margin_bytes=1_000_000,
        **host_vars,
    )
    path = home / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def hub_env(endpoint: str, home: Path) -> dict[str, str]:
    """The CLI's environment: the Hub at `endpoint`; glmops' home, model cache and run
    directories under `home`."""
    return {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "GLMOPS_HOME": str(home),
        "GLMOPS_MODEL_CACHE": str(home / "cache"),
        "GLMOPS_RUN_DIR": str(home / "runs"),
    }
