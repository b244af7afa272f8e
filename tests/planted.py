"""Deliberately broken extensions: each breaks one law of `eqx_qd.testing`, which must catch
it by name (`tests/test_laws.py`). Listed in the docs ("Testing your extensions").

Each class is a small change of a correct one: the GA emitter below (`Fine`) keeps every law.
"""

import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

import eqx_qd as q


class Fine(q.AbstractStatelessEmitter):
    """A correct GA emitter: selected elites plus gaussian noise, with their lineage."""

    batch_size: int = eqx.field(static=True)
    sigma: float = 0.1

    def emit(self, repertoire, state, *, key):
        select_key, noise_key = jr.split(key)
        elites = repertoire.select(self.batch_size, key=select_key)
        noise = self.sigma * jr.normal(noise_key, elites.genotypes.shape)
        parents = q.parent_ids(elites)
        return elites.genotypes + noise, q.Lineage.of(
            parents, -jnp.ones_like(parents), q.Origin.EVO
        )


@typing.final
class OneTooMany(Fine):
    """Emits `batch_size + 1` candidates (law `batch`)."""

    def emit(self, repertoire, state, *, key):
        elites = repertoire.select(self.batch_size + 1, key=key)
        return elites.genotypes, None


@typing.final
class IntegerGenes(Fine):
    """Rounds its candidates to int32 (law `batch`: the dtype of the stored rows)."""

    def emit(self, repertoire, state, *, key):
        genotypes, lineage = super().emit(repertoire, state, key=key)
        return jnp.round(genotypes).astype(jnp.int32), lineage


@typing.final
class RootOfFitness(Fine):
    """Steps further from fitter parents, by the square root of their fitness: NaN for a
    parent of negative fitness (law `finite`)."""

    def emit(self, repertoire, state, *, key):
        select_key, noise_key = jr.split(key)
        elites = repertoire.select(self.batch_size, key=select_key)
        step = jnp.sqrt(elites.fitnesses)[:, None] * jr.normal(noise_key, elites.genotypes.shape)
        parents = q.parent_ids(elites)
        return elites.genotypes + self.sigma * step, q.Lineage.of(
            parents, -jnp.ones_like(parents), q.Origin.EVO
        )


@typing.final
class GrowingState(q.AbstractEmitter):
    """Its state gains a row every update (law `state`: a scan needs a fixed structure)."""

    batch_size: int = eqx.field(static=True)

    def init(self, repertoire, genotypes, descriptors, fitnesses, extra, *, key):
        return jnp.zeros((1,), jnp.float32)

    def emit(self, repertoire, state, *, key):
        return repertoire.select(self.batch_size, key=key).genotypes, None

    def state_update(
        self, state, repertoire, genotypes, descriptors, fitnesses, extra, *, add_info, key
    ):
        return jnp.concatenate([state, jnp.max(fitnesses)[None]])


@typing.final
class CellsForIds(Fine):
    """Reports the parents' cells where the repertoire's ids belong (law `lineage`)."""

    def emit(self, repertoire, state, *, key):
        select_key, noise_key = jr.split(key)
        elites = repertoire.select(self.batch_size, key=select_key)
        noise = self.sigma * jr.normal(noise_key, elites.genotypes.shape)
        cells = elites.cells
        return elites.genotypes + noise, q.Lineage.of(cells, -jnp.ones_like(cells), q.Origin.EVO)


PLANTED_EMITTERS = {
    OneTooMany: "batch",
    IntegerGenes: "batch",
    RootOfFitness: "finite",
    GrowingState: "state",
    CellsForIds: "lineage",
}
"""Each planted emitter and the law it breaks."""
