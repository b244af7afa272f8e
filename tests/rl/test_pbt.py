import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, Phase, settings, strategies as st

import eqx_qd as q
from eqx_qd.rl import _pbt


ENV = q.envs.PointMaze(walls=False, length=20)
AGENT = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(8,),
              minibatch_size=8, num_envs=2, buffer_size=16)  # fmt: skip
POP = 6


@functools.cache
def _population():
    pop = q.rl.init_population(AGENT, ENV, None, POP, key=jr.key(0))
    # Give each member a distinct buffer so that copies can be traced.
    pop, _ = q.rl.train_population(AGENT, ENV, pop, 2, key=jr.key(1))
    return pop


@functools.cache
def _pbt_update():
    pbt = q.rl.PBT(POP, 2, 3, AGENT.hparam_spaces)
    return pbt, eqx.filter_jit(lambda p, r, k: pbt.update(p, r, key=k))


# Module-level caches, not fixtures: hypothesis would print the whole population in its repr.
@pytest.fixture
def population():
    return _population()


@pytest.fixture
def pbt_update():
    return _pbt_update()


def _member(pop, i):
    return q.internal.tree_take(pop, i)


# The fast tier keeps a whole PBT round (`test_a_pbt_round_is_train_evaluate_exploit`).
@pytest.mark.slow
@settings(max_examples=15, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(
    returns=st.lists(
        st.one_of(st.floats(-100, 100, allow_subnormal=False), st.just(float("nan"))),
        min_size=POP,
        max_size=POP,
    ),
    seed=st.integers(0, 999),
)
def test_pbt_replaces_the_worst_by_copies_of_the_best(returns, seed):
    population = _population()
    pbt, update = _pbt_update()
    values = np.asarray(returns, np.float32)  # what PBT sees (tiny float64s tie at 0)
    new, info = update(population, jnp.asarray(values), jr.key(seed))
    ranked = np.where(np.isnan(values), -np.inf, values)  # NaN ranks last
    replaced, sources = np.asarray(info.replaced), np.asarray(info.sources)
    kept = np.setdiff1d(np.arange(POP), replaced)
    assert len(set(replaced.tolist())) == 3
    assert ranked[replaced].max() <= ranked[kept].min()  # the worst go (ties broken either way)
    second_best = np.sort(ranked)[-2]
    assert np.all(ranked[sources] >= second_best)  # copies of the 2 best
    assert not set(sources.tolist()) & set(replaced.tolist())  # the best are never replaced
    assert new.env_steps.shape == (POP,)
    for i in range(POP):
        after = _member(new, i)
        if i in replaced:
            source = _member(population, int(sources[replaced.tolist().index(i)]))
            # A copy of the whole run (policy, buffer, environments, optimiser states) but its
            # explored hyperparameters, which lie in the spaces.
            like = eqx.tree_at(lambda r: r.agent_state.hparams, after, source.agent_state.hparams)
            assert bool(eqx.tree_equal(like, source))
            for name, space in pbt.spaces.items():
                assert bool(space.contains(getattr(after.agent_state.hparams, name)))
        else:
            assert bool(eqx.tree_equal(after, _member(population, i)))


def test_nan_returns_rank_last(population, pbt_update):
    _, update = pbt_update
    r = jnp.asarray([5.0, jnp.nan, 3.0, 2.0, 1.0, 0.0], jnp.float32)
    _, info = update(population, r, jr.key(0))
    assert 1 in np.asarray(info.replaced).tolist()


@pytest.mark.slow
def test_the_compiled_exploit_is_the_eager_update(population):
    """`PBT.exploit` runs `update` as one program (eagerly it was most of a short round): the
    same population bit for bit, and each member's source from the same record."""
    pbt = q.rl.PBT(POP, 2, 3, AGENT.hparam_spaces)
    returns = np.asarray([3.0, 1.0, 4.0, 1.5, 5.0, 9.0], np.float32)
    eager, info = pbt.update(population, jnp.asarray(returns), key=jr.key(3))
    compiled, sources = pbt.exploit(population, returns, key=jr.key(3))
    assert bool(eqx.tree_equal(compiled, eager))
    expected = np.arange(POP)
    expected[np.asarray(info.replaced)] = np.asarray(info.sources)
    np.testing.assert_array_equal(sources, expected)


def test_a_pbt_round_is_train_evaluate_exploit(population):
    """`PBT.round` is the three calls it names, with the keys it says; without `exploit`,
    the trained population and every member its own source."""
    pbt = q.rl.PBT(POP, 2, 3, AGENT.hparam_spaces)
    key = jr.key(7)
    after, done = pbt.round(AGENT, ENV, ENV, population, 2, 3, groups=1, key=key)
    train_key, eval_key, exploit_key = jr.split(key, 3)
    trained, _ = q.rl.train_population(AGENT, ENV, population, 2, groups=1, key=train_key)
    ev = q.rl.evaluate_population(AGENT, ENV, trained, 3, groups=1, key=eval_key)
    returns = jnp.mean(ev.returns, axis=1)
    expected, sources = pbt.exploit(trained, returns, key=exploit_key)
    assert bool(eqx.tree_equal(after, expected))
    np.testing.assert_array_equal(done.returns, returns)
    np.testing.assert_array_equal(done.sources, sources)
    np.testing.assert_array_equal(done.env_steps, trained.env_steps)
    for name, values in q.rl.hparams_table(population).items():
        np.testing.assert_array_equal(done.hparams[name], values)  # what the round trained with
    kept, done = pbt.round(AGENT, ENV, ENV, population, 2, 3, exploit=False, groups=1, key=key)
    assert bool(eqx.tree_equal(kept, trained))
    np.testing.assert_array_equal(done.sources, np.arange(POP))


def test_pbt_validation_says_what_is_wrong():
    with pytest.raises(ValueError, match="best_fraction=0.1 of 4 members rounds to 0 members"):
        q.rl.PBT.from_fractions(4, 0.1, 0.4, q.rl.TD3_SPACES)
    with pytest.raises(ValueError, match="worse_fraction=0.2 of 4 members rounds to 0 members"):
        q.rl.PBT.from_fractions(4, 0.5, 0.2, q.rl.TD3_SPACES)
    with pytest.raises(ValueError, match="exceeds the population size 5"):
        q.rl.PBT(5, 3, 3, q.rl.TD3_SPACES)
    with pytest.raises(ValueError, match="explore"):
        q.rl.PBT(5, 1, 1, q.rl.TD3_SPACES, explore="mutate")
    pbt = q.rl.PBT.from_fractions(10, 0.1, 0.4, q.rl.TD3_SPACES)
    assert (pbt.num_best_to_replace_from, pbt.num_worse_to_replace) == (1, 4)
    assert q.rl.PBT(2, 1, 1, q.rl.TD3_SPACES).population_size == 2  # the smallest population
    with pytest.raises(ValueError, match="at least 2, got 1"):
        q.rl.PBT(1, 1, 1, q.rl.TD3_SPACES)
    # A zero fraction is a count of zero (not "rounds to 0"), refused by PBT for what it is.
    with pytest.raises(ValueError, match=r"num_best_to_replace_from \(0\)"):
        q.rl.PBT.from_fractions(10, 0.0, 0.4, q.rl.TD3_SPACES)
    with pytest.raises(ValueError, match="no hyperparameters named"):
        q.rl.sample_hparams(q.rl.TD3HParams(), {"alpha_lr": q.rl.Uniform(0.0, 1.0)}, key=jr.key(0))


def test_spaces_sample_clip_and_perturb():
    keys = jr.split(jr.key(0), 4000)
    logu = q.rl.LogUniform(1e-5, 1e-1)
    draws = np.asarray(jax.vmap(lambda k: logu.sample(key=k))(keys))
    assert draws.min() >= 1e-5 and draws.max() <= 1e-1
    assert np.median(np.log10(draws)) == pytest.approx(-3.0, abs=0.15)
    choice = q.rl.Choice([0.9, 0.99, 0.999])
    assert float(choice.clip(jnp.asarray(0.98, jnp.float32))) == pytest.approx(0.99)
    spaces = q.rl.log_uniform_learning_rates(q.rl.SAC_SPACES)
    assert isinstance(spaces["policy_lr"], q.rl.LogUniform)
    assert isinstance(spaces["discount"], q.rl.Uniform)
    hp = q.rl.SACHParams(policy_lr=3e-3, discount=0.95)
    for k in jr.split(jr.key(1), 20):
        out = q.rl.perturb_hparams(hp, q.rl.SAC_SPACES, key=k)
        assert float(out.policy_lr) <= 3e-3 + 1e-9  # clipped into the space
        # 0.95 x 0.8 = 0.76 and 0.95 x 1.2 = 1.14 are both clipped into [0.9, 1.0].
        assert float(out.discount) in (pytest.approx(0.9), pytest.approx(1.0))
        assert isinstance(out.discount, jax.Array) and out.discount.dtype == jnp.float32


def test_pbt_explores_as_its_explore_field_says():
    hp, key = q.rl.SACHParams(policy_lr=3e-3, discount=0.95), jr.key(2)
    spaces = {"policy_lr": q.rl.LogUniform(1e-4, 1e-2), "discount": q.rl.Uniform(0.9, 0.99)}
    resampled = q.rl.PBT(4, 1, 1, spaces).explore_hparams(hp, key=key)
    perturbed = q.rl.PBT(4, 1, 1, spaces, explore="perturb").explore_hparams(hp, key=key)
    assert eqx.tree_equal(resampled, q.rl.sample_hparams(hp, spaces, key=key))
    assert eqx.tree_equal(perturbed, q.rl.perturb_hparams(hp, spaces, key=key))
    assert float(perturbed.policy_lr) in (pytest.approx(2.4e-3), pytest.approx(3.6e-3))


def test_init_population_draws_each_members_hyperparameters(population):
    hp = population.agent_state.hparams
    for name, space in AGENT.hparam_spaces.items():
        assert bool(jnp.all(space.contains(getattr(hp, name)))), name
        values = np.asarray(getattr(hp, name)).tolist()
        assert len(set(values)) == POP, f"{name}: every member draws its own value"


def test_copy_into_may_replace_every_member(population):
    slots = jnp.arange(POP, dtype=jnp.int32)
    out, picked = _pbt.copy_into(population, population, slots, lambda h, k: h, key=jr.key(3))
    assert picked.shape == (POP,)
    np.testing.assert_array_equal(out.env_steps, np.asarray(population.env_steps)[picked])


def test_population_without_optimiser_states_is_smaller(population):
    stored = _pbt.population_without_optimiser_states(AGENT, population)
    assert stored.agent_state.policy_opt_state is None
    size = lambda t: sum(x.nbytes for x in jax.tree.leaves(t) if eqx.is_array(x))
    assert size(stored.agent_state) < size(population.agent_state)
    rebuilt = eqx.filter_vmap(AGENT.init_optimiser_states)(stored.agent_state)
    assert jax.tree.structure(rebuilt) == jax.tree.structure(population.agent_state)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: q.rl.Uniform(0.0, float("inf")), "Uniform.high"),
        (lambda: q.rl.Uniform(1.0, 0.5), "Uniform.low"),
        (lambda: q.rl.LogUniform(0.0, 1.0), "LogUniform.low"),
        (lambda: q.rl.LogUniform(1e-3, float("nan")), "LogUniform.high"),
        (lambda: q.rl.Choice([]), "at least one value"),
        (lambda: q.rl.Choice([0.1, float("inf")]), "Choice.values"),
        (lambda: q.MixingEmitter(batch_size=4, variation_percentage=1.0), "variation operator"),
        (lambda: q.MixingEmitter(batch_size=4, variation_percentage=0.5,
                                 variation=q.IsoLineVariation(0.0, 0.1)), "mutation operator"),
    ],
)  # fmt: skip
def test_spaces_and_emitters_refuse_bad_values_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def _arrays(tree):
    return jax.tree.leaves(eqx.filter(tree, eqx.is_array))


@pytest.mark.slow  # the fast tier's budget; fast sibling: test_a_pbt_round_is_train_...
def test_population_trains_in_groups_side_by_side(population):
    """`train_population`'s groups: each member trains with its own key in any grouping (the
    numbers equal one program's up to float rounding), and the groups run side by side on
    threads give the numbers they give one after another, bit for bit."""
    train = lambda groups: q.rl.train_population(AGENT, ENV, population, 2, groups=groups,
                                                 key=jr.key(3))  # fmt: skip
    one, one_metrics = train(1)
    for groups in (2, 3, 6):
        pop, metrics = train(groups)
        assert jax.tree.structure(pop) == jax.tree.structure(one)
        assert metrics.reward.shape == one_metrics.reward.shape == (POP, 2)
        for a, b in zip(_arrays((pop, metrics)), _arrays((one, one_metrics))):
            assert a.shape == b.shape and a.dtype == b.dtype
            if jnp.issubdtype(a.dtype, jnp.floating):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
            else:
                np.testing.assert_array_equal(a, b)
    # Three groups, side by side, against the same three programs run in turn.
    side_by_side = train(3)
    in_turn = _pbt._joined([
        _pbt._train_group(AGENT, ENV, population, 2, 2, jnp.int32(start), key=jr.key(3))
        for start in (0, 2, 4)
    ])  # fmt: skip
    for a, b in zip(_arrays(side_by_side), _arrays(in_turn), strict=True):
        np.testing.assert_array_equal(a, b)
    # The input population is left as it was (no donation).
    np.testing.assert_array_equal(population.env_steps, _population().env_steps)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 64),
    cores=st.integers(1, 32),
    backend=st.sampled_from(["cpu", "gpu", "tpu"]),
    traced=st.booleans(),
    devices=st.integers(1, 4),
)
def test_auto_groups_are_the_most_that_divide_at_one_per_core(
    size, cores, backend, traced, devices
):
    g = _pbt._auto_groups(size, backend=backend, cores=cores, traced=traced, devices=devices)
    if backend != "cpu" or traced or devices > 1:
        assert g == 1
    else:
        assert 1 <= g <= min(cores, size) and size % g == 0
        assert not any(size % d == 0 for d in range(g + 1, min(cores, size) + 1))


def test_groups_auto_on_this_machine_and_inside_transformations(population):
    cores = q.internal.machine().cores
    expected = _pbt._auto_groups(POP, backend=jax.default_backend(), cores=cores)
    assert q.rl.population_groups(population) == expected
    assert q.rl.population_groups(population, 3) == 3
    # NumPy leaves (a population read back from files) are on no device: "auto" as on one.
    as_numpy = lambda x: x if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else np.asarray(x)
    assert q.rl.population_groups(jax.tree.map(as_numpy, population)) == expected
    # Inside jit the call is part of the outer program: "auto" takes one group.
    seen = []
    jax.jit(lambda p: seen.append(q.rl.population_groups(p)) or p.env_steps)(population)
    assert seen == [1]
    inside, _ = eqx.filter_jit(lambda p: q.rl.train_population(AGENT, ENV, p, 2, key=jr.key(3)))(
        population
    )
    outside, _ = q.rl.train_population(AGENT, ENV, population, 2, groups=1, key=jr.key(3))
    np.testing.assert_allclose(inside.env_steps, outside.env_steps)


@pytest.mark.parametrize(
    "groups, match",
    [
        (0, "groups must be a positive int or 'auto', got 0"),
        (-2, "got -2"),
        (True, "got True"),
        (2.0, "got 2.0"),
        ("many", "got 'many'"),
        (4, "groups=4 does not divide the population of 6 members"),
    ],
)
def test_train_population_refuses_bad_groups_by_name(population, groups, match):
    # Under the suite's type checker (beartype) a float or another string fails its check
    # first, naming the argument; without it the package's own message says the same.
    if isinstance(groups, (float, str)):
        match = "groups"
    with pytest.raises((ValueError, TypeError), match=match):
        q.rl.train_population(AGENT, ENV, population, 1, groups=groups, key=jr.key(0))


def test_groups_inside_jit_are_refused_with_the_way_out(population):
    call = lambda p: q.rl.train_population(AGENT, ENV, p, 1, groups=2, key=jr.key(0))
    with pytest.raises(ValueError, match="groups=2 runs programs side by side.*groups=1"):
        eqx.filter_jit(call)(population)


def test_population_evaluates_in_groups_side_by_side(population):
    """`evaluate_population`'s groups as `train_population`'s: each member plays with its own
    key in any grouping (the returns and descriptors equal one program's up to float
    rounding), the groups side by side give what they give one after another, bit for bit,
    and a grouping that does not divide the population is refused by name."""
    evaluate = lambda groups: q.rl.evaluate_population(AGENT, ENV, population, 2, groups=groups,
                                                       key=jr.key(4))  # fmt: skip
    one = evaluate(1)
    assert one.returns.shape == (POP, 2)
    for groups in (2, 3):
        grouped = evaluate(groups)
        assert jax.tree.structure(grouped) == jax.tree.structure(one)
        for a, b in zip(_arrays(grouped), _arrays(one), strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    in_turn = _pbt._joined([
        _pbt._evaluate_group(AGENT, ENV, population, 2, 3, jnp.int32(start), key=jr.key(4))
        for start in (0, 3)
    ])  # fmt: skip
    for a, b in zip(_arrays(evaluate(2)), _arrays(in_turn), strict=True):
        np.testing.assert_array_equal(a, b)
    # The members' returns differ, so a grouping that put a member's result in another's
    # row would fail the comparison above.
    assert len({tuple(r) for r in np.asarray(one.returns).tolist()}) > 1
    with pytest.raises(ValueError, match="evaluate_population: groups=4 does not divide"):
        q.rl.evaluate_population(AGENT, ENV, population, 1, groups=4, key=jr.key(0))


def test_joining_the_groups_frees_each_leaf_as_it_goes(monkeypatch):
    """The groups' results are joined leaf by leaf, each group's leaf freed once joined: the
    live bytes never exceed the groups' results plus one joined leaf."""
    mib = 2**18  # float32 elements in a MiB
    make = lambda: ({"a": jnp.ones((2, mib)), "b": jnp.ones((2, 2 * mib)),
                     "c": jnp.ones((2, mib))}, jnp.zeros((2, 3)))  # fmt: skip
    parts = [make(), make()]
    live = lambda: sum(x.nbytes for x in jax.live_arrays())
    start, peaks = live(), []
    concatenate = jnp.concatenate

    def watched(arrays):
        out = concatenate(arrays)
        peaks.append(live())
        return out

    monkeypatch.setattr(jnp, "concatenate", watched)
    (joined, metrics) = _pbt._joined(parts)
    assert parts == [] and joined["b"].shape == (4, 2 * mib) and metrics.shape == (4, 3)
    # Leaf "b" joined is 4 x 2 MiB = 8 MiB (the largest): the whole population is 16 MiB more.
    assert max(peaks) <= start + 8 * 2**20 + 2**10
    assert live() <= start + 2**10
