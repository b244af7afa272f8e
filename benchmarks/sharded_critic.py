"""PGA-ME's critic over several devices: data-parallel against replicated, and the cost of the
collectives beside the training they serve (issue 45).

Two ways to keep one critic over N devices, each device holding its own replay buffer:

- **replicated**: each device samples `minibatch / N` rows, the rows are all-gathered, and
  every device runs the whole minibatch's TD3 step (the same work N times; one all-gather of
  rows per step);
- **data-parallel** (what `QualityPGEmitter(axis_name=...)` does): each device runs the step
  on its `minibatch / N` rows and the gradients are averaged (`TD3.update(axis_name=...)`:
  one all-reduce of the critic's gradients per step, the policy's every `policy_delay`).

Also timed: one device on the whole minibatch (the single-device job), and the collectives
alone (the all-reduce of a critic-sized gradient, the all-gather of a minibatch's rows), each
in a scan of the same length. Workload: PGA-ME's walker2d_uni sizes (observations 17,
actions 6), critic (256, 256), policy (64, 64), minibatch 256, 300 TD3 steps per call (one
PGA-ME iteration's critic training). Medians of `--rounds` calls after a compile call.

Usage: python benchmarks/sharded_critic.py [--devices 4] [--rounds 5] [--steps 300]
"""

import argparse
import json
import os
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--minibatch", type=int, default=256)
    a = p.parse_args(sys.argv[1:])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if jax.config.jax_platforms == "cpu":
        jax.config.update("jax_num_cpu_devices", a.devices)
    import equinox as eqx
    import jax.numpy as jnp
    import jax.random as jr
    from jax.sharding import PartitionSpec as P

    import eqx_qd as q

    n, mb = a.devices, a.minibatch
    td3 = q.rl.TD3(
        observation_size=17,
        action_size=6,
        policy_hidden=(64, 64),
        critic_hidden=(256, 256),
        minibatch_size=mb,
        num_envs=1,
        buffer_size=1000,
    )
    state = td3.init(key=jr.key(0))
    rows = 4096
    k = jr.split(jr.key(1), 4)
    data = q.envs.Transition(
        jr.normal(k[0], (rows, 17)),
        jr.uniform(k[1], (rows, 6), minval=-1.0, maxval=1.0),
        jr.normal(k[2], (rows,)),
        jr.normal(k[3], (rows, 17)),
        jnp.zeros(rows),
        jnp.zeros(rows),
    )
    mesh = q.device_mesh(n)
    take = lambda idx: jax.tree.map(lambda x: x[idx], data)

    def train(axis, share, gather):
        def body(s, key):
            sample_key, update_key = jr.split(key)
            batch = take(jr.randint(sample_key, (share,), 0, rows))
            if gather:
                batch = jax.tree.map(lambda x: jax.lax.all_gather(x, "p", tiled=True), batch)
            s, _ = td3.update(s, batch, axis_name=axis, key=update_key)
            return s, None

        def run(key):
            s, _ = jax.lax.scan(body, state, jr.split(key, a.steps))
            return jax.tree.leaves(eqx.filter(s.critic, eqx.is_array))[0][None]

        return run

    grads = eqx.filter(state.critic, eqx.is_array)

    def all_reduce(key):
        def body(g, _):
            return jax.tree.map(lambda x: jax.lax.pmean(x + 1e-6, "p"), g), None

        g, _ = jax.lax.scan(body, grads, None, length=a.steps)
        return jax.tree.leaves(g)[0][None]

    def all_gather_rows(key):
        def body(c, k2):
            batch = take(jr.randint(k2, (mb // n,), 0, rows))
            full = jax.tree.map(lambda x: jax.lax.all_gather(x, "p", tiled=True), batch)
            return c + jnp.sum(full.obs[:, :1]), None

        c, _ = jax.lax.scan(body, jnp.zeros(()), jr.split(key, a.steps))
        return c[None]

    def on_mesh(fn):
        mapped = jax.shard_map(fn, mesh=mesh, in_specs=P("p"), out_specs=P("p"), check_vma=False)
        return jax.jit(mapped)

    cases = {
        "one device, whole minibatch": jax.jit(lambda key: train(None, mb, False)(key[0])),
        "replicated (rows gathered, whole step on each)": on_mesh(
            lambda key: train(None, mb // n, True)(key[0])
        ),
        "data-parallel (share per device, gradients averaged)": on_mesh(
            lambda key: train("p", mb // n, False)(key[0])
        ),
        "all-reduce of the critic's gradients alone": on_mesh(lambda key: all_reduce(key[0])),
        "all-gather of a minibatch's rows alone": on_mesh(lambda key: all_gather_rows(key[0])),
    }
    keys = jr.split(jr.key(2), n)
    one_key = keys[:1]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare import _machine  # lscpu's model, family, model number, vector flags

    out = {"devices": n, "steps": a.steps, "minibatch": mb, "machine": _machine()}
    print(out["machine"], flush=True)
    for name, fn in cases.items():
        arg = one_key if name.startswith("one device") else keys
        t0 = time.perf_counter()
        jax.block_until_ready(fn(arg))
        compile_s = time.perf_counter() - t0
        times = []
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(arg))
            times.append(time.perf_counter() - t0)
        ms = 1000 * statistics.median(times) / a.steps
        out[name] = {"ms_per_step": round(ms, 3), "first_call_s": round(compile_s, 2)}
        print(f"{name:55s} {ms:8.3f} ms/step", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
