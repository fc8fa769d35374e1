#!/usr/bin/env bash
# GPU check, one command, no network: installs nvFuser from the local archive made by
# ../shared/tools/pack-nvfuser.sh (if present), runs the CUDA tests, and benchmarks eager, jit with
# nvFuser, jit with inductor, torch.compile and jit with torch codegen side by side on memory-bound
# chains and a transformer layer's forward + backward (under 8 minutes), writing the results into
# the folder given as the first argument.
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
# Python packages the GPU machine lacks (optree), carried as wheels in .whl/ (see the device tool's
# README); set here, outside the logged block below (a pipeline runs in a subshell: exports made in it
# would not reach the tests and the benchmark)
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu_check_site .whl/*.whl &&
    export PYTHONPATH=/tmp/gpu_check_site:${PYTHONPATH:-}
fi
if [ -f .nvf/nvfuser.tar.xz ]; then
  tar xJf .nvf/nvfuser.tar.xz -C .nvf && export PYTHONPATH=$PWD/.nvf:$PWD:${PYTHONPATH:-}
else
  export PYTHONPATH=$PWD:${PYTHONPATH:-}
fi
{
  nvidia-smi || true
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  # offline: the build backend (setuptools) is the one already installed
  $PY -m pip install -q --no-index --no-deps --no-build-isolation -e . ||
    echo "editable install failed: thunderx.primitives will not import"
  $PY -c "import torch
try:
    import nvfuser_direct as m; print('nvfuser_direct', m.__file__)
except Exception as e:
    print('nvFuser import failed:', type(e).__name__, e)
from thunderx.executors.inductor_exec import inductor_unavailable_reason
print('inductor:', inductor_unavailable_reason() or 'available')"
} 2>&1 | tee "$out/environment.txt"
# tests/test_cuda.py: the transforms and every executor on CUDA tensors against torch.func
THUNDERX_HYPOTHESIS_PROFILE=ci timeout 240 $PY -m pytest -q -rs -p no:cacheprovider \
  tests/test_cuda.py tests/test_nvfuser.py tests/test_jit.py tests/test_inductor.py 2>&1 |
  tee "$out/cuda_tests.txt"
timeout 190 $PY benchmarks/run.py --only gpu --rounds 5 --out "$out" 2>&1 | tee "$out/gpu_benchmark.txt"
echo "results in $out"
