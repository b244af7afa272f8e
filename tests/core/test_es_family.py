"""The scalable strategies behind the ES emitters (sep-CMA-ES, LM-MA-ES, OpenAI-ES): one
generation of each against pyribs 0.12's update written out in NumPy (float64) and given the same
samples, sampling, stop tolerances, the emitter's `es` choice, its memory refusal, and learning
on the projected sphere."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd._es_base import AbstractEvolutionStrategy


DIM, BATCH = 12, 8
TELL = eqx.filter_jit(lambda es, s, x, o, m: es.tell(s, x, o, m))
SAMPLE = eqx.filter_jit(lambda es, s, k: es.sample(s, key=k))


def _weights(mu):
    w = np.log(mu + 0.5) - np.log(np.arange(1, mu + 1))
    return w / w.sum()


# --- sep-CMA-ES ---------------------------------------------------------------------------------


def _numpy_sep_tell(state, solutions, order, mu, batch, n):
    """pyribs' `SeparableCMAEvolutionStrategy.tell`, from its formulas."""
    mean, sigma = np.float64(state["mean"]), float(state["sigma"])
    pc, ps, cov = (np.float64(state[k]) for k in ("pc", "ps", "cov"))
    evaluations = int(state["evaluations"]) + batch
    if mu == 0:
        return dict(mean=mean, sigma=sigma, pc=pc, ps=ps, cov=cov, evaluations=evaluations)
    w = _weights(mu)
    mueff = w.sum() ** 2 / (w**2).sum()
    cc = (1 + 1 / n + mueff / n) / (n**0.5 + 1 / n + 2 * mueff / n)
    cs = (mueff + 2) / (n + mueff + 5)
    c1 = 2 / ((n + 1.3) ** 2 + mueff) / (n + 2 * np.sqrt(n) + mueff / n)
    cmu = min(1 - c1, (mueff + 1 / mueff - 2) / (n + 4 * np.sqrt(n) + mueff / 2))
    damps = 1 + 2 * max(0, np.sqrt((mueff - 1) / (n + 1)) - 1) + cs
    parents = np.float64(solutions)[order][:mu]
    new_mean = (parents * w[:, None]).sum(0)
    y = new_mean - mean
    ps = (1 - cs) * ps + np.sqrt(cs * (2 - cs) * mueff) / sigma * (y / np.sqrt(cov))
    left = (ps**2).sum() / n / (1 - (1 - cs) ** (2 * evaluations / batch))
    hsig = 1.0 if left < 2 + 4.0 / (n + 1) else 0.0
    pc = (1 - cc) * pc + hsig * np.sqrt(cc * (2 - cc) * mueff) * y
    ys = parents - mean
    rank_mu = ((ys * w[:, None]) * ys).sum(0)
    c1a = c1 * (1 - (1 - hsig**2) * cc * (2 - cc))
    cov = cov * (1 - c1a - cmu * w.sum()) + c1 * pc**2 * c1 + rank_mu * cmu / sigma**2
    sigma = sigma * np.exp(min(1, cs / damps * ((ps**2).sum() / n - 1) / 2))
    return dict(mean=new_mean, sigma=sigma, pc=pc, ps=ps, cov=cov, evaluations=evaluations)


SEP = q.SepCMAES(DIM, BATCH, sigma0=0.7)


@pytest.mark.parametrize("mu", [0, 1, 3, 8])
def test_sep_cma_es_generation_matches_numpy_reference(mu, getkey):
    k = jr.split(getkey(), 5)
    state = eqx.tree_at(
        lambda s: (s.cov, s.pc, s.ps, s.sigma, s.evaluations),
        SEP.init(jr.normal(k[0], (DIM,))),
        (
            jr.uniform(k[1], (DIM,), minval=0.3, maxval=3.0),
            0.3 * jr.normal(k[2], (DIM,)),
            0.3 * jr.normal(k[3], (DIM,)),
            jnp.float32(0.9),
            jnp.int32(3 * BATCH),
        ),
    )
    solutions = SAMPLE(SEP, state, k[4])
    order = jr.permutation(getkey(), BATCH)
    new = TELL(SEP, state, solutions, order, jnp.int32(mu))
    fields = ("mean", "sigma", "pc", "ps", "cov", "evaluations")
    want = _numpy_sep_tell(
        {f: np.asarray(getattr(state, f)) for f in fields},
        np.asarray(solutions), np.asarray(order), mu, BATCH, DIM,
    )  # fmt: skip
    for name in ("mean", "sigma", "pc", "ps", "cov"):
        np.testing.assert_allclose(np.asarray(getattr(new, name)), want[name], rtol=2e-4, atol=2e-5)
    assert int(new.evaluations) == want["evaluations"]


def test_sep_cma_es_samples_its_diagonal_distribution(getkey):
    es = q.SepCMAES(3, 4000, sigma0=0.5)
    state = eqx.tree_at(
        lambda s: (s.mean, s.cov), es.init(jnp.zeros(3)), (jnp.asarray([1.0, -2.0, 0.0]),
        jnp.asarray([1.0, 4.0, 0.25]))
    )  # fmt: skip
    x = SAMPLE(es, state, getkey())
    np.testing.assert_allclose(np.mean(x, 0), [1.0, -2.0, 0.0], atol=0.05)
    np.testing.assert_allclose(np.std(x, 0), [0.5, 1.0, 0.25], rtol=0.05)


# --- LM-MA-ES -----------------------------------------------------------------------------------


N_VECTORS = 5
LM = q.LMMAES(DIM, BATCH, sigma0=0.7, n_vectors=N_VECTORS)


def _numpy_lm_shape(z, generations, vectors, n):
    """pyribs' `_transform_and_check_sol`: the first `min(generations, m)` maps, in turn."""
    cd = 1 / (1.5 ** np.arange(len(vectors)) * n)
    d = np.float64(z)
    for j in range(min(generations, len(vectors))):
        d = (1 - cd[j]) * d + cd[j] * vectors[j][None, :] * (d @ vectors[j])[:, None]
    return d


def _numpy_lm_tell(state, z, solutions, order, mu, batch, n):
    """pyribs' `LMMAEvolutionStrategy.tell`, given the noise `z` the samples were drawn from
    (pyribs keeps it; ours recovers it from the samples)."""
    mean, sigma = np.float64(state["mean"]), float(state["sigma"])
    ps, m = np.float64(state["ps"]), np.float64(state["vectors"])
    generations = int(state["generations"]) + 1
    if mu == 0:
        return dict(mean=mean, sigma=sigma, ps=ps, vectors=m, generations=generations)
    cs = 2 * batch / n
    cc = batch / (4.0 ** np.arange(len(m)) * n)
    w = _weights(mu)
    mueff = w.sum() ** 2 / (w**2).sum()
    z_mean = (w[:, None] * np.float64(z)[order][:mu]).sum(0)
    mean = (w[:, None] * np.float64(solutions)[order][:mu]).sum(0)
    ps = (1 - cs) * ps + np.sqrt(mueff * cs * (2 - cs)) * z_mean
    m = (1 - cc[:, None]) * m + np.sqrt(mueff * cc[:, None] * (2 - cc[:, None])) * z_mean[None]
    sigma = sigma * np.exp(cs / 2 * ((ps**2).sum() / n - 1))
    return dict(mean=mean, sigma=sigma, ps=ps, vectors=m, generations=generations)


def _lm_state(key, generations):
    k = jr.split(key, 4)
    return eqx.tree_at(
        lambda s: (s.vectors, s.ps, s.sigma, s.generations),
        LM.init(jr.normal(k[0], (DIM,))),
        (
            jr.normal(k[1], (N_VECTORS, DIM)),
            0.3 * jr.normal(k[2], (DIM,)),
            jnp.float32(0.8),
            jnp.int32(generations),
        ),
    )


@pytest.mark.parametrize("mu", [0, 1, 3, 8])
@pytest.mark.parametrize("generations", [0, 2, 9])
def test_lm_ma_es_generation_matches_numpy_reference(mu, generations, getkey):
    """Given pyribs' samples (its maps applied to a known noise, in float64), our `tell`
    recovers the parents' weighted noise from the samples and makes pyribs' update; with
    fewer generations than vectors only the used vectors shape the samples."""
    state = _lm_state(getkey(), generations)
    z = np.asarray(jr.normal(getkey(), (BATCH, DIM)), np.float64)
    vectors = np.asarray(state.vectors, np.float64)
    d = _numpy_lm_shape(z, generations, vectors, DIM)
    solutions = np.asarray(state.mean, np.float64) + float(state.sigma) * d
    order = np.asarray(jr.permutation(getkey(), BATCH))
    new = TELL(LM, state, jnp.asarray(solutions, jnp.float32), jnp.asarray(order), jnp.int32(mu))
    fields = ("mean", "sigma", "ps", "vectors", "generations")
    want = _numpy_lm_tell(
        {f: np.asarray(getattr(state, f)) for f in fields}, z, solutions, order, mu, BATCH, DIM
    )
    for name in ("mean", "sigma", "ps", "vectors"):
        np.testing.assert_allclose(np.asarray(getattr(new, name)), want[name], rtol=5e-4, atol=5e-5)
    assert int(new.generations) == want["generations"]


def test_lm_ma_es_samples_through_pyribs_maps(getkey):
    """Our samples are pyribs' maps of our noise: drawn with the same key, `sample` equals
    the NumPy maps applied to `jr.normal` of the key `sample` draws its first batch with."""
    state = _lm_state(getkey(), 3)
    key = getkey()
    x = np.asarray(SAMPLE(LM, state, key))
    z = np.asarray(jr.normal(jr.split(key)[1], (BATCH, DIM)), np.float64)
    d = _numpy_lm_shape(z, 3, np.asarray(state.vectors, np.float64), DIM)
    want = np.asarray(state.mean) + float(state.sigma) * d
    np.testing.assert_allclose(x, want, rtol=1e-4, atol=1e-4)


# --- OpenAI-ES ----------------------------------------------------------------------------------


def _numpy_openai_tell(state, solutions, order, batch, sigma0, mirror, lr, l2):
    """pyribs' `OpenAIEvolutionStrategy.tell` and its `AdamOpt.step`, with the noise the
    samples were drawn with."""
    theta = np.float64(state["mean"])
    m, v, t = np.float64(state["moment1"]), np.float64(state["moment2"]), int(state["steps"])
    noise = (np.float64(solutions) - theta) / sigma0
    ranks = np.empty(batch)
    ranks[order[::-1]] = np.arange(batch)
    ranks = ranks / (batch - 1) - 0.5
    if mirror:
        h = batch // 2
        gradient = (noise[:h] * (ranks[:h] - ranks[h:])[:, None]).sum(0) / (h * sigma0)
    else:
        gradient = (noise * ranks[:, None]).sum(0) / (batch * sigma0)
    g = -gradient + l2 * theta
    t += 1
    a = lr * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    new = theta - a * m / (np.sqrt(v) + 1e-8)
    ratio = np.linalg.norm(new - theta) / np.linalg.norm(new)
    return dict(mean=new, moment1=m, moment2=v, steps=t, update_ratio=ratio)


@pytest.mark.parametrize("mirror", [True, False])
@pytest.mark.parametrize("steps", [0, 4])
def test_openai_es_generation_matches_numpy_reference(mirror, steps, getkey):
    es = q.OpenAIES(DIM, BATCH, sigma0=0.3, mirror_sampling=mirror, learning_rate=0.05,
                    l2_coeff=0.01)  # fmt: skip
    k = jr.split(getkey(), 4)
    state = eqx.tree_at(
        lambda s: (s.moment1, s.moment2, s.steps),
        es.init(jr.normal(k[0], (DIM,))),
        (0.1 * jr.normal(k[1], (DIM,)), jr.uniform(k[2], (DIM,)) * 0.01, jnp.int32(steps)),
    )
    solutions = SAMPLE(es, state, k[3])
    if mirror:  # the second half mirrors the first about the mean
        centred = solutions - state.mean[None]
        np.testing.assert_allclose(centred[BATCH // 2 :], -centred[: BATCH // 2], atol=1e-6)
    order = np.asarray(jr.permutation(getkey(), BATCH))
    new = TELL(es, state, solutions, jnp.asarray(order), jnp.int32(3))
    fields = ("mean", "moment1", "moment2", "steps")
    want = _numpy_openai_tell(
        {f: np.asarray(getattr(state, f)) for f in fields},
        np.asarray(solutions), order, BATCH, 0.3, mirror, 0.05, 0.01,
    )  # fmt: skip
    for name in ("mean", "moment1", "moment2", "update_ratio"):
        np.testing.assert_allclose(np.asarray(getattr(new, name)), want[name], rtol=1e-3, atol=1e-6)
    assert int(new.steps) == want["steps"]


# --- All four: stop tolerances, the contract, the emitter --------------------------------------


ALL = {
    "cma_es": q.CMAES(DIM, BATCH, 0.5),
    "sep_cma_es": SEP,
    "lm_ma_es": LM,
    "openai_es": q.OpenAIES(DIM, BATCH, 0.5),
}


def test_the_strategies_are_the_registered_ones():
    assert set(q.EVOLUTION_STRATEGIES) == set(ALL)
    for name, es in ALL.items():
        assert isinstance(es, q.EVOLUTION_STRATEGIES[name])
        assert isinstance(es, AbstractEvolutionStrategy)


def test_stop_tolerances():
    spread, level = jnp.asarray([3.0, 2.0, 1.0]), jnp.ones(3)
    for name, es in ALL.items():
        state = es.init(jnp.ones(DIM))
        assert not bool(es.should_stop(state, spread)), name
        assert bool(es.should_stop(state, level)), name  # a flat ranking
    small = lambda es, s: eqx.tree_at(lambda t: t.sigma, s, jnp.float32(1e-13))
    assert bool(SEP.should_stop(small(SEP, SEP.init(jnp.ones(DIM))), spread))
    assert bool(LM.should_stop(small(LM, LM.init(jnp.ones(DIM))), spread))
    elongated = eqx.tree_at(lambda s: s.cov, SEP.init(jnp.ones(DIM)), jnp.ones(DIM).at[0].set(1e15))
    assert bool(SEP.should_stop(elongated, spread))
    still = eqx.tree_at(lambda s: s.update_ratio, ALL["openai_es"].init(jnp.ones(DIM)), 1e-10)
    assert bool(ALL["openai_es"].should_stop(still, spread))


@pytest.mark.parametrize("name", ["sep_cma_es", "lm_ma_es", "openai_es"])
def test_a_population_of_strategies_samples_and_tells_under_vmap(name, getkey):
    """As the emitter runs them: `init`, `sample`, `tell` and `refresh_many` over a leading
    axis; with bounds (OpenAI-ES without mirroring) every sample lies inside them."""
    options = {"mirror_sampling": False} if name == "openai_es" else {}
    es = q.EVOLUTION_STRATEGIES[name](DIM, BATCH, 1.0, -0.5, 0.5, **options)
    states = jax.vmap(lambda _: es.init(jnp.zeros(DIM)))(jnp.arange(3))
    keys = jr.split(getkey(), 3)
    x = jax.vmap(lambda s, k: es.sample(s, key=k))(states, keys)
    assert x.shape == (3, BATCH, DIM)
    assert bool(jnp.all((x >= -0.5) & (x <= 0.5)))
    order = jnp.argsort(jnp.sum(x**2, -1), axis=-1)
    told = jax.vmap(lambda s, xi, o: es.tell(s, xi, o, jnp.int32(4)))(states, x, order)
    told = es.refresh_many(told)
    assert jax.tree.structure(told) == jax.tree.structure(states)
    assert not bool(jnp.all(told.mean == states.mean))


def test_state_sizes_are_what_each_strategy_holds():
    n, b = 100_000, 40
    assert q.SepCMAES(n, b, 1.0).state_bytes == 4 * (4 * n + 2)
    assert q.LMMAES(n, b, 1.0).state_bytes == 4 * (2 * n + b * n + 2)
    assert q.OpenAIES(n, b, 1.0).state_bytes == 4 * (3 * n + 2)
    assert q.CMAES(n, b, 1.0).state_bytes > 3 * 4 * n * n  # three n x n matrices


# --- The emitter ---------------------------------------------------------------------------------


SPHERE = q.ProjectedSphere(20)
CELLS = q.GridTessellation((10, 10), *SPHERE.descriptor_bounds)


def _mae(es, **kw):
    return q.EvolutionStrategyEmitter(
        jnp.zeros(20), 0.5, num_emitters=2, emitter_batch_size=10, ranker="imp",
        selection_rule="mu", restart_rule="basic", es=es, **kw,
    )  # fmt: skip


def _run(emitter, iterations, key):
    algo = q.MAPElites(emitter, SPHERE, archive_learning_rate=0.01, threshold_min=0.0)
    state, _ = algo.init(SPHERE.init_genotypes(1, key=key), CELLS, key=key)
    return q.run(algo, state, iterations, key=jr.fold_in(key, 1))


@pytest.mark.slow
def test_the_emitter_runs_the_strategy_it_is_given(getkey):
    for name, cls in q.EVOLUTION_STRATEGIES.items():
        assert type(_mae(name).es) is cls
    built = q.LMMAES(20, 10, 0.5, n_vectors=4)
    emitter = q.EvolutionStrategyEmitter(jnp.zeros(20), None, num_emitters=2, es=built)
    assert emitter.es is built and emitter.batch_size == 20
    state, _ = _run(_mae("lm_ma_es", es_options={"n_vectors": 4}), 3, getkey())
    assert state.emitter_state.es.vectors.shape == (2, 4, 20)
    assert int(state.emitter_state.es.generations[0]) == 3


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sep_cma_es", "lm_ma_es", "openai_es"])
def test_cma_mae_learns_with_each_strategy(name, getkey):
    """CMA-MAE with each scalable strategy spreads over the 20-D projected sphere's grid in
    60 iterations of 2 x 10 candidates: from 4 of 100 cells after the first iteration to at
    least 10 (full CMA-ES: 13 and 18 on two seeds; these three 13 to 22, OpenAI-ES at a
    learning rate of 0.2; at pyribs' default 0.001 its mean barely moves in 60 steps)."""
    options = {"learning_rate": 0.2} if name == "openai_es" else {}
    state, metrics = _run(_mae(name, es_options=options), 60, getkey())
    assert float(metrics.coverage[-1]) >= 0.1, float(metrics.coverage[-1])
    assert float(metrics.qd_score[-1]) > 3.0 * float(metrics.qd_score[0])


def test_bad_input_is_named():
    x0 = jnp.zeros(20)
    with pytest.raises(ValueError, match=r"es must be one of cma_es, sep_cma_es"):
        q.EvolutionStrategyEmitter(x0, 0.5, es="pycma")
    with pytest.raises(ValueError, match=r"es 'lm_ma_es' has no option 'lr'; it takes n_vectors"):
        q.EvolutionStrategyEmitter(x0, 0.5, es="lm_ma_es", es_options={"lr": 0.1})
    with pytest.raises(ValueError, match=r"square_roots is an option of es 'cma_es'"):
        q.EvolutionStrategyEmitter(x0, 0.5, es="sep_cma_es", square_roots="eigh")
    with pytest.raises(ValueError, match=r"emitter_batch_size \(30\) must not exceed dim \(20\)"):
        q.EvolutionStrategyEmitter(x0, 0.5, es="lm_ma_es", emitter_batch_size=30)
    with pytest.raises(ValueError, match=r"batch_size must be even with mirror_sampling"):
        q.EvolutionStrategyEmitter(x0, 0.5, es="openai_es", emitter_batch_size=7)
    with pytest.raises(ValueError, match=r"mirror_sampling takes no bounds"):
        q.EvolutionStrategyEmitter(x0, 0.5, es="openai_es", lower=-1.0)
    with pytest.raises(ValueError, match=r"beta2 must be below 1"):
        q.OpenAIES(4, 4, 0.5, beta2=1.0)
    with pytest.raises(ValueError, match=r"brings its own settings; leave sigma0"):
        q.EvolutionStrategyEmitter(x0, 0.5, es=q.SepCMAES(20, 4, 0.5))
    with pytest.raises(ValueError, match=r"es is over 4 variables, x0 has 20"):
        q.EvolutionStrategyEmitter(x0, None, es=q.SepCMAES(4, 4, 0.5))
    with pytest.raises(ValueError, match=r"sigma0 must be given with es 'cma_es'"):
        q.EvolutionStrategyEmitter(x0, None)
    # Full CMA-ES over 300,000 variables: three 360 GB matrices per strategy.
    need = q.CMAES(300_000, 10, 0.5).state_bytes / 2**30
    with pytest.raises(ValueError, match=rf"1 cma_es strategies over 300000 variables would "
                       rf"hold {need:,.1f} GiB of state, more than this device's"):  # fmt: skip
        q.EvolutionStrategyEmitter(jnp.zeros(300_000), 0.5, num_emitters=1)
