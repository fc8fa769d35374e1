#!/usr/bin/env bash
# GPU check, one command, no network: installs nvFuser from the local archive made by
# ../shared/tools/pack-nvfuser.sh (if present), runs the CUDA tests, and benchmarks eager, jit with
# nvFuser, jit with inductor, torch.compile and jit with torch codegen side by side (under 8
# minutes), writing the results into the folder given as the first argument.
#   bash scripts/gpu_check.sh OUTDIR
#   DRY_RUN=1 bash scripts/gpu_check.sh OUTDIR   # rehearsal on CPU: same benchmark code, tiny tensors
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUTDIR}
PY=${PY:-python3}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if [ "${DRY_RUN:-0}" = 1 ]; then
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 300 $PY benchmarks/run.py --only gpu --gpu-dry-run \
    --rounds 1 --out "$out" 2>&1 | tee "$out/gpu_benchmark.txt"
  status=${PIPESTATUS[0]}
  echo "dry run (CPU) exit $status; results in $out"
  exit "$status"
fi
{
  nvidia-smi || true
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  if [ -f .nvf/nvfuser.tar.xz ]; then
    tar xJf .nvf/nvfuser.tar.xz -C .nvf && export PYTHONPATH=$PWD/.nvf:$PWD:${PYTHONPATH:-}
  else
    export PYTHONPATH=$PWD:${PYTHONPATH:-}
  fi
  $PY -c "import torch
try:
    import nvfuser_direct as m; print('nvfuser_direct', m.__file__)
except Exception as e:
    print('nvFuser import failed:', type(e).__name__, e)
from thunderx.executors.inductor_exec import inductor_unavailable_reason
print('inductor:', inductor_unavailable_reason() or 'available')"
  $PY -m pip install -q --no-index --no-deps -e . 2>/dev/null || true
} 2>&1 | tee "$out/environment.txt"
timeout 200 $PY -m pytest -q tests/test_nvfuser.py tests/test_jit.py tests/test_inductor.py \
  -p no:cacheprovider -x 2>&1 | tee "$out/cuda_tests.txt"
timeout 240 $PY benchmarks/run.py --only gpu --rounds 5 --out "$out" 2>&1 | tee "$out/gpu_benchmark.txt"
echo "results in $out"
