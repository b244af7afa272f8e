#!/usr/bin/env bash
# MAP-Elites-ES against QDax 0.5.0, seeds back to back (ours, then QDax's, per seed): final
# QD-score, coverage and max fitness after --iters generations, and seconds per generation.
# Usage: [SEEDS="0 1 2 3 4"] bash benchmarks/mees_seeds.sh [out.jsonl] [iters] [samples]
# (QDax's virtualenv: QDAX_PYTHON, default /tmp/qdax_venv/bin/python; run with nothing else
# on the machine).
set -euo pipefail
out=${1:-/tmp/mees_seeds.jsonl}
iters=${2:-30}
samples=${3:-200}
here=$(cd "$(dirname "$0")" && pwd)
qdax=${QDAX_PYTHON:-/tmp/qdax_venv/bin/python}
work=$(mktemp -d)
lscpu | grep -E "Model name|^CPU family|^Model:" >&2
for seed in ${SEEDS:-0 1 2 3 4}; do
  (cd "$work" && JAX_PLATFORMS=cpu python "$here/mees.py" --iters "$iters" --samples "$samples" \
    --seed "$seed" | grep '^JSON ' | cut -c6- >> "$out")
  (cd "$work" && JAX_PLATFORMS=cpu "$qdax" "$here/peers/qdax_mees.py" --iters "$iters" \
    --samples "$samples" --seed "$seed" | grep '^JSON ' | cut -c6- >> "$out")
done
