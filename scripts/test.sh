#!/usr/bin/env bash
# The test command: set up, lint, type-check, then every test tier this machine can run.
# Unit tests always; testbed tests (real systemd + sshd hosts) as root; GPU tests skip without one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ruff check .
ruff format --check .
python3 -m mypy
python3 -m pytest "$@"
