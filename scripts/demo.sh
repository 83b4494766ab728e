#!/usr/bin/env bash
# The main job on the local testbed: two hosts that simulate 8x RTX PRO 6000 Blackwell (SM120),
# their facts, and the provisioning plan with the reason for every decision.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
inventory=$(glmops testbed up -n 2 --gpu-profile rtx-pro-6000-x8)
export GLMOPS_INVENTORY="$inventory"
echo "testbed inventory: $inventory"
glmops facts
glmops provision all --explain
