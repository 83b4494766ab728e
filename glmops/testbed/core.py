"""The Testbed: N real systemd+sshd hosts on this machine (see shared/notes/testbed-recipe.md)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from glmops.engine.knownhosts import default_known_hosts, replace_host_keys
from glmops.testbed import hosts, inventory, network, procs, rootfs
from glmops.testbed.errors import TestbedError
from glmops.testbed.hosts import HostDir, HostStatus
from glmops.testbed.profiles import get_profile

DEFAULT_STATE_DIR = Path("/var/lib/glmops-testbed")
KEY_NAME = "id_ed25519"
TOOLS = {  # command -> Debian package that provides it
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "ip": "iproute2",
    "iptables": "iptables",
    "ssh-keygen": "openssh-client",
    "nsenter": "util-linux",
}
APT_PACKAGES = "debootstrap systemd-container iproute2 iptables openssh-client"
LAST_INDEX = 254  # 10.231.N.0/24 per host


def preflight() -> None:
    """Fail early with the fix, rather than halfway through building hosts."""
    if os.geteuid() != 0:
        raise TestbedError(
            "the testbed needs root (network namespaces, systemd-nspawn); "
            "run as root, e.g. sudo glmops testbed up"
        )
    missing = [f"{t} (package {p})" for t, p in TOOLS.items() if shutil.which(t) is None]
    if missing:
        raise TestbedError(
            "testbed tools missing: "
            + ", ".join(missing)
            + f"; install with: apt-get install -y {APT_PACKAGES}"
        )


#: Kernel limits each booted host needs a share of: systemd in a container holds inotify
#: instances and watches (the stock 128 instances per user run out near 15 hosts with "Too many
#: open files"). `up` raises each to floor + per_host * n (room for another testbed beside this
#: one); where it cannot, it refuses only when the limit is below `least` * n, what n hosts use.
INOTIFY = {  # name: (floor, per_host, least per host)
    "fs/inotify/max_user_instances": (1024, 32, 8),
    "fs/inotify/max_user_watches": (524288, 16384, 2048),
}
SYSCTL_ROOT = Path("/proc/sys")


def inotify_needs(n: int, current: dict[str, int]) -> dict[str, int]:
    """The limits to raise for n hosts (name -> new value); those already high enough stay."""
    wanted = {name: floor + per_host * n for name, (floor, per_host, _) in INOTIFY.items()}
    return {name: value for name, value in wanted.items() if current.get(name, 0) < value}


def ensure_inotify(n: int, root: Path = SYSCTL_ROOT) -> None:
    """Raise the inotify limits n hosts need, or refuse up front with the sysctl to run."""
    current = {}
    for name in INOTIFY:
        try:
            current[name] = int((root / name).read_text())
        except (OSError, ValueError):
            current[name] = 0
    failed = raise_limits(n, current, lambda name, value: (root / name).write_text(f"{value}\n"))
    if failed:
        raise TestbedError(
            f"{n} testbed hosts need higher inotify limits than this kernel allows glmops to set "
            f"(systemd in the hosts would fail with 'Too many open files'); run: sysctl -w "
            + " ".join(failed)
        )


def raise_limits(n: int, current: dict[str, int], write: Callable[[str, int], object]) -> list[str]:
    """Write each limit n hosts want; returns `name=value` for those that could not be set
    and are below what n hosts use (the ones to refuse over)."""
    failed = []
    for name, value in inotify_needs(n, current).items():
        try:
            write(name, value)
        except OSError:
            if current.get(name, 0) < INOTIFY[name][2] * n:
                failed.append(f"{name.replace('/', '.')}={value}")
    return failed


class Testbed:
    """Local systemd-nspawn hosts reachable over real SSH, with an inventory for them."""

    __test__ = False

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        first_index: int = 1,
        log=None,
        known_hosts: Path | None = None,
    ) -> None:
        """first_index: hosts are tb<first_index>.. (10.231.<i>.2); a second testbed on the
        same machine (e.g. the testbed's own tests) picks a range that does not collide."""
        env = os.environ.get("GLMOPS_TESTBED_DIR")
        self.state_dir = Path(state_dir or env or DEFAULT_STATE_DIR)
        self.first_index = first_index
        self.known_hosts = known_hosts or default_known_hosts()
        self._log = log or (lambda msg: print(msg, file=sys.stderr))

    # -- paths ------------------------------------------------------------------------------
    @property
    def key_path(self) -> Path:
        return self.state_dir / KEY_NAME

    @property
    def inventory_path(self) -> Path:
        return self.state_dir / "inventory" / "hosts.yml"

    def _hd(self, index: int) -> HostDir:
        return HostDir(self.state_dir / "hosts" / f"tb{index}", f"tb{index}", index)

    def _host_dirs(self) -> list[HostDir]:
        root = self.state_dir / "hosts"
        found = (
            [int(p.name[2:]) for p in root.glob("tb*") if p.name[2:].isdigit()]
            if root.is_dir()
            else []
        )
        return [self._hd(i) for i in sorted(found)]

    def _meta(self) -> dict:
        try:
            return json.loads((self.state_dir / "testbed.json").read_text())
        except (OSError, ValueError):
            return {}

    def _save_meta(self, meta: dict) -> None:
        (self.state_dir / "testbed.json").write_text(json.dumps(meta, indent=2) + "\n")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One up/down at a time per state dir (pytest-xdist workers, CLI and fixtures)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _ensure_key(self) -> bytes:
        if not self.key_path.exists():
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "glmops-testbed",
                    "-f",
                    str(self.key_path),
                ],
                check=True,
                stdin=subprocess.DEVNULL,
            )
        return self.key_path.with_suffix(".pub").read_bytes()

    # -- lifecycle ---------------------------------------------------------------------------
    def up(
        self,
        n: int = 2,
        gpu_profile: str | None = None,
        *,
        internet: bool = False,
        timeout: float = 120.0,
    ) -> Path:
        """Converge to hosts tb1..tbN (running ones stay up), write the inventory, return it."""
        first = self.first_index
        if n < 1 or not 1 <= first <= first + n - 1 <= LAST_INDEX:
            raise TestbedError(
                f"cannot make {n} hosts from tb{first}: indexes stop at {LAST_INDEX}"
            )
        profile = get_profile(gpu_profile) if gpu_profile else None
        preflight()
        ensure_inotify(n)
        with self._locked():
            base = rootfs.ensure_base(self._log)
            pubkey = self._ensure_key()
            meta = self._meta()
            wanted = range(first, first + n)
            for hd in self._host_dirs():
                if hd.index not in wanted:
                    self._log(f"testbed: removing {hd.name} (asked for {n} hosts)")
                    self._destroy(hd)
            self._converge_nat(meta, internet)
            self._save_meta(meta)
            online: list[HostDir] = []
            for i in wanted:
                hd = self._hd(i)
                pjson = profile.to_json(hd.name) if profile else None
                if hd.supervisor_pid() is not None:
                    if hd.recorded_profile() != gpu_profile:
                        online.append(hd)
                else:
                    self._boot_new(hd, base, pubkey, pjson, internet)
                hd.profile_file.write_text((gpu_profile or "") + "\n")
                network.set_default_route(hd.name, i, internet)
            all_hosts = [self._hd(i) for i in wanted]
            hosts.wait_ssh([(hd, inventory.host_address(hd.index)) for hd in all_hosts], timeout)
            for hd in online:
                self._install_profile_online(hd, profile.to_json(hd.name) if profile else None)
            meta.update(
                n=n, first_index=first, gpu_profile=gpu_profile, internet=internet, base=str(base)
            )
            self._save_meta(meta)
            text = inventory.render(
                [(hd.name, inventory.host_address(hd.index), gpu_profile) for hd in all_hosts],
                self.key_path,
            )
            return inventory.write(self.inventory_path, text)

    def _boot_new(
        self, hd: HostDir, base: Path, pubkey: bytes, pjson: str | None, internet: bool
    ) -> None:
        """(Re)start a host that is not running, cleaning up whatever a crashed run left."""
        others = hosts.foreign_nspawns(hd)
        if others:
            raise TestbedError(
                f"testbed host name {hd.name} is in use by another testbed (nspawn pid "
                f"{others[0]}: {' '.join(procs.cmdline(others[0]))[:200]}); run `down` for "
                "that state dir, or use another first_index"
            )
        hosts.stop(hd)
        network.remove(hd.name, hd.index)
        try:
            same_base = hd.base_file.read_text().strip() == str(base)
        except OSError:
            same_base = False
        if not same_base:  # an upper layer only makes sense over the base it was made on
            hosts.wipe(hd)
        hd.root.mkdir(parents=True, exist_ok=True)
        hd.base_file.write_text(f"{base}\n")
        network.ensure(hd.name, hd.index)
        hosts.prepare_upper(hd, base, pubkey)
        hosts.install_profile_offline(hd, base, pjson)
        if internet:
            shutil.copyfile("/etc/resolv.conf", hd.upper / "etc" / "resolv.conf")
        address = inventory.host_address(hd.index)
        self._log(f"testbed: starting {hd.name} at {address}")
        hosts.start(hd, base)
        # A fresh host has fresh host keys, which this testbed made: record them in glmops'
        # known_hosts in place of any from an earlier host at this address.
        keys = [p.read_text() for p in sorted((hd.upper / "etc" / "ssh").glob("ssh_host_*.pub"))]
        replace_host_keys(self.known_hosts, address, keys)

    def _install_profile_online(self, hd: HostDir, pjson: str | None) -> None:
        """Change the simulated GPUs of a running host without rebooting it."""
        script = (
            f"rm -f /{hosts.SIMULATOR_DST} /{hosts.PROFILE_DST} /{hosts.NVIDIA_SMI_LINK}"
            "; rmdir /usr/local/lib/glmops-testbed /etc/glmops-testbed 2>/dev/null; true"
        )
        self._check(hd.name, ["sh", "-c", script])
        if pjson is None:
            return
        write = 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"'
        for rel, (data, mode) in hosts.profile_files(pjson).items():
            self._check(hd.name, ["sh", "-c", write, "sh", "/" + rel, f"{mode:o}"], input=data)
        self._check(hd.name, ["ln", "-sfn", "/" + hosts.SIMULATOR_DST, "/" + hosts.NVIDIA_SMI_LINK])

    def _converge_nat(self, meta: dict, internet: bool) -> None:
        if internet and not meta.get("nat"):
            meta["ip_forward_prev"] = network.add_nat()
            meta["nat"] = True
        elif internet:
            network.add_nat()  # re-add if someone flushed the rule; keeps the first saved value
        elif meta.get("nat"):
            network.remove_nat(meta.pop("ip_forward_prev", None))
            meta["nat"] = False

    def _destroy(self, hd: HostDir) -> None:
        hosts.stop(hd)
        self._remove(hd)

    def _remove(self, hd: HostDir) -> None:
        """A stopped host's network and files."""
        network.remove(hd.name, hd.index)
        hosts.wipe(hd)

    def down(self) -> None:
        """Stop every host and remove what `up` made, except the key and the cached base."""
        if not self.state_dir.exists():
            return
        preflight()
        with self._locked():
            running = self._host_dirs()
            self._log(f"testbed: stopping {', '.join(hd.name for hd in running) or 'no host'}")
            hosts.stop_all(running)
            # A served host's upper layer holds GBs (wheelhouse, uv cache, venv): removing them
            # side by side overlaps the file system's waits instead of adding them up.
            with ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
                list(pool.map(self._remove, running))
            meta = self._meta()
            if meta.get("nat"):
                network.remove_nat(meta.get("ip_forward_prev"))
            (self.state_dir / "testbed.json").unlink(missing_ok=True)
            self.inventory_path.unlink(missing_ok=True)

    # -- inspection and helpers ----------------------------------------------------------------
    def status(self) -> list[HostStatus]:
        return [self._status(hd) for hd in self._host_dirs()]

    def _status(self, hd: HostDir) -> HostStatus:
        sup, init = hd.supervisor_pid(), hd.init_pid()
        address = inventory.host_address(hd.index)
        running = sup is not None and init is not None
        return HostStatus(
            hd.name,
            address,
            sup,
            running,
            running and hosts.ssh_banner(address),
            hd.recorded_profile(),
            init,
            hd.log,
        )

    def _by_name(self, name: str) -> HostDir:
        for hd in self._host_dirs():
            if hd.name == name:
                return hd
        raise TestbedError(f"no testbed host {name!r} in {self.state_dir}")

    def host(self, name: str) -> HostStatus:
        return self._status(self._by_name(name))

    def exec(
        self,
        name: str,
        argv: list[str],
        *,
        input: str | bytes | None = None,
        timeout: float | None = None,
        text: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run argv inside host `name` via nsenter (no SSH), to read its state independently."""
        if isinstance(input, bytes):
            text = False
        return hosts.run_inside(self._by_name(name), argv, input=input, timeout=timeout, text=text)

    def _check(self, name: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        proc = self.exec(name, argv, **kw)
        if proc.returncode != 0:
            raise TestbedError(f"{name}: {argv[0]} failed ({proc.returncode}): {proc.stderr!r}")
        return proc

    def wait_ready(self, names: list[str] | None = None, timeout: float = 120.0) -> None:
        """Block until the named hosts' sshd answers (all hosts by default)."""
        hds = [self._by_name(n) for n in names] if names else self._host_dirs()
        hosts.wait_ssh([(hd, inventory.host_address(hd.index)) for hd in hds], timeout)

    def regenerate_host_keys(self, name: str) -> None:
        """New SSH host keys for one running host, sshd restarted: a 'changed host key'."""
        script = "rm -f /etc/ssh/ssh_host_*_key* && ssh-keygen -A && systemctl restart ssh"
        self._check(name, ["sh", "-c", script], timeout=60)
        self.wait_ready([name], timeout=60)

    def boot_id(self, name: str) -> str:
        return self._check(name, ["cat", "/proc/sys/kernel/random/boot_id"]).stdout.strip()

    def reboot(self, name: str, timeout: float = 120.0) -> str:
        """Reboot a host from inside and wait until it is back; return its new boot id."""
        old = self.boot_id(name)
        self.exec(name, ["systemctl", "reboot"], timeout=30)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hd = self._by_name(name)
            if hd.init_pid() is not None:
                try:
                    new = self.boot_id(name)
                except TestbedError:
                    new = old
                if new != old and hosts.ssh_banner(inventory.host_address(hd.index)):
                    return new
            time.sleep(0.3)
        raise TestbedError(
            f"testbed host {name} did not come back from reboot within "
            f"{timeout:.0f}s; see {self._by_name(name).log}"
        )
