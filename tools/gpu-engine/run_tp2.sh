#!/usr/bin/env bash
# Device runner of issue 21: the deployment-settings e2e with tensor parallelism 2, offline Engine (off, on, fault)
# and then the launch_server route with the flag only (off, on). Needs the 2-GPU kind (nvidia-h200-x2).
# Test infrastructure, not part of the package.
#
#   run(kind="nvidia-h200-x2", carry=[".whl", ".stub"], command="bash tools/gpu-engine/run_tp2.sh")
#
# Each TP rank has its own scheduler process, pool and commit: the e2e reads every scheduler's status report
# and fails unless tp_size x pp_size of them show the layout in place and commits through our kernel
# (sglang_mamba_dedup/e2e/reports.py, expected_ranks). NVLink multicast stays off (the device's KINDS.md): the
# variables below are set again here because SGLang's processes are started with their own environment.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
n=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if [ "${n:-0}" -lt 2 ]; then
  echo "run_tp2.sh: this machine has ${n:-0} GPU(s); TP=2 needs 2 (device kind nvidia-h200-x2)"
  exit 2
fi
# the stand-in sgl_kernel has no custom all-reduce: NCCL does the all-reduce
E2E_SERVER_TOO=1 bash tools/gpu-engine/run_e2e.sh off,on,fault \
  --engine-arg tp_size=2 --engine-arg disable_custom_all_reduce=true "$@"
