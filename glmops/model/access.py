"""SSH access for one fan-out run: how rsync reaches hosts, and a key that exists only for it.

The controller pushes with the inventory's own key and glmops' known_hosts. Hosts have no keys
to each other, so each run makes an ephemeral key: its private half goes to a root-only folder
under /run on each host (tmpfs: gone at reboot), its public half is authorized on each host only
for a read-only rsync of model_dir (`command="rrsync -ro <model_dir>",restrict`, and `from=` the
fleet's addresses). Both are removed when the run ends, and any left by a killed run are
removed at the start of the next.
"""

from __future__ import annotations

import io
import ipaddress
import uuid
from dataclasses import dataclass
from pathlib import Path

import paramiko

from glmops.engine.connection import quote
from glmops.engine.inventory import Host

MARKER = "glmops-fanout"
RUN_DIR = "/run/glmops-fanout"


@dataclass(frozen=True)
class RunKey:
    run_id: str
    private_pem: str
    public_line: str  # "<type> <base64>"

    @classmethod
    def generate(cls) -> RunKey:
        key = paramiko.ECDSAKey.generate(bits=256)
        out = io.StringIO()
        key.write_private_key(out)
        return cls(uuid.uuid4().hex[:12], out.getvalue(), f"{key.get_name()} {key.get_base64()}")

    @property
    def comment(self) -> str:
        return f"{MARKER}-{self.run_id}"

    def authorized_line(self, model_dir: str, fleet: list[str]) -> str:
        options = [f'command="rrsync -ro {model_dir}"', "restrict"]
        if fleet and all(_is_ip(a) for a in fleet):
            options.append(f'from="{",".join(fleet)}"')
        return f"{','.join(options)} {self.public_line} {self.comment}"

    def __repr__(self) -> str:  # never show the private key
        return f"RunKey(run_id={self.run_id!r})"


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def ssh_target(host: Host) -> tuple[str, str]:
    """(user@address or address, port) as OpenSSH wants them."""
    spec = host.connection
    user = f"{spec.user}@" if spec.user else ""
    return f"{user}{spec.address}", str(spec.port or 22)


def known_host_lines(known_hosts: Path, hosts: list[Host]) -> str:
    """The lines of glmops' known_hosts for these hosts (recorded when glmops connected)."""
    keys = paramiko.HostKeys()
    if known_hosts.exists():
        keys.load(str(known_hosts))
    lines = []
    for host in hosts:
        port = host.connection.port or 22
        name = host.connection.address if port == 22 else f"[{host.connection.address}]:{port}"
        for kind, key in (keys.lookup(name) or {}).items():
            lines.append(f"{name} {kind} {key.get_base64()}")
    return "".join(f"{line}\n" for line in lines)


def authorize_script(line: str) -> str:
    """Replace any fan-out line in the SSH user's authorized_keys with this run's (atomic)."""
    return (
        'umask 077; mkdir -p ~/.ssh; f=~/.ssh/authorized_keys; touch "$f"; '
        f'{{ grep -v {quote(MARKER + "-")} "$f"; printf \'%s\\n\' {quote(line)}; }} > "$f.glmops"'
        ' && chmod 600 "$f.glmops" && mv -f "$f.glmops" "$f"'
    )


def revoke_script() -> str:
    """Remove every fan-out line (this run's and any a killed run left)."""
    return (
        'f=~/.ssh/authorized_keys; [ -f "$f" ] || exit 0; '
        f'grep -q {quote(MARKER + "-")} "$f" || exit 0; '
        f'{{ grep -v {quote(MARKER + "-")} "$f" || true; }} > "$f.glmops"'
        ' && chmod 600 "$f.glmops" && mv -f "$f.glmops" "$f"'
    )


def ssh_command(key: str | None, known_hosts: str, port: str, jump: str | None = None) -> str:
    """The `rsync -e` value: batch mode, that key only (else ssh's defaults), strict host keys,
    short timeouts so a vanished peer is noticed within seconds."""
    identity = f"-i {quote(key)} -o IdentitiesOnly=yes " if key else ""
    via = f"-J {quote(jump)} " if jump else ""
    return (
        f"ssh {identity}{via}-p {port} -o BatchMode=yes "
        f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={quote(known_hosts)} "
        "-o ConnectTimeout=10 -o ServerAliveInterval=5 -o ServerAliveCountMax=3"
    )
