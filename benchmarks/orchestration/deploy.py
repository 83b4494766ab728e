"""The benchmark's deploy for pyinfra: the same four steps as play.yml (the handler is the
restart that runs when the unit changed)."""

from io import StringIO

from pyinfra.operations import files, systemd

TOOL, GREETING = "pyinfra", "hello"

files.directory(name="directory", path=f"/opt/bench-{TOOL}", mode="755")
files.put(
    name="file",
    src=StringIO(f"greeting={GREETING}\n"),
    dest=f"/opt/bench-{TOOL}/app.conf",
    mode="644",
)
unit = files.template(
    name="unit",
    src="bench.service.j2",
    dest=f"/etc/systemd/system/bench-{TOOL}.service",
    mode="644",
    tool=TOOL,
    greeting=GREETING,
)
systemd.service(
    name="service",
    service=f"bench-{TOOL}",
    running=True,
    enabled=True,
)
systemd.service(
    name="restart",
    service=f"bench-{TOOL}",
    restarted=True,
    daemon_reload=True,
    _if=unit.did_change,
)
