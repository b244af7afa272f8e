#!/usr/bin/env bash
# QDPG against QDax 0.5.0, seeds back to back (ours, then QDax's, per seed): final QD-score,
# coverage and max fitness after --iters iterations, seconds per iteration, and the diversity
# learner's rewards and greedy actor at the end.
# Usage: [SEEDS="0 1 2 3 4"] [BRAX=v2] [ENV=walker2d_uni] bash benchmarks/qdpg_seeds.sh
#        [out.jsonl] [iters]
# (QDax's virtualenv: QDAX_PYTHON, default /tmp/qdax_venv/bin/python; run with nothing else
# on the machine).
set -euo pipefail
out=${1:-/tmp/qdpg_seeds.jsonl}
iters=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
qdax=${QDAX_PYTHON:-/tmp/qdax_venv/bin/python}
work=$(mktemp -d)
lscpu | grep -E "Model name|^CPU family|^Model:" >&2
for seed in ${SEEDS:-0 1 2 3 4}; do
  (cd "$work" && JAX_PLATFORMS=cpu python "$here/qdpg.py" --iters "$iters" --seed "$seed" --env "${ENV:-walker2d_uni}" \
    | grep '^JSON ' | cut -c6- >> "$out")
  (cd "$work" && JAX_PLATFORMS=cpu "$qdax" "$here/peers/qdax_qdpg.py" --iters "$iters" \
    --brax "${BRAX:-v2}" --seed "$seed" --env "${ENV:-walker2d_uni}" | grep '^JSON ' | cut -c6- >> "$out")
done
