"""AURORA on published QDax (qdax==0.5.0), CPU: the peer side of `aurora.py`.

No peer script of ``../shared/bench`` covers AURORA, so this one is ours, written after QDax's
``examples/aurora.ipynb``: `create_default_brax_task_components` (deterministic initial state,
(64, 64) policies), `get_aurora_scoring_fn` with the notebook's ``no_sd`` observations (every
10th step's first 25 numbers), its LSTM `Seq2seq` (hidden size 5, teacher forcing) trained by
`lstm_ae_train` (batches of 128), `MixingEmitter` with iso+line-DD (0.005, 0.05), `l_value`
0.2, and its loop: ``--loops`` loops of 5 iterations, the encoder retrained at the loops of
its schedule (2, 6, 12, 20, ...) and container-size control at the other even ones, towards
``--target`` elites. One change: the notebook passes ``max_observation_size`` (25) as the
archive's ``max_size``, which leaves ``lstm_ae_train`` no batch to train on (25 // 128 = 0
steps per epoch), so the encoder never trains; here ``max_size`` is ``--target`` (1024, the
notebook's ``n_target`` and ``num_centroids``).

Reported: the archive's figures as the notebook's `metrics_fn` (QD-score with the reward
offset, size over ``max_size``), and the same archive in the hand-written descriptor space
(feet contacts): the stored genotypes re-scored (the deterministic task gives the same
descriptors) and projected onto a ``--grid`` x ``--grid`` grid of [0, 1]^2, keeping the best of
each cell. Time per iteration: the loops after the first (which compiles), training and size
control included, over their iterations. Run it in QDax's virtualenv.

Usage: JAX_PLATFORMS=cpu python benchmarks/peers/qdax_aurora.py [--env walker2d_uni]
       [--episode-length 100] [--loops 20] [--batch 100] [--seed 42]
"""

import argparse
import functools
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from qdax.core.aurora import AURORA
from qdax.core.emitters.mutation_operators import isoline_variation
from qdax.core.emitters.standard_emitters import MixingEmitter
from qdax.custom_types import AuroraExtraInfoNormalization
from qdax.tasks.brax.descriptor_extractors import get_aurora_encoding
from qdax.utils import train_seq2seq


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hand_grid import grid_figures  # noqa: E402  (benchmarks/, beside this folder)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--loops", type=int, default=20)
    p.add_argument("--log-freq", type=int, default=5)
    p.add_argument("--target", type=int, default=1024)
    p.add_argument("--grid", type=int, default=32)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    import qdax.tasks.brax.v2 as environments
    from qdax.tasks.brax.v2.env_creators import (
        create_default_brax_task_components,
        get_aurora_scoring_fn,
    )

    t_start = time.perf_counter()
    key = jax.random.key(a.seed)
    key, sub = jax.random.split(key)
    env, policy, scoring_fn = create_default_brax_task_components(
        env_name=a.env, key=sub, episode_length=a.episode_length
    )
    key, sub = jax.random.split(key)
    params = jax.vmap(policy.init)(
        jax.random.split(sub, a.batch), jnp.zeros((a.batch, env.observation_size))
    )
    every, width, hidden = 10, 25, 5

    def observations_of(data):
        return data.obs[:, ::every, :width]

    aurora_scoring = get_aurora_scoring_fn(scoring_fn, observations_of, "observations")
    offset = environments.reward_offset[a.env] * a.episode_length

    def metrics_fn(repertoire):
        empty = repertoire.fitnesses == -jnp.inf
        qd = jnp.sum(repertoire.fitnesses, where=~empty) + offset * jnp.sum(1.0 - empty)
        return {
            "qd_score": qd,
            "max_fitness": jnp.max(repertoire.fitnesses),
            "coverage": 100 * jnp.mean(1.0 - empty),
        }

    emitter = MixingEmitter(
        mutation_fn=lambda x, y: (x, y),
        variation_fn=functools.partial(isoline_variation, iso_sigma=0.005, line_sigma=0.05),
        variation_percentage=1.0,
        batch_size=a.batch,
    )
    dims = (a.episode_length // every, min(env.observation_size, width))
    model = train_seq2seq.get_model(dims[-1], True, hidden_size=hidden)
    key, sub = jax.random.split(key)
    model_params = train_seq2seq.get_initial_params(model, sub, (1, *dims))
    encoder_fn = jax.jit(functools.partial(get_aurora_encoding, model=model))
    train_fn = functools.partial(train_seq2seq.lstm_ae_train, model=model, batch_size=128)
    aurora = AURORA(
        scoring_function=aurora_scoring,
        emitter=emitter,
        metrics_function=metrics_fn,
        encoder_function=encoder_fn,
        training_function=train_fn,
        observations_key="observations",
    )
    info = AuroraExtraInfoNormalization.create(
        model_params, jnp.zeros(dims[-1]), jnp.ones(dims[-1])
    )
    t0 = time.perf_counter()
    key, sub = jax.random.split(key)
    repertoire, _, _, info = aurora.init(params, info, jnp.asarray(0.2), a.target, sub)
    key, sub = jax.random.split(key)
    repertoire, info = aurora.train(repertoire, model_params, iteration=0, key=sub)
    t_init = time.perf_counter() - t0

    @jax.jit
    def update_scan(carry, _):
        repertoire, key, info = carry
        key, sub = jax.random.split(key)
        repertoire, _, metrics = aurora.update(repertoire, None, sub, aurora_extra_info=info)
        return (repertoire, key, info), metrics

    update_base = int(np.ceil(10 / a.log_freq))
    schedules = np.cumsum(np.arange(update_base, 1000, update_base))
    previous_error = jnp.sum(repertoire.fitnesses != -jnp.inf) - a.target
    control = jax.jit(aurora.container_size_control)
    loop_times = []
    for iteration in range(a.loops):
        t0 = time.perf_counter()
        (repertoire, key, info), metrics = jax.lax.scan(
            update_scan, (repertoire, key, info), (), length=a.log_freq
        )
        if (iteration + 1) in schedules:
            key, sub = jax.random.split(key)
            repertoire, info = aurora.train(repertoire, model_params, iteration, sub)
        elif iteration % 2 == 0:
            repertoire, previous_error = control(
                repertoire, target_size=a.target, previous_error=previous_error
            )
        jax.block_until_ready(repertoire.fitnesses)
        loop_times.append(time.perf_counter() - t0)
    fit = np.asarray(repertoire.fitnesses).ravel()
    filled = np.isfinite(fit)
    # The hand-written space: the stored genotypes re-scored (deterministic initial state).
    _, descriptors, _ = jax.jit(scoring_fn)(repertoire.genotypes, jax.random.key(0))
    hand_qd, hand_cov = grid_figures(np.asarray(descriptors), np.where(filled, fit, -np.inf),
                                     offset, a.grid)  # fmt: skip
    s_per_iter = sum(loop_times[1:]) / (a.log_freq * (a.loops - 1))
    res = {
        "bench": "aurora", "side": "qdax", "env": a.env, "episode_length": a.episode_length,
        "batch": a.batch, "loops": a.loops, "log_freq": a.log_freq, "seed": a.seed,
        "target": a.target, "jax": jax.__version__, "init_s": t_init,
        "first_loop_s": loop_times[0], "s_per_iter": s_per_iter,
        "qd_score": float(np.sum(fit[filled] + offset)), "size": int(filled.sum()),
        "coverage": float(filled.mean()), "max_fitness": float(fit[filled].max()),
        "l_value": float(repertoire.l_value[0]), "hand_qd_score": hand_qd,
        "hand_coverage": hand_cov, "qd_offset": offset,
        "wall_total_s": time.perf_counter() - t_start,
    }  # fmt: skip
    print(f"QDax AURORA {a.env}: {a.loops} loops of {a.log_freq}, {s_per_iter:.3f} s/iter")
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
