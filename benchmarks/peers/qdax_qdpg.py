"""QDPG on published QDax (qdax==0.5.0), CPU: the peer side of `qdpg.py`.

No peer script of ``../shared/bench`` covers QDPG, so this one is ours, written after QDax's
``examples/qdpg.ipynb``: a brax task (``--brax v2``, the spring physics ours runs, by default;
``v1`` QDax's legacy engine), random initial states as the notebook's ``reset_fn``, policies
(64, 64) with lecun initialisation and a tanh output, `QDPGEmitter(QDPGEmitterConfig(...))`
with the notebook's settings but the sizes below, `score_euclidean_novelty` (5 neighbours,
scaling 1), a CVT over the task's descriptor bounds, and ``--iters`` iterations in one
``lax.scan`` compiled ahead of time, so that compile and run times are apart. Besides the
repertoire's figures it reports the diversity rewards of a sample of the diversity learner's
buffer at the end (QDax scores a missing neighbour at the largest float's distance: with fewer
than 5 state descriptors stored, every reward is about 1e37) and whether that learner's
greedy actor is still finite. Run
it in QDax's virtualenv (``../shared/bench/README.md``).

Usage: JAX_PLATFORMS=cpu python benchmarks/peers/qdax_qdpg.py [--env walker2d_uni]
       [--brax v2] [--iters 20] [--quality 12] [--diversity 11] [--ga 11] [--seed 42]
"""

import argparse
import functools
import json
import time

import jax
import jax.numpy as jnp
from qdax.core.containers.archive import score_euclidean_novelty
from qdax.core.containers.mapelites_repertoire import compute_cvt_centroids
from qdax.core.emitters.dpg_emitter import DiversityPGConfig
from qdax.core.emitters.qdpg_emitter import QDPGEmitter, QDPGEmitterConfig
from qdax.core.emitters.qpg_emitter import QualityPGConfig
from qdax.core.map_elites import MAPElites
from qdax.core.neuroevolution.buffers.buffer import QDTransition
from qdax.core.neuroevolution.networks.networks import MLP
from qdax.utils.metrics import default_qd_metrics


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--brax", default="v2", choices=["v1", "v2"])
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--quality", type=int, default=12)
    p.add_argument("--diversity", type=int, default=11)
    p.add_argument("--ga", type=int, default=11)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--centroids", type=int, default=1024)
    p.add_argument("--cvt-samples", type=int, default=50_000)
    p.add_argument("--critic-steps", type=int, default=300)
    p.add_argument("--pg-steps", type=int, default=50)
    p.add_argument("--minibatch", type=int, default=100)
    p.add_argument("--buffer", type=int, default=1_000_000)
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
    batch = a.quality + a.diversity + a.ga
    key = jax.random.key(a.seed)
    policy = MLP(
        layer_sizes=(64, 64, env.action_size),
        kernel_init=jax.nn.initializers.lecun_uniform(),
        final_activation=jnp.tanh,
    )
    key, sub = jax.random.split(key)
    params = jax.vmap(policy.init)(
        jax.random.split(sub, batch), jnp.zeros((batch, env.observation_size))
    )

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
        play_reset_fn=jax.jit(env.reset),
        play_step_fn=play_step,
        descriptor_extractor=tasks.descriptor_extractor[a.env],
    )
    shared = dict(
        batch_size=a.minibatch, critic_hidden_layer_size=(256, 256), critic_learning_rate=3e-4,
        actor_learning_rate=3e-4, policy_learning_rate=1e-3, noise_clip=0.5, policy_noise=0.2,
        discount=0.99, reward_scaling=1.0, replay_buffer_size=a.buffer, soft_tau_update=0.005,
        num_critic_training_steps=a.critic_steps, num_pg_training_steps=a.pg_steps,
        policy_delay=2,
    )  # fmt: skip
    config = QDPGEmitterConfig(
        qpg_config=QualityPGConfig(env_batch_size=a.quality, **shared),
        dpg_config=DiversityPGConfig(
            env_batch_size=a.diversity,
            archive_acceptance_threshold=0.1,
            archive_max_size=10_000,
            **shared,
        ),  # fmt: skip
        iso_sigma=0.005,
        line_sigma=0.05,
        ga_batch_size=a.ga,
    )
    novelty = jax.jit(
        functools.partial(score_euclidean_novelty, num_nearest_neighb=5, scaling_ratio=1.0)
    )
    emitter = QDPGEmitter(config=config, policy_network=policy, env=env, score_novelty=novelty)
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
        rep, state, _, metrics = jax.block_until_ready(compiled(repertoire, emitter_state, key))
        times.append(time.perf_counter() - t0)
    fit = rep.fitnesses.ravel()
    filled = jnp.isfinite(fit) & (fit > -jnp.inf)
    d_state = state.emitter_states[1]
    sample = d_state.replay_buffer.sample(jax.random.key(0), 1000)
    rewards = novelty(d_state.archive, sample.state_desc)
    archive_rows = int(jnp.sum(jnp.all(jnp.isfinite(d_state.archive.data), axis=-1)))
    actor = jax.tree.leaves(d_state.actor_params)
    actor_finite = all(bool(jnp.all(jnp.isfinite(x))) for x in actor)
    res = {
        "bench": "qdpg", "side": "qdax", "env": a.env, "brax": a.brax, "iters": a.iters,
        "split": [a.quality, a.diversity, a.ga], "critic_steps": a.critic_steps,
        "pg_steps": a.pg_steps, "seed": a.seed, "centroids": a.centroids,
        "jax": jax.__version__, "init_s": t_init, "lower_s": t_lower,
        "compile_time_s": t_compile, "run_times_s": times, "s_per_iter": min(times) / a.iters,
        "qd_score": float(jnp.sum(jnp.where(filled, fit + offset, 0.0))),
        "coverage": float(jnp.mean(filled)), "max_fitness": float(jnp.max(fit)),
        "qd_offset": offset, "archive_rows": archive_rows,
        "diversity_reward_median": float(jnp.median(rewards)),
        "diversity_actor_finite": actor_finite,
        "wall_total_s": time.perf_counter() - t_start,
    }  # fmt: skip
    print(f"QDax QDPG {a.env} (brax {a.brax}) {a.quality}/{a.diversity}/{a.ga}, {a.iters} iters")
    print(f"compile {t_compile:.2f} s, run {times} s, {min(times) / a.iters:.3f} s/iter")
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
