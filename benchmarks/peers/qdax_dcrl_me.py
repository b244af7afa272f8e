"""DCRL-MAP-Elites on published QDax (qdax==0.5.0), CPU: the peer side of `dcrl_me.py`.

No peer script of ``../shared/bench`` covers DCRL-ME, so this one is ours, written after
``bench_pgame.py`` and QDax's own ``examples/dcrlme.ipynb``: a brax task (``--brax v1``, QDax's
legacy physics, as the PGA-ME row; ``v2`` its spring backend), policies (64, 64) with lecun
initialisation and a tanh output, `DCRLMEEmitter(DCRLMEConfig(...))` with iso+line-DD, a CVT over
the task's descriptor bounds, and ``--iters`` iterations in one ``lax.scan`` compiled ahead of
time, so that compile and run times are apart. Run it in QDax's virtualenv
(``../shared/bench/README.md``).

Usage: JAX_PLATFORMS=cpu python benchmarks/peers/qdax_dcrl_me.py [--env walker2d_uni]
       [--brax v1] [--iters 10] [--repeats 1]
"""

import argparse
import functools
import json
import time

import jax
import jax.numpy as jnp
from qdax.core.containers.mapelites_repertoire import compute_cvt_centroids
from qdax.core.emitters.dcrl_me_emitter import DCRLMEConfig, DCRLMEEmitter
from qdax.core.emitters.mutation_operators import isoline_variation
from qdax.core.map_elites import MAPElites
from qdax.core.neuroevolution.buffers.buffer import DCRLTransition
from qdax.core.neuroevolution.networks.networks import MLP, MLPDC
from qdax.utils.metrics import default_qd_metrics


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--brax", default="v1", choices=["v1", "v2"])
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--ga", type=int, default=32)
    p.add_argument("--pg", type=int, default=16)
    p.add_argument("--ai", type=int, default=16)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--centroids", type=int, default=1024)
    p.add_argument("--cvt-samples", type=int, default=50_000)
    p.add_argument("--critic-steps", type=int, default=300)
    p.add_argument("--pg-steps", type=int, default=100)
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
    env = tasks.create(a.env, episode_length=a.episode_length)
    t_start = time.perf_counter()
    batch = a.ga + a.pg + a.ai
    key = jax.random.key(a.seed)
    layers = (64, 64, env.action_size)
    init = jax.nn.initializers.lecun_uniform()
    policy = MLP(layer_sizes=layers, kernel_init=init, final_activation=jnp.tanh)
    actor = MLPDC(layer_sizes=layers, kernel_init=init, final_activation=jnp.tanh)
    key, sub = jax.random.split(key)
    params = jax.vmap(policy.init)(
        jax.random.split(sub, batch), jnp.zeros((batch, env.observation_size))
    )
    nan_desc = jnp.full((env.descriptor_length,), jnp.nan)

    def play_step(env_state, policy_params, key):
        actions = policy.apply(policy_params, env_state.obs)
        next_state = env.step(env_state, actions)
        transition = DCRLTransition(
            obs=env_state.obs,
            next_obs=next_state.obs,
            rewards=next_state.reward,
            dones=next_state.done,
            truncations=next_state.info["truncation"],
            actions=actions,
            state_desc=env_state.info["state_descriptor"],
            next_state_desc=next_state.info["state_descriptor"],
            desc=nan_desc,
            desc_prime=nan_desc,
        )
        return next_state, policy_params, key, transition

    scoring = functools.partial(
        scoring_function_brax_envs,
        episode_length=a.episode_length,
        play_reset_fn=jax.jit(env.reset),
        play_step_fn=play_step,
        descriptor_extractor=tasks.descriptor_extractor[a.env],
    )
    config = DCRLMEConfig(
        ga_batch_size=a.ga, dcrl_batch_size=a.pg, ai_batch_size=a.ai, lengthscale=0.1,
        critic_hidden_layer_size=(256, 256), num_critic_training_steps=a.critic_steps,
        num_pg_training_steps=a.pg_steps, batch_size=a.minibatch, replay_buffer_size=a.buffer,
        discount=0.99, reward_scaling=1.0, critic_learning_rate=3e-4, actor_learning_rate=3e-4,
        policy_learning_rate=5e-3, noise_clip=0.5, policy_noise=0.2, soft_tau_update=0.005,
        policy_delay=2,
    )  # fmt: skip
    emitter = DCRLMEEmitter(
        config=config,
        policy_network=policy,
        actor_network=actor,
        env=env,
        variation_fn=functools.partial(isoline_variation, iso_sigma=0.005, line_sigma=0.05),
    )
    offset = tasks.reward_offset[a.env] * a.episode_length
    algo = MAPElites(
        scoring_function=scoring,
        emitter=emitter,
        metrics_function=functools.partial(default_qd_metrics, qd_offset=offset),
    )
    low, high = env.descriptor_limits
    key, sub = jax.random.split(key)
    t0 = time.perf_counter()
    centroids = compute_cvt_centroids(
        num_descriptors=env.descriptor_length, num_init_cvt_samples=a.cvt_samples,
        num_centroids=a.centroids, minval=low, maxval=high, key=sub,
    )  # fmt: skip
    t_cvt = time.perf_counter() - t0
    key, sub = jax.random.split(key)
    t0 = time.perf_counter()
    repertoire, emitter_state, init_metrics = jax.block_until_ready(
        jax.jit(algo.init)(params, centroids, sub)
    )
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
        *_, metrics = jax.block_until_ready(compiled(repertoire, emitter_state, key))
        times.append(time.perf_counter() - t0)
    best = min(times)
    res = {
        "bench": "dcrl_me", "side": "qdax", "env": a.env, "brax": a.brax, "batch": batch,
        "split": [a.ga, a.pg, a.ai], "iters": a.iters, "critic_steps": a.critic_steps,
        "pg_steps": a.pg_steps, "jax": jax.__version__, "centroids_s": t_cvt,
        "init_s_incl_compile": t_init, "lower_s": t_lower, "compile_time_s": t_compile,
        "run_times_s": times, "s_per_iter": best / a.iters,
        "final_qd_score": float(metrics["qd_score"][-1]),
        "final_max_fitness": float(metrics["max_fitness"][-1]),
        "wall_total_s": time.perf_counter() - t_start,
    }  # fmt: skip
    print(f"QDax DCRL-ME {a.env} (brax {a.brax}) batch {batch} = {a.ga}/{a.pg}/{a.ai}")
    print(f"compile {t_compile:.2f} s (+ lower {t_lower:.2f} s), run {times} s, "
          f"{best / a.iters:.3f} s/iter")  # fmt: skip
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
