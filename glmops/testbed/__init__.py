"""Local testbed of real hosts: Debian rootfs booted by systemd-nspawn, real sshd, own netns.

Used by `glmops testbed up|down|status` and by the integration-test fixtures. It may import the
engine (connection helpers), glmops.gpu and the ground floor; nothing above them.
"""

from glmops.testbed.core import APT_PACKAGES, Testbed, preflight
from glmops.testbed.errors import TestbedError
from glmops.testbed.hosts import HostStatus
from glmops.testbed.profiles import GPU_PROFILES, GpuProfile

__all__ = [
    "APT_PACKAGES",
    "GPU_PROFILES",
    "GpuProfile",
    "HostStatus",
    "Testbed",
    "TestbedError",
    "preflight",
]
