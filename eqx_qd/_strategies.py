"""The evolution strategies an ES emitter may run, by name (pyribs' names), and how one is
built from the emitter's arguments and its ES options."""

import inspect
from collections.abc import Mapping
from typing import Any

from jaxtyping import Array, Float, ScalarLike

from ._cma_es import CMAES
from ._es_base import AbstractEvolutionStrategy
from ._lm_ma_es import LMMAES
from ._machine import memory_bytes
from ._openai_es import OpenAIES
from ._sep_cma_es import SepCMAES


EVOLUTION_STRATEGIES: dict[str, type[AbstractEvolutionStrategy]] = {
    "cma_es": CMAES,
    "sep_cma_es": SepCMAES,
    "lm_ma_es": LMMAES,
    "openai_es": OpenAIES,
}
"""The strategies by name: full CMA-ES (`O(dim^2)` state), sep-CMA-ES (diagonal, `O(dim)`),
LM-MA-ES (`n_vectors` directions, `O(n_vectors dim)`), OpenAI-ES (`O(dim)`)."""

_COMMON = ("self", "dim", "batch_size", "sigma0", "lower", "upper")


def es_options(name: str) -> tuple[str, ...]:
    """The options of strategy `name` beyond what every strategy takes (`dim`, `batch_size`,
    `sigma0`, `lower`, `upper`)."""
    params = inspect.signature(EVOLUTION_STRATEGIES[name].__init__).parameters
    return tuple(p for p in params if p not in _COMMON)


def make_es(
    owner: str,
    name: str,
    dim: int,
    batch_size: int | None,
    sigma0: ScalarLike,
    lower: ScalarLike | Float[Array, " dim"],
    upper: ScalarLike | Float[Array, " dim"],
    options: Mapping[str, Any] | None = None,
) -> AbstractEvolutionStrategy:
    """Strategy `name` over `dim` variables with `options` (its own: `es_options(name)`). An
    unknown strategy, or an option it does not have, is an error naming `owner` and what it
    takes."""
    if name not in EVOLUTION_STRATEGIES:
        raise ValueError(
            f"{owner}: es must be one of {', '.join(EVOLUTION_STRATEGIES)}, got {name!r}"
        )
    options = dict(options or {})
    known = es_options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        takes = ", ".join(known) if known else "no option"
        raise ValueError(
            f"{owner}: es {name!r} has no option {', '.join(map(repr, unknown))}; it takes {takes}"
        )
    return EVOLUTION_STRATEGIES[name](dim, batch_size, sigma0, lower, upper, **options)


def check_population_memory(
    owner: str, name: str, es: AbstractEvolutionStrategy, size: int
) -> None:
    """Refuse a population of `size` strategies whose states alone would not fit in the
    device's memory (`memory_bytes`), naming what they would need: full CMA-ES holds three
    `dim x dim` matrices per strategy."""
    need = size * es.state_bytes
    have = memory_bytes()
    if need > have:
        raise ValueError(
            f"{owner}: {size} {name} strategies over {es.dim} variables would hold "
            f"{need / 2**30:,.1f} GiB of state, more than this device's {have / 2**30:,.1f} GiB; "
            "take es='lm_ma_es' (O(n_vectors dim) state), 'sep_cma_es' or 'openai_es' (O(dim))"
        )
