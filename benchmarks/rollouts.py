"""Scoring-function throughput against raw vmapped brax stepping (issue 3 target: <= 10% overhead).

Workload: 64 policies (64, 64) x 100 steps on walker2d_uni (spring backend unless --backend).
"raw" = brax's own ``env.step`` vmapped over 64 envs in a ``lax.scan`` with fixed actions, no
policy, no descriptors, no masking. "scoring" = `PolicyScorer` (policy forward pass, feet-contact
descriptors, masking, transitions returned). Medians over --repeats calls; compile apart.

Usage: python benchmarks/rollouts.py [--env walker2d_uni] [--pop 64] [--repeats 7]
"""

import argparse
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

import eqx_qd


def timed(fn, *args, repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--backend", default=eqx_qd.DEFAULT_BACKEND)
    p.add_argument("--pop", type=int, default=64)
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()

    env = eqx_qd.BraxQDEnv(a.env, episode_length=a.episode_length, backend=a.backend)
    brax_env = env.brax_env
    n, T = a.pop, a.episode_length

    @jax.jit
    def raw(key):
        states = jax.vmap(brax_env.reset)(jax.random.split(jr.key_data(key), n))
        actions = jnp.zeros((n, env.action_size), jnp.float32) + 0.1

        def body(s, _):
            s = jax.vmap(brax_env.step)(s, actions)
            return s, s.reward

        return jax.lax.scan(body, states, None, length=T)[1]

    make = lambda k: eqx_qd.DeterministicPolicy(
        env.observation_size, env.action_size, (64, 64), key=k
    )
    policies = eqx.filter_vmap(make)(jr.split(jr.key(0), n))
    scorer = eqx_qd.PolicyScorer(env)
    score = eqx.filter_jit(lambda pol, k: scorer(pol, key=k)[:2])

    steps = n * T
    raw_first, raw_t = timed(raw, jr.key(1), repeats=a.repeats)
    sc_first, sc_t = timed(score, policies, jr.key(1), repeats=a.repeats)
    print(f"jax {jax.__version__} | {a.env} ({a.backend}) | {n} policies x {T} steps")
    print(
        f"raw vmapped brax step : compile+first {raw_first:6.2f} s | median {raw_t * 1e3:7.1f} ms "
        f"| {steps / raw_t:10,.0f} env steps/s"
    )
    print(
        f"PolicyScorer          : compile+first {sc_first:6.2f} s | median {sc_t * 1e3:7.1f} ms "
        f"| {steps / sc_t:10,.0f} env steps/s"
    )
    print(f"overhead of scoring over raw stepping: {100 * (sc_t / raw_t - 1):+.1f}%")


if __name__ == "__main__":
    main()
