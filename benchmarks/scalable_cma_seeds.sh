#!/usr/bin/env bash
# CMA-MAE with each scalable strategy (sep-CMA-ES, LM-MA-ES, OpenAI-ES), ours (the job's
# cma-mae preset with --es) and pyribs 0.12's (benchmarks/cma.py --peer ribs --es --out), over
# seeds, compared by `eqx-qd report`. pyribs' examples/sphere.py protocol (its `cma_mae` config
# runs sep_cma_es by default; `--es` sets another); each strategy at pyribs' defaults.
# docs/results/scalable_cma.md shows its output.
#
# Usage: bash benchmarks/scalable_cma_seeds.sh [OUT=runs/scalable] [ITERATIONS=500]
#        [SEEDS="1 2 3 4 5"] [STRATEGIES="sep_cma_es lm_ma_es openai_es"]
#        with RIBS_PYTHON=/tmp/ribs_venv/bin/python (pyribs' virtualenv)
set -euo pipefail
OUT=${OUT:-runs/scalable}
ITERATIONS=${ITERATIONS:-500}
SEEDS=${SEEDS:-1 2 3 4 5}
STRATEGIES=${STRATEGIES:-sep_cma_es lm_ma_es openai_es}
RIBS_PYTHON=${RIBS_PYTHON:-/tmp/ribs_venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
for es in $STRATEGIES; do
    for seed in $SEEDS; do
        eqx-qd run map-elites --preset cma-mae --es "$es" --iterations "$ITERATIONS" \
            --seed "$seed" --out "$OUT/eqx_qd-$es-$seed" --no-plots --no-progress
        "$RIBS_PYTHON" "$HERE/cma.py" cma_mae --es "$es" --iterations "$ITERATIONS" \
            --seed "$seed" --peer ribs --out "$OUT/pyribs-$es-$seed"
    done
done
eqx-qd report "$OUT"/eqx_qd-* "$OUT"/pyribs-* --out "$OUT-report"
