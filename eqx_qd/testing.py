"""Hypothesis strategies for eqx_qd's own types, for property-based tests.

Shapes are fixed per strategy call (so a jitted function compiles once); values are drawn.
Requires `hypothesis` (installed with the `test` extra).

```python
from hypothesis import given, settings
from eqx_qd.testing import candidate_batches, repertoires

@settings(deadline=None)
@given(rep=repertoires(), batch=candidate_batches())
def test_add_keeps_best(rep, batch):
    new, _ = rep.add(batch.genotypes, batch.descriptors, batch.fitnesses)
    assert (new.fitnesses >= rep.fitnesses).all()
```
"""

import typing
from collections.abc import Callable
from typing import Any

from ._extras import require as _require


_require("testing", "eqx_qd.testing")
import equinox as eqx
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._custom_types import Genotypes
from ._laws import (
    AGENT_LAWS as AGENT_LAWS,
    check_agent as check_agent,
    check_emitter as check_emitter,
    check_env as check_env,
    check_ranker as check_ranker,
    check_repertoire as check_repertoire,
    EMITTER_LAWS as EMITTER_LAWS,
    ENV_LAWS as ENV_LAWS,
    keep_python_random,
    LawBroken as LawBroken,
    RANKER_LAWS as RANKER_LAWS,
    REPERTOIRE_LAWS as REPERTOIRE_LAWS,
)
from ._repertoire import MAPElitesRepertoire
from ._tessellation import GridTessellation


class CandidateBatch(eqx.Module):
    """A batch offered to a repertoire: genotypes, descriptors and fitnesses."""

    genotypes: Genotypes
    descriptors: Float[Array, "batch num_descriptors"]
    fitnesses: Float[Array, " batch"]


def fitness_values(allow_nonfinite: bool = True) -> st.SearchStrategy[float]:
    """Floats in [-100, 100] (float32-exact), sometimes NaN, -inf or +inf."""
    finite = st.floats(-100.0, 100.0, width=32)
    if not allow_nonfinite:
        return finite
    return st.one_of(finite, finite, finite, st.sampled_from([np.nan, -np.inf, np.inf]))


def descriptor_values(allow_nonfinite: bool = True) -> st.SearchStrategy[float]:
    """Floats in [-0.25, 1.25] (a little outside the unit box), sometimes NaN."""
    finite = st.floats(-0.25, 1.25, width=32)
    return st.one_of(finite, finite, finite, st.just(np.nan)) if allow_nonfinite else finite


@st.composite
@typing.no_type_check  # see keep_python_random
def candidate_batches(
    draw: Callable[..., Any],
    batch_size: int = 8,
    num_descriptors: int = 2,
    genotype_dim: int = 3,
    allow_nonfinite: bool = True,
) -> CandidateBatch:
    """A `CandidateBatch` of `batch_size` random genotypes (`genotype_dim` genes),
    descriptors (`num_descriptors`) and fitnesses; shapes are fixed, values drawn (with NaN
    and infinities unless `allow_nonfinite=False`)."""
    fit = draw(hnp.arrays(np.float32, (batch_size,), elements=fitness_values(allow_nonfinite)))
    desc = draw(
        hnp.arrays(
            np.float32, (batch_size, num_descriptors), elements=descriptor_values(allow_nonfinite)
        )
    )
    seed = draw(st.integers(0, 2**31 - 1))
    geno = np.random.default_rng(seed).normal(size=(batch_size, genotype_dim)).astype(np.float32)
    with keep_python_random():
        return CandidateBatch(jnp.asarray(geno), jnp.asarray(desc), jnp.asarray(fit))


def grid_tessellations(bins: tuple[int, ...] = (4, 4)) -> st.SearchStrategy[GridTessellation]:
    """A grid over the unit box (fixed shape)."""
    with keep_python_random():
        return st.just(GridTessellation(bins, 0.0, 1.0))


@st.composite
@typing.no_type_check  # see keep_python_random
def repertoires(
    draw: Callable[..., Any],
    bins: tuple[int, ...] = (4, 4),
    genotype_dim: int = 3,
) -> MAPElitesRepertoire:
    """A grid repertoire over the unit box with a random subset of cells filled.

    Built directly from NumPy arrays (no JAX computation inside the strategy); each filled
    cell's descriptor is its centroid, so the repertoire is consistent. `bins` sets the grid,
    `genotype_dim` the genes per genotype.
    """
    with keep_python_random():
        tessellation = GridTessellation(bins, 0.0, 1.0)
    n = tessellation.num_cells
    fit = draw(
        hnp.arrays(
            np.float32,
            (n,),
            elements=st.one_of(st.floats(-100.0, 100.0, width=32), st.just(-np.inf)),
        )
    )
    seed = draw(st.integers(0, 2**31 - 1))
    geno = np.random.default_rng(seed).normal(size=(n, genotype_dim)).astype(np.float32)
    with keep_python_random():
        return MAPElitesRepertoire(
            genotypes=jnp.asarray(geno),
            fitnesses=jnp.asarray(fit),
            descriptors=tessellation.centroids,
            tessellation=tessellation,
        )


def register_strategies() -> None:
    """Let `st.from_type(MAPElitesRepertoire)` and `st.from_type(CandidateBatch)` work."""
    st.register_type_strategy(MAPElitesRepertoire, lambda _: repertoires())
    st.register_type_strategy(CandidateBatch, lambda _: candidate_batches())


__all__ = [
    "AGENT_LAWS",
    "candidate_batches",
    "CandidateBatch",
    "check_agent",
    "check_emitter",
    "check_env",
    "check_ranker",
    "check_repertoire",
    "descriptor_values",
    "EMITTER_LAWS",
    "ENV_LAWS",
    "fitness_values",
    "grid_tessellations",
    "LawBroken",
    "RANKER_LAWS",
    "register_strategies",
    "REPERTOIRE_LAWS",
    "repertoires",
]
