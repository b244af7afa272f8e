"""Where a SAC population's training call spends its time, from XLA's own trace of it.

The first step of issue 48 on a kind of machine not seen before: before trying a lever, see where
the time goes there. Runs the `sac.py` workload (hopper, 8 agents x 16 envs, networks (256, 256),
batch 256, one gradient step per environment step) for a short call of ``--iterations`` (20: 320
gradient steps of every agent) and prints:

- the machine (`compare.py`'s line: ``lscpu`` model, family, model number, vector flags);
- the compile, split by JAX's own timers (tracing, lowering, XLA) and, inside XLA, by the
  profiler's events (HLO passes, LLVM code generation);
- for each thread of XLA's CPU pool, the share of a steady call it spent running operations
  (the rest: waiting for operations it depends on, or for the pool);
- thread time per gradient step by kind of operation (XLA's operation names without their
  numbers: ``dot`` (Eigen products), ``ynn_fusion`` / ``xnn_fusion`` (library products with
  what was fused into them), ``*_fusion`` (element-wise loops), ``copy``, ``while``), each
  operation's time without the operations that ran nested inside it;
- one of the step's hidden products alone (``[P, batch, h] x [P, h, h]``) in GFLOP/s: what the
  CPU's products reach when nothing else runs, the yardstick for the table.

``--update-only`` profiles `SAC.update` alone (a fixed minibatch, no environment, no buffer).
``--json`` adds one ``JSON {...}`` line. The trace's event names are XLA's (JAX 0.10): a later
XLA may name its wrapper events differently (`_WRAPPERS`).

Usage: python benchmarks/profile_sac.py [--iterations 20] [--update-only] [--pop 8]
"""

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time


_WRAPPERS = ("ThunkExecutor", "SlinkyThreadPool", "ThreadpoolListener", "end: ")
"""Prefixes of trace events that wrap or mark operations rather than run one."""


def load_trace(folder: str) -> dict:
    """The perfetto trace (``*.trace.json.gz``) that `jax.profiler` wrote under `folder`."""
    paths = sorted(glob.glob(os.path.join(folder, "**", "*.trace.json.gz"), recursive=True))
    if not paths:
        raise FileNotFoundError(f"no *.trace.json.gz under {folder}: did the profiler run?")
    with gzip.open(paths[-1]) as f:
        return json.load(f)


def _thread_names(trace: dict) -> dict:
    return {
        (e["pid"], e["tid"]): e.get("args", {}).get("name", "")
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }


def operation_events(trace: dict) -> dict[tuple, list[dict]]:
    """Complete events (``ph == "X"``) of operations, by thread, for every thread but Python's:
    XLA's pool threads. Wrapper and marker events (`_WRAPPERS`) and Python frames (``$...``)
    are left out."""
    names = _thread_names(trace)
    threads: dict[tuple, list[dict]] = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        thread = (e.get("pid"), e.get("tid"))
        if e.get("ph") != "X" or names.get(thread, "") == "python":
            continue
        if e["name"].startswith(_WRAPPERS) or e["name"].startswith("$"):
            continue
        threads[thread].append(e)
    return dict(threads)


def busy_time(events: list[dict]) -> float:
    """The length (the trace's unit, microseconds) of the union of the events' intervals: the
    time a thread spent inside any operation, nested ones counted once."""
    total, start, end = 0.0, None, None
    for e in sorted(events, key=lambda e: e["ts"]):
        s, t = e["ts"], e["ts"] + e["dur"]
        if start is None or s > end:
            total += 0.0 if start is None else end - start
            start, end = s, t
        else:
            end = max(end, t)
    return total + (0.0 if start is None else end - start)


def category(name: str) -> str:
    """An operation's kind: its XLA name without the instance number (``dot.1047`` -> ``dot``)."""
    return re.sub(r"\.\d+$", "", name)


def exclusive_times(events: list[dict]) -> dict[str, float]:
    """Time by `category` on one thread, each event's duration less that of the events nested
    directly inside it (a thread waiting inside one operation may run another)."""
    out: dict[str, float] = collections.defaultdict(float)
    stack: list[dict] = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            parent = stack[-1]
            inside = min(e["ts"] + e["dur"], parent["ts"] + parent["dur"]) - e["ts"]
            out[category(parent["name"])] -= inside
        out[category(e["name"])] += e["dur"]
        stack.append(e)
    return dict(out)


def summarise(trace: dict, wall_us: float, steps: int) -> dict:
    """Per-thread busy shares of `wall_us` and exclusive thread time per step (microseconds)
    by category, largest first."""
    threads = operation_events(trace)
    busy = {f"{t[1]}": busy_time(ev) / wall_us for t, ev in threads.items()}
    by_kind: dict[str, float] = collections.defaultdict(float)
    for ev in threads.values():
        for kind, us in exclusive_times(ev).items():
            by_kind[kind] += us
    kinds = dict(sorted(((k, v / steps) for k, v in by_kind.items()), key=lambda kv: -kv[1]))
    return {"busy_share": busy, "us_per_step": kinds}


def compile_events(trace: dict) -> dict[str, float]:
    """Seconds of XLA's compile stages found in a trace of ``.compile()``: its HLO passes and
    its code generation (events named so by XLA's CPU compiler; absent ones are left out)."""
    stages = {
        "HLO passes": re.compile(r"^HLO passes (through|after) layout assignment"),
        "code generation": re.compile(r"^Codegen$"),
        "XLA in all": re.compile(r"^PjRtCpuClient::Compile$"),
    }
    out: dict[str, float] = collections.defaultdict(float)
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        for stage, pattern in stages.items():
            if pattern.match(e["name"]):
                out[stage] += e["dur"] / 1e6
    return dict(out)


def _traced(fn):
    """`fn()` under `jax.profiler`: its value, its seconds, and the trace it left."""
    import jax

    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder, create_perfetto_trace=True)
        t0 = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - t0
        jax.profiler.stop_trace()
        return value, seconds, load_trace(folder)


def _product_rate(P: int, batch: int, h: int) -> float:
    """GFLOP/s of one ``[P, batch, h] x [P, h, h]`` product alone (best of 5 x 20)."""
    import jax
    import jax.numpy as jnp

    x = jax.random.normal(jax.random.key(0), (P, batch, h))
    w = jax.random.normal(jax.random.key(1), (P, h, h))
    f = jax.jit(lambda x, w: jnp.einsum("pbi,pio->pbo", x, w))
    f(x, w).block_until_ready()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            r = f(x, w)
        r.block_until_ready()
        best = min(best, (time.perf_counter() - t0) / 20)
    return 2 * P * batch * h * h / best / 1e9


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="hopper_uni")
    p.add_argument("--pop", type=int, default=8)
    p.add_argument("--env-batch", type=int, default=16)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--update-only", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(sys.argv[1:])

    import equinox as eqx
    import jax
    import jax.monitoring
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q
    from eqx_qd._compile import compiler_options
    from eqx_qd.envs import Transition

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare import _machine

    timers: dict[str, float] = collections.defaultdict(float)
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: timers.__setitem__(name, timers[name] + secs)
    )
    env = q.envs.BraxQDEnv(a.env, episode_length=100, reset_noise=True)
    agent = q.rl.SAC(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=(a.hidden, a.hidden),
        critic_hidden=(a.hidden, a.hidden),
        minibatch_size=a.batch,
        num_envs=a.env_batch,
        buffer_size=100_000,
        grad_updates_per_step=1.0,
        same_start=True,  # sac.py's default starts, QDax's
    )
    P, B = a.pop, a.env_batch
    steps = a.iterations * B  # gradient steps of every agent in one call

    if a.update_only:

        def minibatch(k):
            k1, k2, k3, k4 = jr.split(k, 4)
            n, o, u = a.batch, env.observation_size, env.action_size
            return Transition(
                obs=jr.normal(k1, (n, o)), action=jnp.tanh(jr.normal(k2, (n, u))),
                reward=jr.normal(k3, (n,)), next_obs=jr.normal(k4, (n, o)),
                terminated=jnp.zeros(n), truncated=jnp.zeros(n),
            )  # fmt: skip

        state = eqx.filter_vmap(lambda k: agent.init(key=k))(jr.split(jr.key(0), P))
        data = eqx.filter_vmap(minibatch)(jr.split(jr.key(1), P))

        def call(state, key):
            def body(s, k):
                update = eqx.filter_vmap(lambda st, b, kk: agent.update(st, b, key=kk))
                s, metrics = update(s, data, jr.split(k, P))
                return s, metrics["critic_loss"]

            return jax.lax.scan(body, state, jr.split(key, steps))[0]

    else:

        def start(key):
            k1, k2 = jr.split(key)
            return agent.init_run(env, agent.init(key=k1), key=k2)

        state = eqx.filter_jit(eqx.filter_vmap(start))(jr.split(jr.key(0), P))
        call = lambda s, k: q.rl.train_population(agent, env, s, a.iterations, groups=1, key=k)[0]

    state = jax.block_until_ready(state)
    timers.clear()
    lowered = eqx.filter_jit(call).lower(state, jr.key(2))
    compiled, t_xla, trace = _traced(lambda: lowered.compile(compiler_options=compiler_options()))
    stages = compile_events(trace)
    trace_s = timers["/jax/core/compile/jaxpr_trace_duration"]
    lower_s = timers["/jax/core/compile/jaxpr_to_mlir_module_duration"]

    for i in range(2):
        state = jax.block_until_ready(compiled(state, jr.key(3 + i)))
    state, wall, trace = _traced(lambda: jax.block_until_ready(compiled(state, jr.key(9))))
    summary = summarise(trace, wall * 1e6, steps)
    rate = _product_rate(P, a.batch, a.hidden)

    what = "SAC.update alone" if a.update_only else "SAC population training call"
    machine = _machine()
    print(f"{machine}; jax {jax.__version__}")
    sizes = f"hidden ({a.hidden}, {a.hidden}), batch {a.batch}"
    print(f"{what}: {a.env}, {P} agents x {B} envs, {sizes}")
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in stages.items())
    print(f"compile: tracing {trace_s:.2f} s, lowering {lower_s:.2f} s, XLA {t_xla:.2f} s", end="")
    print(f" ({parts})")
    print(
        f"steady call (traced): {wall:.2f} s, {steps} steps of {P} agents, "
        f"{P * steps / wall:,.0f} grad steps/s (the profiler slows it a little)"
    )
    shares = ", ".join(f"{100 * v:.0f}%" for v in summary["busy_share"].values() if v >= 0.01)
    print(f"XLA pool threads running an operation: {shares} of the call (those over 1%)")
    shape = f"[{P}, {a.batch}, {a.hidden}] x [{P}, {a.hidden}, {a.hidden}]"
    print(f"one {shape} product alone: {rate:.0f} GFLOP/s")
    print("thread time per gradient step (all agents), by kind of operation:")
    total = sum(summary["us_per_step"].values())
    for kind, us in list(summary["us_per_step"].items())[:20]:
        print(f"  {us / 1e3:8.3f} ms  {100 * us / total:5.1f}%  {kind}")
    if a.json:
        res = {
            "bench": "profile_sac", "update_only": a.update_only, "machine": machine,
            "jax": jax.__version__, "trace_s": trace_s, "lower_s": lower_s, "xla_s": t_xla,
            "compile_stages_s": stages, "call_s": wall, "steps": steps, "pop": P,
            "product_gflops": rate, **summary,
        }  # fmt: skip
        print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
