"""The one place that picks a host's kind of connection: it knows every kind (connection.py's
local shell and Fabric, openssh.py's shared OpenSSH), which build on connection.py and so
cannot pick among themselves without an import circle."""

from __future__ import annotations

from glmops.engine.connection import (
    Connection,
    ConnectionSettings,
    LocalConnection,
    SSHConnection,
)
from glmops.engine.inventory import ConnectionSpec
from glmops.engine.openssh import OpenSSHConnection


def open_connection(host: str, spec: ConnectionSpec, settings: ConnectionSettings) -> Connection:
    """Connect to the host: a local shell, OpenSSH sharing its connection across runs (the
    host's `persist` seconds, glmops/engine/openssh.py), or Fabric for this run alone."""
    if spec.connection == "local":
        return LocalConnection(host)
    if spec.persist > 0:
        shared = OpenSSHConnection(host, spec, settings)
        shared.open()
        return shared
    conn = SSHConnection(host, spec, settings)
    conn.open()
    return conn
