"""One evolution strategy's generations: ours (`CMAES`, or `--es` another of
`EVOLUTION_STRATEGIES`) or evosax's counterpart (`--side evosax`, run with an interpreter that
has evosax: `CMA_ES`, `Sep_CMA_ES`, `LM_MA_ES`, `Open_ES` with Adam), for the CMA family's
shape: 15 strategies x 36 candidates x `--dim` variables (100), vmapped, `--generations` in
one `lax.scan` on the shifted sphere, the better half as parents. Prints one JSON line: seconds
per generation (median of `--rounds`, compile apart) and the best fitness reached.

Usage: python benchmarks/cma_engine.py [--side ours|evosax] [--es cma_es] [--dim 100]
       [--generations 200] [--rounds 3]
"""

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import jax.random as jr


E, B, N = 15, 36, 100


def _loss(x):  # the sphere, shifted to 2.048: minimised
    return jnp.sum((x - 2.048) ** 2, axis=-1)


def ours(generations: int, name: str = "cma_es"):
    import eqx_qd as q

    es = q.EVOLUTION_STRATEGIES[name](N, B, 0.5)

    def step(state, key):
        keys = jr.split(key, E)
        x = jax.vmap(lambda s, k: es.sample(s, key=k))(state, keys)
        loss = _loss(x)
        order = jnp.argsort(loss, axis=-1)
        state = jax.vmap(lambda s, xi, o: es.tell(s, xi, o, jnp.int32(B // 2)))(state, x, order)
        state = es.refresh_many(state)  # only the strategies whose lazy gap has passed
        return state, jnp.min(loss)

    init = jax.vmap(lambda _: es.init(jnp.zeros(N)))(jnp.arange(E))
    return init, step


def evosax(generations: int, name: str = "cma_es"):
    import optax
    from evosax import algorithms

    cls = {"cma_es": "CMA_ES", "sep_cma_es": "Sep_CMA_ES", "lm_ma_es": "LM_MA_ES"}.get(name)
    if cls is None:  # OpenAI-ES with Adam, pyribs' default rate
        strategy = algorithms.Open_ES(
            population_size=B, solution=jnp.zeros(N), optimizer=optax.adam(1e-3),
            std_schedule=optax.constant_schedule(0.5),
        )  # fmt: skip
        params = strategy.default_params
    else:
        strategy = getattr(algorithms, cls)(population_size=B, solution=jnp.zeros(N))
        params = strategy.default_params.replace(std_init=0.5)

    def step(state, key):
        ask_keys, tell_keys = jr.split(key)
        x, state = jax.vmap(lambda k, s: strategy.ask(k, s, params))(jr.split(ask_keys, E), state)
        loss = _loss(x)
        state, _ = jax.vmap(lambda k, xi, f, s: strategy.tell(k, xi, f, s, params))(
            jr.split(tell_keys, E), x, loss, state
        )
        return state, jnp.min(loss)

    init = jax.vmap(lambda k: strategy.init(k, jnp.zeros(N), params))(jr.split(jr.key(0), E))
    return init, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=["ours", "evosax"], default="ours")
    parser.add_argument("--es", default="cma_es",
                        choices=["cma_es", "sep_cma_es", "lm_ma_es", "openai_es"])  # fmt: skip
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--generations", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    global N
    N = args.dim
    init, step = (ours if args.side == "ours" else evosax)(args.generations, args.es)
    run = jax.jit(lambda s, k: jax.lax.scan(step, s, jr.split(k, args.generations)))
    t0 = time.perf_counter()
    compiled = run.lower(init, jr.key(1)).compile()
    compile_s = time.perf_counter() - t0
    times, best = [], None
    for r in range(args.rounds):
        t0 = time.perf_counter()
        _, losses = compiled(init, jr.key(r))
        jax.block_until_ready(losses)
        times.append(time.perf_counter() - t0)
        best = float(jnp.min(losses))
    out = dict(
        side=args.side, es=args.es, dim=args.dim, generations=args.generations,
        compile_s=round(compile_s, 2),
        ms_per_generation=round(1000 * statistics.median(times) / args.generations, 3),
        best_loss=best,
    )  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
