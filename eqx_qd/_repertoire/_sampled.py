"""What a sampled scoring hands a repertoire: every candidate's samples, and the capability of
the repertoires that insert by them."""

import equinox as eqx
from jaxtyping import Array, Float

from .._custom_types import Extra
from ._base import AbstractRepertoire


class SampledExtra(eqx.Module):
    """What a `Sampled` task returns beside its estimates: each candidate's `fitness_spread`
    `(batch,)` and `descriptor_spread` `(batch, num_descriptors)` over its samples, the
    samples themselves (`fitness_samples` `(batch, num_samples)`, `descriptor_samples`
    `(batch, num_samples, num_descriptors)`: what `LowSpreadRepertoire` inserts by), and the
    inner task's `extra` of every sample (sample axis second)."""

    fitness_spread: Float[Array, " batch"]
    descriptor_spread: Float[Array, "batch num_descriptors"]
    fitness_samples: Float[Array, "batch num_samples"]
    descriptor_samples: Float[Array, "batch num_samples num_descriptors"]
    extra: Extra


class AbstractSampledRepertoire(AbstractRepertoire):
    """A repertoire that inserts candidates by their samples: its `add` takes as `extra` the
    scoring's `SampledExtra` (score with `Sampled(task, n)`), or `None` for one sample each
    (the descriptor and fitness given). `MAPElites` hands it the scoring's extra; it stores no
    per-elite extra (no `lineage`)."""
