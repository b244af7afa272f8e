"""IPPO training throughput (env steps/s) against raw environment stepping, and against the
jaxagents IPPO anchor on the same workload.

Workload (jaxagents' bench_ippo.py sizes): 64 parallel envs (``num_envs``), rollouts of 128
steps, 16 minibatches of 512 samples per epoch, 4 actor + 4 critic epochs, (64, 64) tanh
networks, ``kl_threshold`` 1e9 (no early stop: fixed work), 10 updates per timed call
(81,920 env steps). Tasks:

- ``line_targets``: our discrete task, 2 agents (the issue's "discrete task").
- ``walker2d_2x3``: multi-agent brax (spring backend), 2 agents x 3 actuators.
- ``cartpole``: one classic cart-pole (single-agent PPO, the n = 1 case): jaxagents'
  ``PPOAgent`` anchor task (76,200 env steps/s, compile 5.48 s).
- ``twin_cartpole``: two classic cart-poles stepped together, episode over when either falls,
  written here in pure JAX with gymnax's constants: the anchor's own IPPO task
  (``shared/bench/jaxagents``: 69,700 env steps/s, compile 5.86 s).

"raw" = the same environment alone: a jitted ``lax.scan`` of 1,280 auto-resetting steps of
the vmapped env (64 envs) with random actions. Overhead ratio = raw / train env steps/s.
Compile = first call minus the median warm call. Medians over --repeats warm calls.

With ``--jaxagents-python PY`` (a virtualenv holding jaxagents 0.2.5, see
shared/bench/jaxagents/results.md), the anchor script runs too, back to back.

``--layout joint`` trains IPPO with jaxagents' network layout (one actor and one critic
reading every agent's observation, a head per agent: `JointActor`); ``independent`` (the
default) and ``shared`` are ours. ``--convention jaxagents`` runs jaxagents' update
(``convention="jaxagents"``: minibatches of whole trajectories, 4 environments each, in one
fixed order; its advantage standardisation) with its epoch count: its ``actor_epochs = 4`` runs
3 actor epochs, so ours runs 3 (and 4 critic epochs), and both use Adam with eps 1e-5 and
learning rates 3e-4, as the anchor script sets them. With ``--layout joint --convention
jaxagents`` the two sides do the same work (``compare.py``'s PPO and IPPO rows).

Usage: python benchmarks/ppo.py [--tasks line_targets,walker2d_2x3,twin_cartpole]
       [--layout independent|shared|joint] [--convention eqx_qd|jaxagents] [--repeats 5]
       [--jaxagents-python /path/to/venv/bin/python] [--json OUT]
"""

import argparse
import json
import os
import statistics
import subprocess
import time
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

import eqx_qd as q


BATCH, ROLLOUT, MINIBATCHES, EPOCHS, UPDATES = 64, 128, 16, 4, 10


@typing.final
class CartPoles(q.envs.AbstractMultiAgentEnv):
    """``n`` cart-poles (gymnax CartPole-v1 constants), one per agent; each agent observes its
    own cart (x, x_dot, theta, theta_dot); reward 1 per step each; the episode terminates when
    any pole falls or cart leaves the track, and is truncated at 500 steps."""

    n: int = eqx.field(default=2, static=True)

    @property
    def num_agents(self) -> int:
        return self.n

    @property
    def observation_size(self) -> int:
        return 4

    @property
    def action_size(self) -> int:
        return 2

    @property
    def discrete(self) -> bool:
        return True

    def reset(self, *, key):
        s = jr.uniform(key, (self.n, 4), minval=-0.05, maxval=0.05)
        zero = jnp.zeros((), jnp.float32)
        return q.envs.MultiAgentState(s, s, jnp.zeros(self.n), zero, zero, jnp.zeros((), jnp.int32))

    def step(self, state, actions, *, key):
        x, x_dot, theta, theta_dot = state.physics.T
        force = jnp.where(actions == 1, 10.0, -10.0)
        cos, sin = jnp.cos(theta), jnp.sin(theta)
        total_mass, pole_mass_length, length = 1.1, 0.05, 0.5
        temp = (force + pole_mass_length * theta_dot**2 * sin) / total_mass
        theta_acc = (9.8 * sin - cos * temp) / (length * (4.0 / 3.0 - 0.1 * cos**2 / total_mass))
        x_acc = temp - pole_mass_length * theta_acc * cos / total_mass
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * x_acc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc
        s = jnp.stack([x, x_dot, theta, theta_dot], axis=-1)
        fallen = (jnp.abs(x) > 2.4) | (jnp.abs(theta) > 12 * 2 * jnp.pi / 360)
        terminated = jnp.any(fallen).astype(jnp.float32)
        t = state.t + 1
        truncated = (t >= 500).astype(jnp.float32) * (1.0 - terminated)
        return q.envs.MultiAgentState(s, s, jnp.ones(self.n), terminated, truncated, t)


def make_env(name: str) -> q.envs.AbstractMultiAgentEnv:
    if name == "line_targets":
        return q.envs.TimeLimit(q.envs.LineTargets(n=2, size=8), 16)
    if name == "twin_cartpole":
        return CartPoles(2)
    if name == "cartpole":
        return CartPoles(1)
    return q.envs.BraxMultiAgentEnv(name)


def timed(fn, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0, out


LAYOUTS = {"independent": {}, "shared": dict(shared_params=True), "joint": dict(joint_network=True)}


def bench_train(env, repeats, layout="independent", convention="eqx_qd"):
    # jaxagents' `actor_epochs = EPOCHS` runs EPOCHS - 1 epochs (its loop counts from 1).
    actor_epochs = EPOCHS - 1 if convention == "jaxagents" else EPOCHS
    agent = q.rl.IPPO.for_env(env, rollout_length=ROLLOUT, num_envs=BATCH,
                              num_minibatches=MINIBATCHES, actor_epochs=actor_epochs,
                              critic_epochs=EPOCHS, convention=convention,
                              **LAYOUTS[layout])  # fmt: skip
    hparams = q.rl.PPOHParams(kl_threshold=1e9, actor_lr=3e-4, critic_lr=3e-4)
    state = agent.init(hparams, key=jr.key(0))
    run = agent.init_run(env, state, key=jr.key(1))
    train = lambda r: agent.train(env, r, UPDATES, key=jr.key(2))
    first, (trained, metrics) = timed(train, run)
    warm = [timed(train, run)[0] for _ in range(repeats)]
    median = statistics.median(warm)
    finite = bool(jnp.all(jnp.isfinite(metrics.losses["actor_loss"])))
    return {
        "train_compile_s": first - median,
        "train_s_per_call": median,
        "train_env_steps_per_s": UPDATES * ROLLOUT * BATCH / median,
        "losses_finite": finite,
    }


def bench_raw(env, repeats):
    steps = UPDATES * ROLLOUT

    @eqx.filter_jit
    def run(key):
        reset_key, key = jr.split(key)
        states = jax.vmap(lambda k: q.envs.training_reset(env, key=k))(jr.split(reset_key, BATCH))

        def body(states, key):
            act_key, step_key = jr.split(key)
            shape = (
                (BATCH, env.num_agents)
                if env.discrete
                else (BATCH, env.num_agents, env.action_size)
            )
            actions = (
                jr.randint(act_key, shape, 0, env.action_size)
                if env.discrete
                else jr.uniform(act_key, shape, minval=-1.0, maxval=1.0)
            )
            out = jax.vmap(lambda s, a, k: q.envs.autoreset_step(env, s, a, key=k))(
                states, actions, jr.split(step_key, BATCH)
            )
            return out.state, jnp.sum(out.reward) + jnp.sum(out.next_obs)

        return jax.lax.scan(body, states, jr.split(key, steps))[1]

    first, _ = timed(run, jr.key(1))
    warm = [timed(run, jr.key(1))[0] for _ in range(repeats)]
    median = statistics.median(warm)
    return {"raw_compile_s": first - median, "raw_env_steps_per_s": steps * BATCH / median}


def bench_jaxagents(python: str, repeats: int, agent: str) -> dict:
    script = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench", "jaxagents",
                          "bench_ippo.py")  # fmt: skip
    out = subprocess.run(
        [python, script, "--agent", agent, "--n-steps", str(UPDATES), "--reps", str(repeats),
         "--raw-iters", str(UPDATES * ROLLOUT)],
        capture_output=True, text=True, check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", default="line_targets,walker2d_2x3,twin_cartpole,cartpole")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--layout", default="independent", choices=sorted(LAYOUTS))
    p.add_argument("--convention", default="eqx_qd", choices=q.rl.PPO_CONVENTIONS)
    p.add_argument("--jaxagents-python", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    results = {}
    for name in a.tasks.split(","):
        env = make_env(name)
        r = {**bench_train(env, a.repeats, a.layout, a.convention), **bench_raw(env, a.repeats)}
        r["layout"], r["convention"] = a.layout, a.convention
        r["overhead_ratio"] = r["raw_env_steps_per_s"] / r["train_env_steps_per_s"]
        results[name] = r
        print(
            f"{name:14s} [{a.layout}, {a.convention}] train "
            f"{r['train_env_steps_per_s']:>10,.0f} env steps/s "
            f"({r['train_s_per_call']:.3f} s / {UPDATES} updates, "
            f"compile {r['train_compile_s']:.2f} s)"
            f" | raw {r['raw_env_steps_per_s']:>12,.0f} env steps/s | raw/train "
            f"{r['overhead_ratio']:.1f}x | finite losses {r['losses_finite']}",
            flush=True,
        )
    if a.jaxagents_python:
        for agent, task in (("ippo2", "twin_cartpole"), ("ppo", "cartpole")):
            anchor = bench_jaxagents(a.jaxagents_python, a.repeats, agent)
            results[f"jaxagents_{task}"] = anchor
            train, raw = anchor["train"], anchor["raw_env"]
            print(
                f"jaxagents {agent} on {task}: train {train['train_env_steps_per_s']:,.0f} env "
                f"steps/s (best of {a.repeats}; median "
                f"{UPDATES * ROLLOUT * BATCH / statistics.median(train['steady_call_all_s']):,.0f}"
                f", compile {train['compile_s_est']:.2f} s) | raw "
                f"{raw['raw_env_steps_per_s']:,.0f} env steps/s",
                flush=True,
            )
    print("JSON " + json.dumps(results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
