"""vLLM patch set for GLM-5 sparse MLA on GPUs upstream does not cover: feature-based layout
profiles, one module per patch item, and a pure planner the engine feeds with files READ from
the host and whose FileChanges the host helper applies."""

from .common import TEMPLATE_VERSION, FileChange, PatchError, unified_diff
from .plan import ITEMS, payload, plan_patchset
from .profiles import ANCHOR_FILES, PROFILES, Profile, UnsupportedLayout, detect_profile

__all__ = [
    "ANCHOR_FILES",
    "ITEMS",
    "PROFILES",
    "TEMPLATE_VERSION",
    "FileChange",
    "PatchError",
    "Profile",
    "UnsupportedLayout",
    "detect_profile",
    "payload",
    "plan_patchset",
    "unified_diff",
]
