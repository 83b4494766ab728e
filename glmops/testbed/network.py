"""Per-host network namespaces and veth links, and the optional NAT for registry access.

The machine has no systemd as PID 1, so nspawn's own --network-veth cannot be used: each host gets
a prepared namespace (netns tbN, veth vhN <-> vgN, 10.231.N.1 <-> 10.231.N.2) instead.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from glmops.testbed.errors import TestbedError

NAT_RULE = ["POSTROUTING", "-s", "10.231.0.0/16", "!", "-d", "10.231.0.0/16", "-j", "MASQUERADE"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise TestbedError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def netns_path(name: str) -> Path:
    return Path("/run/netns") / name


def link_exists(dev: str) -> bool:
    return _ip("link", "show", "dev", dev, check=False).returncode == 0


def remove(name: str, index: int) -> None:
    """Drop the namespace and both veth ends; tolerant of half-made or already-gone state."""
    if netns_path(name).exists():
        _ip("netns", "del", name, check=False)
    if link_exists(f"vh{index}"):
        _ip("link", "del", f"vh{index}", check=False)


def ensure(name: str, index: int) -> None:
    """Create netns `name` wired to the machine; leave a healthy one as it is."""
    host_dev, guest_dev = f"vh{index}", f"vg{index}"
    if netns_path(name).exists() and link_exists(host_dev) and _guest_ok(name, guest_dev, index):
        return
    remove(name, index)  # stale or partial state from a crashed run
    _ip("netns", "add", name)
    _ip("link", "add", host_dev, "type", "veth", "peer", "name", guest_dev)
    _ip("link", "set", guest_dev, "netns", name)
    _ip("addr", "add", f"10.231.{index}.1/24", "dev", host_dev)
    _ip("link", "set", host_dev, "up")
    _ip("-n", name, "addr", "add", f"10.231.{index}.2/24", "dev", guest_dev)
    _ip("-n", name, "link", "set", guest_dev, "up")
    _ip("-n", name, "link", "set", "lo", "up")


def _guest_ok(name: str, guest_dev: str, index: int) -> bool:
    out = _ip("-n", name, "-o", "addr", "show", "dev", guest_dev, check=False).stdout
    return f"10.231.{index}.2/24" in out


def set_default_route(name: str, index: int, enabled: bool) -> None:
    """Give (or take away) the host's route out through the machine."""
    if enabled:
        _ip("-n", name, "route", "replace", "default", "via", f"10.231.{index}.1")
    else:
        _ip("-n", name, "route", "del", "default", check=False)


def _iptables(op: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["iptables", "-t", "nat", op, *NAT_RULE], capture_output=True, text=True, check=False
    )


def nat_present() -> bool:
    return _iptables("-C").returncode == 0


def add_nat() -> str:
    """Enable forwarding + masquerade; return the previous ip_forward value to restore later."""
    fwd = Path("/proc/sys/net/ipv4/ip_forward")
    previous = fwd.read_text().strip()
    fwd.write_text("1\n")
    if not nat_present():
        proc = _iptables("-A")
        if proc.returncode != 0:
            raise TestbedError(f"adding the testbed NAT rule failed: {proc.stderr.strip()}")
    return previous


def remove_nat(previous_forward: str | None) -> None:
    while nat_present():
        if _iptables("-D").returncode != 0:
            break
    if previous_forward is not None:
        Path("/proc/sys/net/ipv4/ip_forward").write_text(previous_forward + "\n")
