#!/usr/bin/env bash
# AURORA against QDax 0.5.0, seeds back to back (ours, then QDax's, per seed): the archive's
# QD-score, size and max fitness in the learned space, its QD-score and coverage on a grid of
# the hand-written descriptors, and the seconds per iteration, after --loops loops of 5.
# Usage: [SEEDS="0 1 2 3 4"] [TARGET=512] bash benchmarks/aurora_seeds.sh [out.jsonl] [loops]
# (QDax's virtualenv: QDAX_PYTHON, default /tmp/qdax_venv/bin/python; run with nothing else
# on the machine. QDax's re-insertion needs more than 24 GiB at TARGET=1024.)
set -euo pipefail
out=${1:-/tmp/aurora_seeds.jsonl}
loops=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
qdax=${QDAX_PYTHON:-/tmp/qdax_venv/bin/python}
work=$(mktemp -d)
lscpu | grep -E "Model name|^CPU family|^Model:" >&2
for seed in ${SEEDS:-0 1 2 3 4}; do
  (cd "$work" && JAX_PLATFORMS=cpu python "$here/aurora.py" --loops "$loops" --seed "$seed" \
    --target "${TARGET:-512}" | grep '^JSON ' | cut -c6- >> "$out")
  (cd "$work" && JAX_PLATFORMS=cpu "$qdax" "$here/peers/qdax_aurora.py" --loops "$loops" \
    --seed "$seed" --target "${TARGET:-512}" | grep '^JSON ' | cut -c6- >> "$out")
done
