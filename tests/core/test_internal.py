"""`eqx_qd.internal`: the validation family and the control flow over modules."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd._compile import compiler_options
from eqx_qd.internal import check, filter_cond, filter_while_loop


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: check.positive_int("cells", 0), "cells must be a positive integer, got 0"),
        (lambda: check.positive_int("cells", 2.0), "cells must be an integer, got 2.0"),
        (lambda: check.positive_int("flag", True), "flag must be an integer, got True"),
        (lambda: check.non_negative_int("n", -1), "n must be >= 0, got -1"),
        (lambda: check.fraction("f", 1.5), "f must lie in [0.0, 1.0], got 1.5"),
        (lambda: check.non_negative("lr", -1e-3), "lr must be >= 0, got -0.001"),
        (lambda: check.non_negative("lr", math.inf), "lr must be finite and >= 0, got inf"),
        (lambda: check.positive("alpha", 0.0), "alpha must be positive and finite, got 0.0"),
        (
            lambda: check.finite("c", jnp.asarray([1.0, jnp.nan])),
            "c must be finite, got [1.0, nan]",
        ),
        (lambda: check.in_range("d", jnp.nan, 0.0, 1.0), "d must be finite and in [0.0, 1.0]"),
        (lambda: check.ordered("lo", 1.0, "hi", 0.0), "lo must be < hi, got 1.0 and 0.0"),
        (lambda: check.one_of("explore", "both", ("resample", "perturb")), "explore must be one"),
    ],
)
def test_checks_name_the_field_and_the_value(call, message):
    with pytest.raises((ValueError, TypeError)) as e:
        call()
    assert message in str(e.value)


def test_checks_pass_good_values_and_skip_tracers():
    check.positive_int("n", 3)
    check.fraction("f", jnp.asarray([0.0, 0.5, 1.0]))  # element-wise: populations too
    check.in_range("x", -math.inf, finite=False)
    # Inside jit a value cannot be read: nothing is checked, nothing fails.
    jax.jit(lambda x: (check.fraction("f", x), x)[1])(jnp.asarray(7.0))
    # Hyperparameters built inside vmap (a population) are checked after, not inside.
    hp = eqx.filter_vmap(lambda lr: q.rl.TD3HParams(policy_lr=lr))(jnp.asarray([1e-3, 2e-3]))
    assert hp.policy_lr.shape == (2,)
    with pytest.raises(ValueError, match="TD3HParams.policy_lr must be finite"):
        q.rl.TD3HParams(policy_lr=jnp.asarray([1e-3, jnp.inf]))


class _Counter(eqx.Module):
    n: jax.Array
    fn: object  # a non-array leaf (a function), as an MLP's activation


def test_filter_cond_and_while_loop_carry_non_array_leaves():
    c = _Counter(jnp.asarray(0), jnp.tanh)
    add = lambda m, k: eqx.tree_at(lambda x: x.n, m, m.n + k)
    out = eqx.filter_jit(lambda m, p: filter_cond(p, lambda m: add(m, 1), lambda m: add(m, 10), m))
    assert int(out(c, jnp.asarray(True)).n) == 1 and int(out(c, jnp.asarray(False)).n) == 10
    assert out(c, jnp.asarray(True)).fn is jnp.tanh
    looped = filter_while_loop(lambda m: m.n < 5, lambda m: add(m, 2), c)
    assert int(looped.n) == 6 and looped.fn is jnp.tanh
    # A body that changes the static part is refused at trace time.
    swap = lambda m: eqx.tree_at(lambda x: x.fn, add(m, 1), jnp.sin)
    with pytest.raises(ValueError, match="non-array part of the while_loop carry changed"):
        filter_while_loop(lambda m: m.n < 5, swap, c)
    with pytest.raises(ValueError, match="branches disagree"):
        filter_cond(True, swap, lambda m: m, c)


@pytest.mark.slow  # a statistical test of many draws
def test_random_permutation_is_a_uniform_permutation():
    from eqx_qd.internal import random_permutation

    for n in (1, 2, 7, 512, 8192, 70_000):  # 70,000: 17 index bits, three rounds
        p = np.asarray(random_permutation(n, key=jax.random.key(n)))
        assert p.dtype == np.int32 and sorted(p.tolist()) == list(range(n)), n
    # All 24 orders of 4 items, equally often over 24,000 keys: chi-square with 23 degrees of
    # freedom, under 49.7 (p = 0.001). Identity, a rotation or a single round of a biased
    # shuffle fail it; so does a key that is not used.
    keys = jax.random.split(jax.random.key(0), 24_000)
    perms = np.asarray(jax.vmap(lambda k: random_permutation(4, key=k))(keys))
    codes = perms @ np.array([64, 16, 4, 1])
    counts = np.unique(codes, return_counts=True)[1]
    assert len(counts) == 24
    assert ((counts - 1000) ** 2 / 1000).sum() < 49.7
    # Each position of a long shuffle is uniform too: where item 0 lands, over 2,000 keys.
    keys = jax.random.split(jax.random.key(1), 2_000)
    where = np.asarray(jax.vmap(lambda k: jnp.argmin(random_permutation(8192, key=k)))(keys))
    deciles = np.bincount(where * 10 // 8192, minlength=10)
    assert ((deciles - 200) ** 2 / 200).sum() < 27.9  # chi-square, 9 degrees of freedom


def test_the_package_compiles_with_the_older_cpu_fusion_emitters(monkeypatch):
    # jax 0.10's XLA knows the option; a JAX whose XLA dropped it gets {} (next test), and this
    # test then says the package's compile-time lever is gone (see eqx_qd/_compile.py). Without
    # the suite's XLA_FLAGS (the top-level conftest.py names the option for every program).
    monkeypatch.setenv("XLA_FLAGS", "")
    assert compiler_options() == {"xla_cpu_use_fusion_emitters": False}


def test_compiler_options_yield_to_xla_flags_and_to_an_xla_without_them(monkeypatch):
    from eqx_qd import _compile

    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert compiler_options() == {}
    monkeypatch.setenv("XLA_FLAGS", "")
    options = compiler_options()
    options.clear()  # a fresh dict each call: the package's own stays
    assert compiler_options() == {"xla_cpu_use_fusion_emitters": False}
    monkeypatch.setattr(_compile, "_OPTIONS", {"xla_no_such_option_of_eqx_qd": True})
    assert _compile._accepted.__wrapped__() is False  # the probe, uncached


def test_jit_passes_options_at_the_top_only():
    from eqx_qd._compile import jit

    calls = []

    @jit
    def double(x):
        """Twice x."""
        calls.append(None)  # counts traces
        return 2.0 * x

    x = jnp.arange(3.0)
    assert double.__doc__ == "Twice x." and double.__name__ == "double"
    np.testing.assert_array_equal(double(x), 2.0 * x)
    np.testing.assert_array_equal(double(x), 2.0 * x)  # reused: one trace so far
    assert len(calls) == 1 and set(double._variants) == {True}
    # Inside other transformations JAX refuses options on an inner jit: the plain variant.
    np.testing.assert_array_equal(jax.jit(double)(x), 2.0 * x)
    np.testing.assert_array_equal(jax.vmap(double)(x), 2.0 * x)
    assert float(jax.grad(lambda y: double(y).sum())(x)[0]) == 2.0
    assert set(double._variants) == {True, False}
    # Inside an outer jit with closed-over (concrete) arguments JAX refuses the options too.
    np.testing.assert_array_equal(jax.jit(lambda: double(x))(), 2.0 * x)
    with pytest.raises(ValueError, match="other"):  # any other error still surfaces
        jit(lambda y: (_ for _ in ()).throw(ValueError("other")))(x)
    np.testing.assert_array_equal(double.lower(x).compile()(x), 2.0 * x)
    donating = jit(donate="all")(lambda y: y + 1.0)
    np.testing.assert_array_equal(donating(jnp.zeros(2)), jnp.ones(2))

    class Scale(eqx.Module):
        factor: jax.Array

        @jit
        def __call__(self, y):
            return self.factor * y

    np.testing.assert_array_equal(Scale(jnp.asarray(3.0))(x), 3.0 * x)


def test_the_on_policy_training_programs_compile_with_xla_defaults(monkeypatch):
    # Measured: XLA's default (newer) fusion emitters ran cart-pole PPO 1.8x faster on an
    # AVX-512 machine (benchmarks/log/compare-and-tuning.md); the other programs keep the
    # package's options.
    from eqx_qd import _compile
    from eqx_qd.rl._ppo import _train

    monkeypatch.setenv("XLA_FLAGS", "")  # the suite's flags name the option (conftest.py)
    seen = []
    real = eqx.filter_jit
    monkeypatch.setattr(
        _compile.eqx, "filter_jit", lambda fn, **kw: seen.append(kw) or real(fn, **kw)
    )
    x = jnp.arange(3.0)
    np.testing.assert_array_equal(_compile.jit(lambda y: y + 1.0, package_options=False)(x), x + 1)
    np.testing.assert_array_equal(_compile.jit(lambda y: y + 1.0)(x), x + 1)
    assert seen == [
        {"donate": "none"},
        {"donate": "none", "compiler_options": {"xla_cpu_use_fusion_emitters": False}},
    ]
    assert not _train._package_options
    assert _compile.jit(lambda y: y)._package_options


def test_train_population_compiles_ppo_with_xla_defaults(monkeypatch):
    # PPO populations ran 1.3x faster with XLA's default fusion emitters; the off-policy
    # agents keep the package's options (level speed, half the compile time for SAC). The
    # same split over devices (the PBT job's default on a CPU of several cores).
    from eqx_qd.rl import _pbt as pbt

    class Picked(Exception):
        pass

    def picks(name):
        def program(*args, **kwargs):
            raise Picked(name)

        return program

    monkeypatch.setattr(pbt, "_train_population", picks("package"))
    monkeypatch.setattr(pbt, "_train_population_xla", picks("xla"))
    monkeypatch.setattr(pbt, "_train_group", picks("package"))
    monkeypatch.setattr(pbt, "_train_group_xla", picks("xla"))
    monkeypatch.setattr(pbt, "_train_mapped", picks("package"))
    monkeypatch.setattr(pbt, "_train_mapped_xla", picks("xla"))
    env, key = q.envs.PointMaze(walls=False), jax.random.key(0)
    small = dict(observation_size=2, action_size=2, num_envs=2)
    for agent, picked in (
        (q.rl.PPO(**small, rollout_length=4, actor_hidden=(4,), critic_hidden=(4,)), "xla"),
        (q.rl.SAC(**small, policy_hidden=(4,), critic_hidden=(4,), buffer_size=8), "package"),
        (q.rl.TD3(**small, policy_hidden=(4,), critic_hidden=(4,), buffer_size=8), "package"),
    ):
        pair = q.rl.init_population(agent, env, None, 2, key=key)
        for groups in (1, 2):  # one program, or two side by side
            with pytest.raises(Picked, match=f"^{picked}$"):
                q.rl.train_population(agent, env, pair, 1, groups=groups, key=key)
        with pytest.raises(Picked, match=f"^{picked}$"):
            q.rl.train_population_sharded(agent, env, pair, 1, mesh=q.device_mesh(2), key=key)
    assert not hasattr(q.rl.AbstractAgent, "package_compiler_options")  # not in the contract
