#!/usr/bin/env bash
# DCRL-ME, PGA-ME and MAP-Elites on walker2d_uni at reduced size, 5 seeds each, same budget and the
# DCRL repository's shared settings (its pga_me.yaml equals dcrl_me.yaml where both have a key).
# docs/results/dcrl_me.md has the result; then: eqx-qd report $OUT/*/seed-* --out report
set -u
cd "$(dirname "$0")/.."
[ -f .venv/bin/activate ] && . .venv/bin/activate
OUT=${OUT:-runs/dcrl_me_seeds}
EVALS=${EVALS:-6400}
COMMON="--env walker2d_uni --episode-length 100 --cells 256 --cvt-samples 20000 --evaluations $EVALS \
 --batch-size 64 --random-init 256 --init-batch-size 128 --critic-steps 300 --pg-steps 10 \
 --hidden 64,64 --minibatch-size 100 --pg-lr 0.005 --buffer-size 200000 \
 --policy-init lecun_uniform --critic-init lecun_uniform --snapshot-every 3200 \
 --checkpoint-every 3200 --reevaluations 4 --no-progress --no-plots"
SEEDS=${SEEDS:-0,1,2,3,4}
for algo in dcrl pga me; do
  case $algo in
    dcrl) cmd="eqx-qd run dcrl-me --pg-batch-size 16 --ai-batch-size 16";;
    pga) cmd="eqx-qd run pgame --convention qdax";;
    me) cmd="eqx-qd run pgame --convention qdax --no-gradient";;
  esac
  start=$(date +%s)
  $cmd $COMMON --seeds $SEEDS --out $OUT/$algo
  echo "$algo done in $(( $(date +%s) - start )) s"
done
