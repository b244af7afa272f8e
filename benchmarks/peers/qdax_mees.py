"""MAP-Elites-ES on published QDax (qdax==0.5.0), CPU: the peer side of `mees.py`.

No peer script of ``../shared/bench`` covers MAP-Elites-ES, so this one is ours, written after
QDax's ``examples/mees.ipynb``: a brax task (``--brax v2``, the spring physics ours runs, by
default; ``v1`` QDax's legacy engine), one fixed initial state (the notebook's
``play_reset_fn``), policies (64, 64) with lecun initialisation and a tanh output, one initial
policy, `MEESEmitter(MEESConfig(...))` with the notebook's settings but `--samples` ES samples,
the offspring scored once (the notebook averages it over 30 episodes with ``sampling``: scaled
down alike on both sides), a CVT over the task's descriptor bounds, and ``--iters`` generations
in one ``lax.scan`` compiled ahead of time, so that compile and run times are apart. Run it in
QDax's virtualenv (``../shared/bench/README.md``).

Usage: JAX_PLATFORMS=cpu python benchmarks/peers/qdax_mees.py [--env walker2d_uni]
       [--brax v2] [--iters 30] [--samples 200] [--seed 42] [--repeats 1]
"""

import argparse
import functools
import json
import time

import jax
import jax.numpy as jnp
from qdax.core.containers.mapelites_repertoire import compute_cvt_centroids
from qdax.core.emitters.mees_emitter import MEESConfig, MEESEmitter
from qdax.core.map_elites import MAPElites
from qdax.core.neuroevolution.buffers.buffer import QDTransition
from qdax.core.neuroevolution.networks.networks import MLP
from qdax.utils.metrics import default_qd_metrics


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--brax", default="v2", choices=["v1", "v2"])
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--centroids", type=int, default=256)
    p.add_argument("--cvt-samples", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args()

    if a.brax == "v1":
        import qdax.tasks.brax.v1 as tasks
        from qdax.tasks.brax.v1.env_creators import scoring_function_brax_envs
    else:
        import qdax.tasks.brax.v2 as tasks
        from qdax.tasks.brax.v2.env_creators import scoring_function_brax_envs
    t_start = time.perf_counter()
    env = tasks.create(a.env, episode_length=a.episode_length)
    key = jax.random.key(a.seed)
    policy = MLP(
        layer_sizes=(64, 64, env.action_size),
        kernel_init=jax.nn.initializers.lecun_uniform(),
        final_activation=jnp.tanh,
    )
    key, sub = jax.random.split(key)
    params = jax.vmap(policy.init)(sub[None], jnp.zeros((1, env.observation_size)))
    key, sub = jax.random.split(key)
    init_state = env.reset(sub)

    def play_step(env_state, policy_params, key):
        actions = policy.apply(policy_params, env_state.obs)
        next_state = env.step(env_state, actions)
        transition = QDTransition(
            obs=env_state.obs,
            next_obs=next_state.obs,
            rewards=next_state.reward,
            dones=next_state.done,
            actions=actions,
            truncations=next_state.info["truncation"],
            state_desc=env_state.info["state_descriptor"],
            next_state_desc=next_state.info["state_descriptor"],
        )
        return next_state, policy_params, key, transition

    scoring = functools.partial(
        scoring_function_brax_envs,
        episode_length=a.episode_length,
        play_reset_fn=lambda key: init_state,
        play_step_fn=play_step,
        descriptor_extractor=tasks.descriptor_extractor[a.env],
    )
    config = MEESConfig(
        sample_number=a.samples, sample_sigma=0.02, sample_mirror=True, sample_rank_norm=True,
        num_optimizer_steps=10, adam_optimizer=True, learning_rate=0.01, l2_coefficient=0.02,
        novelty_nearest_neighbors=10, last_updated_size=5, exploit_num_cell_sample=2,
        explore_num_cell_sample=5, use_explore=True, use_exploit=True,
    )  # fmt: skip
    emitter = MEESEmitter(
        config=config,
        total_generations=a.iters,
        scoring_fn=scoring,
        num_descriptors=env.descriptor_length,
    )
    offset = tasks.reward_offset[a.env] * a.episode_length
    algo = MAPElites(
        scoring_function=scoring,
        emitter=emitter,
        metrics_function=functools.partial(default_qd_metrics, qd_offset=offset),
    )
    low, high = env.descriptor_limits
    key, sub = jax.random.split(key)
    centroids = compute_cvt_centroids(
        num_descriptors=env.descriptor_length, num_init_cvt_samples=a.cvt_samples,
        num_centroids=a.centroids, minval=low, maxval=high, key=sub,
    )  # fmt: skip
    key, sub = jax.random.split(key)
    t0 = time.perf_counter()
    repertoire, emitter_state, _ = jax.block_until_ready(jax.jit(algo.init)(params, centroids, sub))
    t_init = time.perf_counter() - t0

    def run(repertoire, emitter_state, key):
        (repertoire, emitter_state, key), metrics = jax.lax.scan(
            algo.scan_update, (repertoire, emitter_state, key), (), length=a.iters
        )
        return repertoire, emitter_state, key, metrics

    t0 = time.perf_counter()
    lowered = jax.jit(run).lower(repertoire, emitter_state, key)
    t_lower = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    t_compile = time.perf_counter() - t0
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        rep, _, _, metrics = jax.block_until_ready(compiled(repertoire, emitter_state, key))
        times.append(time.perf_counter() - t0)
    fit = rep.fitnesses.ravel()
    filled = jnp.isfinite(fit) & (fit > -jnp.inf)
    res = {
        "bench": "mees", "side": "qdax", "env": a.env, "brax": a.brax, "iters": a.iters,
        "samples": a.samples, "seed": a.seed, "centroids": a.centroids, "jax": jax.__version__,
        "init_s": t_init, "lower_s": t_lower, "compile_time_s": t_compile, "run_times_s": times,
        "s_per_iter": min(times) / a.iters,
        "qd_score": float(jnp.sum(jnp.where(filled, fit + offset, 0.0))),
        "coverage": float(jnp.mean(filled)), "max_fitness": float(jnp.max(fit)),
        "qd_offset": offset, "wall_total_s": time.perf_counter() - t_start,
    }  # fmt: skip
    print(f"QDax MEES {a.env} (brax {a.brax}) {a.samples} samples, {a.iters} generations")
    print(f"compile {t_compile:.2f} s, run {times} s, {min(times) / a.iters:.3f} s/iter")
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
