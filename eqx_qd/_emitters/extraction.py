"""Extract-ME's extraction operator as an emitter: every batch re-scores some elites of an
`ExtractRepertoire` beside the offspring of another emitter, within the same budget."""

import typing
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._misc import tree_concatenate, tree_slice
from .._repertoire import AbstractRepertoire, AddInfo
from .._repertoire._extract import ExtractRepertoire, NEW
from .base import AbstractEmitter


class ExtractionExtra(eqx.Module):
    """What `Extraction.emit` returns beside its batch: `sources` `(batch,)`, the slot each
    extracted row came from (`NEW` for the offspring, `VOID` for an empty extraction row: what
    `ExtractOffer` carries to the repertoire), and `inner`, the offspring emitter's own
    extra."""

    sources: Int[Array, " batch"]
    inner: Extra


@typing.final
class Extraction(AbstractEmitter[Any]):
    """Extract-ME's batch: `emitter`'s offspring (its `batch_size` rows first), then
    `num_extracted` elites drawn uniformly from an `ExtractRepertoire` (`extract`) to be scored
    again: the evaluation budget per iteration is `batch_size = emitter.batch_size +
    num_extracted`, whatever the split. `MAPElites` hands the repertoire the rows' sources, and
    the repertoire folds the new scores into the elites' estimates and re-inserts them.

    The offspring emitter sees its own rows only (`state_update` gets its slice). Its parents
    are drawn before the extraction, from the repertoire as it stands.

    **Fields:** `emitter` (any emitter of the library), `num_extracted` (elites re-scored per
    iteration; the paper's extraction proportion times the batch), `batch_size`.
    """

    emitter: AbstractEmitter
    num_extracted: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)

    def __init__(self, emitter: AbstractEmitter, num_extracted: int):
        if not isinstance(emitter, AbstractEmitter):
            raise TypeError(f"Extraction.emitter must be an emitter, got {type(emitter).__name__}")
        check.positive_int("Extraction: num_extracted", num_extracted)
        self.emitter = emitter
        self.num_extracted = num_extracted
        self.batch_size = emitter.batch_size + num_extracted

    @staticmethod
    def _extracting(repertoire: AbstractRepertoire, where: str) -> ExtractRepertoire:
        if not isinstance(repertoire, ExtractRepertoire):
            raise TypeError(
                f"Extraction.{where}: extraction draws from an ExtractRepertoire, got "
                f"{type(repertoire).__name__}"
            )
        return repertoire

    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> Any:
        """The offspring emitter's initial state (from the whole initial population)."""
        archive = self._extracting(repertoire, "init")
        if self.num_extracted > archive.num_cells:
            raise ValueError(
                f"Extraction: num_extracted ({self.num_extracted}) exceeds the archive's "
                f"{archive.num_cells} cells: extract fewer (in a job: a smaller --extraction or "
                "--batch-size, or more --cells)"
            )
        return self.emitter.init(repertoire, genotypes, descriptors, fitnesses, extra, key=key)

    def emit(
        self, repertoire: AbstractRepertoire, state: Any, *, key: PRNGKey
    ) -> tuple[Genotypes, ExtractionExtra]:
        """The offspring, then the extracted elites; their `ExtractionExtra`."""
        archive = self._extracting(repertoire, "emit")
        inner_key, extract_key = jr.split(key)
        offspring, inner_extra = self.emitter.emit(repertoire, state, key=inner_key)
        extracted = archive.extract(self.num_extracted, key=extract_key)
        offspring = jax.tree.map(
            lambda x, g: x.astype(g.dtype) if eqx.is_array(x) else x,
            offspring,
            extracted.genotypes,
        )
        sources = jnp.concatenate(
            [jnp.full((self.emitter.batch_size,), NEW, jnp.int32), extracted.sources]
        )
        return tree_concatenate([offspring, extracted.genotypes]), ExtractionExtra(
            sources, inner_extra
        )

    def state_update(
        self,
        state: Any,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> Any:
        """The offspring emitter's update on its own rows."""
        b = self.emitter.batch_size

        def own(tree):
            return None if tree is None else tree_slice(tree, 0, b)

        return self.emitter.state_update(
            state,
            repertoire,
            own(genotypes),
            descriptors[:b],
            fitnesses[:b],
            own(extra),
            add_info=jax.tree.map(lambda x: x[:b], add_info),
            key=key,
        )
