#!/usr/bin/env bash
# Serve Qwen3.5-0.8B with MTP speculative decoding (NEXTN: 3 steps, topk 1, 4 draft tokens) and the
# sglang-mamba-dedup plugin switched on. Needs a normal SGLang install (with its CUDA kernel package),
# this package installed (`pip install .` from a checkout), and the model (hub id or local path).
#
#   MODEL=/models/Qwen3.5-0.8B bash examples/launch_server.sh [more sglang options]
#
# Two equivalent switches: the environment variable (default here; every SGLang process inherits it) or
# SGLang's own command line with `--enable-mamba-conv-dedup` (DEDUP_VIA_FLAG=1). Use the environment
# variable with `--config` files. SGLANG_MAMBA_DEDUP=strict stops the launch when the plugin cannot engage.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen3.5-0.8B}
PORT=${PORT:-30000}

args=(
  --model-path "$MODEL"
  --speculative-algorithm NEXTN
  --speculative-num-steps 3
  --speculative-eagle-topk 1          # the dedup layout needs a linear draft chain (topk 1)
  --speculative-num-draft-tokens 4
  --speculative-draft-model-path "$MODEL"   # Qwen3.5 keeps its MTP layer in the same checkpoint
  --port "$PORT"
)
if [ "${DEDUP_VIA_FLAG:-0}" = "1" ]; then
  args+=(--enable-mamba-conv-dedup)
else
  export SGLANG_MAMBA_DEDUP=${SGLANG_MAMBA_DEDUP:-1}
fi
# Optional: each process then writes status-<pid>.json here (dedup layout, bytes, commit counts);
# the scheduler's file is the one that says whether the plugin engaged.
# export SGLANG_MAMBA_DEDUP_REPORT_DIR=/tmp/sglang-mamba-dedup-status

exec python -m sglang.launch_server "${args[@]}" "$@"

# Then, e.g.:
#   curl -s localhost:30000/generate -H 'Content-Type: application/json' \
#     -d '{"text": "The capital of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 32}}'
