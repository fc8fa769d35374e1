#!/usr/bin/env bash
# GPU check, one command, no network: installs nvFuser from the local archive made by
# ../shared/tools/pack-nvfuser.sh (if present), runs the CUDA tests and the GPU benchmark, and writes
# the results into the folder given as the first argument.
#   bash scripts/gpu_check.sh OUTDIR
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
{
  nvidia-smi || true
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  if [ -f .nvf/nvfuser.tar.xz ]; then
    tar xJf .nvf/nvfuser.tar.xz -C .nvf && export PYTHONPATH=$PWD/.nvf:$PWD:${PYTHONPATH:-}
  else
    export PYTHONPATH=$PWD:${PYTHONPATH:-}
  fi
  python3 -c "import torch
try:
    import nvfuser_direct as m; print('nvfuser_direct', m.__file__)
except Exception as e:
    print('nvFuser import failed:', type(e).__name__, e)"
  python3 -m pip install -q --no-index --no-deps -e . 2>/dev/null || true
} 2>&1 | tee "$out/environment.txt"
timeout 200 python3 -m pytest -q tests/test_nvfuser.py tests/test_jit.py -p no:cacheprovider -x \
  2>&1 | tee "$out/cuda_tests.txt"
timeout 150 python3 benchmarks/run.py --only gpu --rounds 5 --out "$out" 2>&1 | tee "$out/gpu_benchmark.txt"
echo "results in $out"
