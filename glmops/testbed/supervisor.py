"""Keeps one testbed host's systemd-nspawn running across guest reboots.

nspawn exits 133 when the guest reboots (systemd-nspawn@.service restarts on that code); with no
systemd on the machine, this detached process plays that role. Standalone (stdlib only) because
it is started by path and must outlive the process that ran `testbed up`.

usage: supervisor.py HOST_DIR -- systemd-nspawn ARGS...
HOST_DIR gets supervisor.pid, nspawn.pid (current nspawn), boots (count) and nspawn.log.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time

REBOOT_EXIT = 133


def _write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _log(logf, msg):
    logf.write(f"--- glmops testbed supervisor [{time.strftime('%H:%M:%S')}]: {msg}\n".encode())
    logf.flush()


def supervise(host_dir, argv):
    state: dict = {"stop": False, "child": None}

    def on_signal(signum, _frame):
        state["stop"] = True
        child = state["child"]
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)  # nspawn powers the guest off cleanly

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    boots = 0
    with open(os.path.join(host_dir, "nspawn.log"), "ab", buffering=0) as logf:
        while not state["stop"]:
            boots += 1
            _log(logf, f"starting nspawn (boot {boots})")
            child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT
            )
            state["child"] = child
            _write(os.path.join(host_dir, "nspawn.pid"), f"{child.pid}\n")
            _write(os.path.join(host_dir, "boots"), f"{boots}\n")
            if state["stop"]:
                child.send_signal(signal.SIGTERM)
            rc = child.wait()
            _log(logf, f"nspawn exited with {rc}")
            if rc != REBOOT_EXIT:
                break
            time.sleep(0.2)
        _log(logf, "supervisor exiting")
    for name in ("nspawn.pid", "supervisor.pid"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(host_dir, name))


def main():
    host_dir = sys.argv[1]
    argv = sys.argv[sys.argv.index("--") + 1 :]
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid:  # the launcher returns once the supervisor is detached; it is re-parented away
        os.close(ready_w)
        os.read(ready_r, 1)
        _write(os.path.join(host_dir, "supervisor.pid"), f"{pid}\n")
        os._exit(0)
    os.close(ready_r)
    os.setsid()
    os.chdir("/")
    os.write(ready_w, b"1")
    os.close(ready_w)
    supervise(host_dir, argv)


if __name__ == "__main__":
    main()
