#!/usr/bin/env bash
# The main job on the local testbed (no GPU needed): two hosts that simulate 8x RTX PRO 6000
# Blackwell (SM120, a SIMULATED nvidia-smi, testbed only), their facts, then `glmops provision`
# with the reason for every decision: driver plan, uv venv, and vLLM pushed from a wheelhouse
# (the hosts have no internet). A second provision shows that nothing changes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

vllm=0.33.0 uv=0.13.9 gguf=0.19.0
wheelhouse="${GLMOPS_WHEELHOUSE:-$HOME/.cache/glmops/wheelhouse/provision-vllm$vllm-cp311}"
if [ ! -e "$wheelhouse/.complete" ]; then
  mkdir -p "$wheelhouse"
  # vLLM itself without its dependencies (the testbed has no GPU to serve with), uv, and gguf.
  python3 -m pip download -q --only-binary=:all: -d "$wheelhouse" --no-deps "vllm==$vllm" "uv==$uv"
  python3 -m pip download -q --only-binary=:all: -d "$wheelhouse" "gguf==$gguf"
  touch "$wheelhouse/.complete"
fi

inventory=$(glmops testbed up -n 2 --gpu-profile rtx-pro-6000-x8)
export GLMOPS_INVENTORY="$inventory"
echo "testbed inventory: $inventory"
offline=(-e python_version=3.11 -e vllm_source=wheelhouse -e "vllm_wheelhouse=$wheelhouse"
         -e "vllm_version=$vllm" -e vllm_no_deps=true -e "uv_version=$uv")

glmops facts
glmops provision all --explain "${offline[@]}"
echo "== second run: nothing should change =="
glmops provision all "${offline[@]}"
