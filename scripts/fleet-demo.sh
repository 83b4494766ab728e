#!/usr/bin/env bash
# A fleet on the local testbed, no GPU needed: 3 replicas of vLLM's CPU build serving glmops'
# tiny model (tb1..tb3) behind vllm-router (tb4), brought up with `glmops provision`, the
# tiny-model playbook and `glmops deploy` (tests/support/fleet_bed.py writes the inventory);
# then a completion through the router, and a rolling redeploy (a changed unit environment, so
# every replica restarts, one at a time, out of the router while it does).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
demo="${GLMOPS_DEMO_DIR:-$HOME/.cache/glmops/fleet-demo}"
inventory=$(python3 -m tests.support.fleet_bed "$demo" | tail -1)
export GLMOPS_INVENTORY="$inventory"
router=$(python3 -c 'from glmops.testbed.inventory import host_address; print(host_address(4))')
curl -s "http://$router:30000/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "tiny-llama", "prompt": "Hello", "max_tokens": 5}'
echo
# the fleet's own unit environment plus a new variable: every replica's restart is pending
changed_env=$(python3 -c 'import json, time; from tests.support.fleet_bed import FLEET_VARS
print(json.dumps({"vllm_env": {**FLEET_VARS["vllm_env"], "FLEET_DEMO": str(int(time.time()))}}))')
glmops deploy --rolling -e "$changed_env"
echo "fleet inventory: $inventory ('glmops testbed down' takes the hosts down)"
