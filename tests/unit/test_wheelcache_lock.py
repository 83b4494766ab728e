"""Two processes asking for the same wheelhouse at once: one downloads, the other waits for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A stand-in download that takes a while and counts itself in a file; the real one is pip.
CHILD = """
import sys, time
from pathlib import Path
from glmops.gpu import wheelcache

root, log = Path(sys.argv[1]), Path(sys.argv[2])

def slow_download(folder, requirements, debs):
    with open(log, "a") as f:
        f.write("download\\n")
    time.sleep(0.5)
    partial = folder.with_name(folder.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    (partial / ".complete").write_text("x")
    partial.rename(folder)
    return folder

wheelcache._download = slow_download
print(wheelcache.ensure("house", ["x"], root=root))
"""


def test_concurrent_callers_share_one_download(tmp_path: Path) -> None:
    log = tmp_path / "downloads"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path / "cache"), str(log)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=60)[0].strip() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0]
    assert outputs == [str(tmp_path / "cache" / "house")] * 3
    assert log.read_text() == "download\n"
