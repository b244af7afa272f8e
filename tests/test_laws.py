"""The testing kit's laws: every built-in emitter keeps them, every planted bug breaks the law
it was planted for, by name."""

import jax.numpy as jnp
import numpy as np
import pytest
from planted import Fine, GrowingState, PLANTED_EMITTERS

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd.testing import check_emitter, EMITTER_LAWS, LawBroken


DIM = 4
POPULATION = jnp.asarray(np.random.default_rng(0).normal(size=(6, DIM)), jnp.float32)
TASK = jobs.make_task("projected_sphere", genotype_dim=DIM)


def _builtin(name: str) -> q.AbstractEmitter:
    if name in ("iso_line", "gaussian"):
        return jobs.make_emitter(name, batch_size=6)
    if name == "composed":
        return q.ComposedEmitter(
            [
                jobs.make_emitter("iso_line", batch_size=4),
                jobs.make_emitter("gaussian", batch_size=2),
            ]
        )
    if name == "bandit":
        pool = [jobs.make_emitter("cma_me", batch_size=4, task=TASK, num_emitters=1)] * 3
        return q.BanditEmitter(pool, 2)
    return jobs.make_emitter(name, batch_size=6, task=TASK, num_emitters=2)


BUILTIN = [
    "iso_line",
    "gaussian",
    "cma_me",
    "cma_mae",
    "cma_mega",
    "cma_maega",
    "composed",
    "bandit",
]


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_emitters_keep_every_law(name):
    emitter = _builtin(name)
    scoring = TASK if name.startswith("cma_mega") or name.startswith("cma_maega") else None
    check_emitter(emitter, POPULATION, scoring_fn=scoring, max_examples=5)


def test_the_docs_emitter_keeps_every_law():
    check_emitter(Fine(batch_size=5), POPULATION, max_examples=5)


@pytest.mark.parametrize("planted", list(PLANTED_EMITTERS), ids=lambda c: c.__name__)
def test_each_planted_emitter_breaks_its_law_by_name(planted):
    law = PLANTED_EMITTERS[planted]
    with pytest.raises(LawBroken) as caught:
        check_emitter(planted(batch_size=5), POPULATION, max_examples=10)
    assert caught.value.law == law, str(caught.value)
    assert f"law {law!r} broken" in str(caught.value) and "case: filled cells" in str(caught.value)


def test_laws_are_named_and_checked():
    assert set(EMITTER_LAWS) == {"batch", "finite", "same_key", "state", "lineage"}
    with pytest.raises(ValueError, match=r"unknown laws \['shape'\]"):
        check_emitter(Fine(batch_size=5), POPULATION, laws=["shape"])
    with pytest.raises(TypeError, match="AbstractEmitter"):  # ours, or beartype's under pytest
        check_emitter(object(), POPULATION)
    # One law alone runs alone: the planted state bug passes the batch law.

    check_emitter(GrowingState(batch_size=5), POPULATION, laws=["batch"], max_examples=3)
