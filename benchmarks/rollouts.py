"""Scoring-function throughput against raw vmapped brax stepping (issue 3 target: <= 10% overhead).

Workload: 64 policies (64, 64) x 100 steps on walker2d_uni (spring backend unless --backend).
"raw" = brax's own ``env.step`` vmapped over 64 envs in a ``lax.scan``, replaying the actions the
scorer's policies chose from the same initial state (identical physics, so the difference is
our overhead): no policy, no descriptors, no masking. "scoring" = `PolicyScorer` (policy forward
pass, feet-contact descriptors, masking, transitions returned). --repeats interleaved rounds;
medians; compile apart.

Usage: python benchmarks/rollouts.py [--env walker2d_uni] [--pop 64] [--repeats 15]
"""

import argparse
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

import eqx_qd


def first_call(fn, *args):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


def once(fn, *args):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--backend", default=eqx_qd.DEFAULT_BACKEND)
    p.add_argument("--pop", type=int, default=64)
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args()

    env = eqx_qd.envs.BraxQDEnv(a.env, episode_length=a.episode_length, backend=a.backend)
    brax_env = env.brax_env
    n, T = a.pop, a.episode_length

    make = lambda k: eqx_qd.rl.DeterministicPolicy(
        env.observation_size, env.action_size, (64, 64), key=k
    )
    policies = eqx.filter_vmap(make)(jr.split(jr.key(0), n))
    scorer = eqx_qd.PolicyScorer(env)
    score = eqx_qd.jit(lambda pol, k: scorer(pol, key=k)[:2])
    episodes = eqx_qd.jit(lambda pol, k: scorer.episodes(pol, key=k))(policies, jr.key(1))
    actions = jnp.swapaxes(episodes.transitions.action, 0, 1)  # (T, n, action_size)
    start_key = jr.key_data(jr.key(0))  # the deterministic task's fixed initial state

    @eqx_qd.jit
    def raw(actions):
        states = jax.vmap(brax_env.reset)(jnp.broadcast_to(start_key, (n, 2)))

        def body(s, a):
            s = jax.vmap(brax_env.step)(s, a)
            return s, s.reward

        return jax.lax.scan(body, states, actions)[1]

    steps = n * T
    raw_first = first_call(raw, actions)
    sc_first = first_call(score, policies, jr.key(1))
    # Interleaved rounds: machine drift hits both sides alike; the ratio is taken per round.
    raw_ts, sc_ts = [], []
    for _ in range(a.repeats):
        raw_ts.append(once(raw, actions))
        sc_ts.append(once(score, policies, jr.key(1)))
    raw_t, sc_t = statistics.median(raw_ts), statistics.median(sc_ts)
    ratio = statistics.median(s / r for s, r in zip(sc_ts, raw_ts))
    print(f"jax {jax.__version__} | {a.env} ({a.backend}) | {n} policies x {T} steps")
    print(
        f"raw vmapped brax step : compile+first {raw_first:6.2f} s | median {raw_t * 1e3:7.1f} ms "
        f"| {steps / raw_t:10,.0f} env steps/s"
    )
    print(
        f"PolicyScorer          : compile+first {sc_first:6.2f} s | median {sc_t * 1e3:7.1f} ms "
        f"| {steps / sc_t:10,.0f} env steps/s"
    )
    print(
        f"overhead of scoring over raw stepping (median of per-round ratios): "
        f"{100 * (ratio - 1):+.1f}%"
    )


if __name__ == "__main__":
    main()
