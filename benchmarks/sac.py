"""SAC gradient steps/s for a vmapped population (issue 3 target: >= 1.25x QDax's PBT-SAC).

Workload of ``shared/bench/qdax/bench_pbt_sac.py``: 8 agents x 16 envs on hopper (brax spring,
episode 100), networks (256, 256), SAC batch 256, buffer 1e5 per agent, one gradient step per
environment step (16 per iteration), 100 iterations (1,600 env steps per agent) per train call.
Each training environment draws a random first state (the task's reset noise) and restarts every
episode there, as QDax's (brax's auto-reset keeps the first state): ``SAC(same_start=True)``.
``--starts fresh`` draws a fresh random state at every episode instead (a reset computed at every
step: about 4 s more compile on hopper, `benchmarks/log/sac.md`). The first call compiles; the
others are timed (median). The compile is the time from the first call's start to the end of its
longest XLA compile (JAX's own compile event; the training program's), plus the XLA time of the
small programs compiled after it: tracing, lowering and XLA, as QDax's script times its
ahead-of-time ``lower().compile()``. A deterministic evaluation (1 episode x 16 envs per
agent) follows each call. No PBT selection here. ``--devices 2`` splits the agents over 2 host
devices (one per core) with `train_population_sharded`; ``--devices auto`` as ``eqx-qd run pbt``
splits them by default (the most devices, at most one per core, that divide the population).
On one device `train_population` trains the agents in groups side by side on threads, by default
one group per core that divides the population (``--groups 1``: one program; the JSON's
``groups``).
``--matmul-dtype bfloat16`` runs the networks' hidden products with bfloat16 inputs (`SAC`'s
``matmul_dtype``; ``auto``: bfloat16 where ``eqx_qd.internal.machine()`` says they are faster, the
JSON's ``matmul_dtype_taken``). The JSON line holds every call's evaluation returns per agent,
so that a long run (``--calls 26``) is a learning curve; the agents' keys and initial weights
do not depend on ``--matmul-dtype``, so two runs differ only by it.

Usage: python benchmarks/sac.py [--env hopper_uni] [--pop 8] [--calls 3] [--devices 2|auto]
       [--matmul-dtype bfloat16|auto] [--starts same|fresh] [--groups auto|N]
"""

import argparse
import json
import os
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="hopper_uni")
    p.add_argument("--pop", type=int, default=8)
    p.add_argument("--env-batch", type=int, default=16)
    p.add_argument("--steps-per-call", type=int, default=1600)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--buffer", type=int, default=100_000)
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument(
        "--devices",
        type=lambda t: t if t == "auto" else int(t),
        default=1,
        help="host devices to split agents over; auto: as the PBT job picks them (the most, "
        "at most one per core, that divide --pop)",
    )
    p.add_argument("--matmul-dtype", default="float32", choices=["float32", "bfloat16", "auto"])
    p.add_argument(
        "--groups",
        type=lambda t: t if t == "auto" else int(t),
        default="auto",
        help="train_population's groups on one device (auto, its default: one per core that "
        "divides --pop; 1: the whole population in one program)",
    )
    p.add_argument(
        "--starts",
        default="same",
        choices=["same", "fresh"],
        help="same: each environment restarts every episode from its own random first state "
        "(QDax's); fresh: a new random state every episode",
    )
    a = p.parse_args(sys.argv[1:])
    if a.devices == "auto":  # the PBT job's rule; JAX is imported, not started
        from eqx_qd.jobs._distributed import most_dividing, usable_cores

        a.devices = most_dividing(a.pop, usable_cores())
    if a.devices > 1:  # must be set before JAX starts its CPU backend
        flags = os.environ.get("XLA_FLAGS", "")  # kept: e.g. --xla_cpu_multi_thread_eigen=false
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={a.devices}"
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q
    from eqx_qd._machine import resolve_matmul_dtype

    env = q.envs.BraxQDEnv(a.env, episode_length=a.episode_length, reset_noise=True)
    agent = q.rl.SAC(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=tuple(a.hidden),
        critic_hidden=tuple(a.hidden),
        minibatch_size=a.batch,
        num_envs=a.env_batch,
        buffer_size=a.buffer,
        grad_updates_per_step=1.0,
        matmul_dtype=a.matmul_dtype,
        same_start=a.starts == "same",
    )
    P, B = a.pop, a.env_batch
    iters = a.steps_per_call // B

    def start(key):
        init_key, run_key = jr.split(key)
        return agent.init_run(env, agent.init(key=init_key), key=run_key)

    init = eqx.filter_jit(eqx.filter_vmap(start))
    t0 = time.perf_counter()
    pop = jax.block_until_ready(init(jr.split(jr.key(0), P)))
    t_init = time.perf_counter() - t0

    if a.devices > 1:
        mesh = q.device_mesh(a.devices)
        train = lambda s, k: q.rl.train_population_sharded(agent, env, s, iters, key=k, mesh=mesh)
    else:
        train = lambda s, k: q.rl.train_population(agent, env, s, iters, groups=a.groups, key=k)
    evaluate = eqx.filter_jit(
        eqx.filter_vmap(lambda s, k: agent.evaluate(env, s.agent_state, B, key=k))
    )

    groups = 1 if a.devices > 1 else q.rl.population_groups(pop, a.groups)
    compiled_at = []  # (when each XLA compile ended, its seconds): JAX's event fires as one does

    def on_event(name, secs, **kwargs):
        if name == "/jax/core/compile/backend_compile_duration":
            compiled_at.append((time.perf_counter(), secs))

    jax.monitoring.register_event_duration_secs_listener(on_event)
    key = jr.key(1)
    train_times, eval_times, returns = [], [], []
    for i in range(a.calls):  # call 0 compiles: it is reported apart
        key, k1, k2 = jr.split(key, 3)
        t0 = time.perf_counter()
        pop, metrics = jax.block_until_ready(train(pop, k1))
        train_times.append(time.perf_counter() - t0)
        if i == 0:  # tracing, lowering and XLA: to the end of the call's last compile
            t_compile = _compile_seconds([c for c in compiled_at if c[0] >= t0], t0)
        t0 = time.perf_counter()
        ev = jax.block_until_ready(evaluate(pop, jr.split(k2, P)))
        eval_times.append(time.perf_counter() - t0)
        returns.append([float(r) for r in jnp.mean(ev.returns, axis=-1)])  # one per agent
        print(
            f"call {i}: train {train_times[-1]:.2f} s, eval {eval_times[-1]:.2f} s, "
            f"mean return {float(jnp.mean(ev.returns)):.1f}, max {float(jnp.max(ev.returns)):.1f}"
        )
    steady = train_times[1:] if len(train_times) > 1 else train_times
    t = statistics.median(steady)
    t_estimate = train_times[0] - t
    grad_steps = P * iters * B
    print(
        f"jax {jax.__version__} | {a.env} | {P} agents x {B} envs | "
        f"hidden {a.hidden} batch {a.batch} | matmul {a.matmul_dtype} | starts {a.starts}"
    )
    print(
        f"init {t_init:.2f} s | train compile {t_compile:.2f} s (first call minus a steady one: "
        f"{t_estimate:.2f} s)"
        f" | train call median {t:.2f} s | devices {a.devices} | groups {groups}"
    )
    print(
        f"SAC grad steps/s (sum over {P} agents): {grad_steps / t:,.0f} "
        f"(per agent {grad_steps / P / t:,.1f})"
    )
    print(f"env steps/s while training: {P * a.steps_per_call / t:,.0f}")
    eval_rate = P * B * a.episode_length / min(eval_times[1:] or eval_times)
    print(f"eval env steps/s: {eval_rate:,.0f}")
    res = {
        "bench": "sac_population", "env": a.env, "pop": P, "env_batch": B,
        "steps_per_call": a.steps_per_call, "hidden": a.hidden, "batch": a.batch,
        "devices": a.devices, "groups": groups, "matmul_dtype": a.matmul_dtype, "starts": a.starts,
        "matmul_dtype_taken": resolve_matmul_dtype(a.matmul_dtype),
        "jax": jax.__version__,
        "init_s": t_init, "eval_returns_per_call": returns,
        "train_compile_s": t_compile, "train_compile_estimate_s": t_estimate,
        "train_call_s": train_times,
        "grad_steps_per_s": grad_steps / t, "eval_env_steps_per_s": eval_rate,
    }  # fmt: skip
    print("JSON " + json.dumps(res))


def _compile_seconds(compiles: list[tuple[float, float]], start: float) -> float:
    """A first call's compile: from its `start` to the end of its longest XLA compile (the
    training program's; its tracing and lowering come before), plus the XLA seconds of the
    compiles that end after it (with `train_population`'s groups, the small programs that
    join the groups' results, compiled once the groups have run). 0 where nothing compiled."""
    if not compiles:
        return 0.0
    end, _ = max(compiles, key=lambda c: c[1])
    return end - start + sum(secs for at, secs in compiles if at > end)


if __name__ == "__main__":
    main()
