#!/usr/bin/env bash
# One GPU session's measurements (issue 48), as run through the device tool: from the
# repository root of a GPU machine whose image has jax with CUDA, and with the wheels this
# needs besides (brax, mujoco, pyribs, QDax ...) in .whl and a copy of ../shared/bench in
# .devshared/bench. Writes what it measures to $OUT. Peers: pyribs (NumPy, on the machine's
# CPU) and QDax 0.5.0's MAP-Elites and CMA-ME (--no-deps, on the image's jax); jaxagents and
# QDax's RL need jax 0.4 and do not install there.
set -u
OUT=${OUT:-/tmp/gpu_session}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 EQX_QD_SHARED_BENCH=$PWD/.devshared/bench
PY=$(command -v python3)
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    lscpu | grep -E "Model name|^CPU\(s\)|CPU family|^Model:"
    $PY -c "import jax, equinox, brax, optax, numpy; print('jax', jax.__version__, jax.devices(),
'equinox', equinox.__version__, 'brax', brax.__version__, 'optax', optax.__version__,
'numpy', numpy.__version__)"
} 2>&1 | tee "$OUT/machine.txt"
$PY benchmarks/cvt_search.py --cells 1024,4096,8192,10000,16384,32768 --batch 1024,16384 \
    2>&1 | tee "$OUT/cvt_search.txt"
timeout "${COMPARE_SECONDS:-420}" $PY benchmarks/compare.py --platform default \
    --peers pyribs,QDax --rounds 1 --timeout 150 --jsonl "$OUT/runs.jsonl" \
    --qdax-python "$PY" --ribs-python "$PY" --jaxagents-python "$PY" \
    --only "${ROWS:-kmeans,cvt1024,grid,cvt4096,cvt10000,cma_me,cma_mae,cma_mega,cma_me_qdax,dns_ribs,dcrl_me,sacbf16,sac,pgame,mepbt,ppo,ippo}" \
    2>&1 | tee "$OUT/compare.txt"
