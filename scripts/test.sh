#!/usr/bin/env bash
# The test command: set up, lint, type-check, then every test tier this machine can run.
# Unit tests always; testbed tests (real systemd + sshd hosts) as root; GPU tests skip without one.
#
# The testbed tier spends most of its time waiting (hosts booting, SSH, systemd), the other
# tiers mostly computing, so they run side by side: on CI's 2 cores the whole run then takes
# about as long as the testbed tier alone. Its output is kept and printed once it ends. Given
# test paths (`scripts/test.sh tests/unit/test_x.py`), one pytest runs just those.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ruff check .
ruff format --check .
python3 -m mypy

for arg in "$@"; do
    if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then
        exec python3 -m pytest "$@"
    fi
done

# The other tiers, named from pyproject's testpaths: `--ignore` does not apply to a path pytest
# is given to start from, and testpaths are such paths.
other_tiers=$(python3 -c 'import tomllib
paths = tomllib.load(open("pyproject.toml", "rb"))["tool"]["pytest"]["ini_options"]["testpaths"]
print(" ".join(p for p in paths if p != "tests/testbed"))')

testbed_log=$(mktemp /tmp/glmops-testbed-tier.XXXXXX)
python3 -m pytest tests/testbed --durations=15 "$@" >"$testbed_log" 2>&1 &
testbed_pid=$!
trap 'kill "$testbed_pid" 2>/dev/null || true' EXIT

set +e
# shellcheck disable=SC2086  # one word per tier folder
python3 -m pytest $other_tiers --durations=15 "$@"
others=$?
echo "--- the testbed tier, run alongside (its output follows once it ends) ---"
wait "$testbed_pid"
testbed=$?
set -e
trap - EXIT
cat "$testbed_log"
rm -f "$testbed_log"

echo "exit codes: testbed tier $testbed, other tiers $others"
# pytest's 5 (nothing collected) is not a failure for a tier this machine cannot run.
for code in "$testbed" "$others"; do
    if [[ "$code" -ne 0 && "$code" -ne 5 ]]; then
        exit "$code"
    fi
done
