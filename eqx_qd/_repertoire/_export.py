"""Any repertoire as a pandas DataFrame (pyribs' `ArchiveDataFrame` columns)."""

import typing

import equinox as eqx
import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from ._base import AbstractMultiObjectiveRepertoire, AbstractRepertoire
from ._pareto import ParetoRepertoire


if typing.TYPE_CHECKING:
    import pandas


def _flat_rows(tree, keep: np.ndarray) -> np.ndarray:
    """Each kept row of a batched pytree's array leaves (others dropped), as one vector."""
    arrays = eqx.filter(tree, eqx.is_array)
    flat = jax.vmap(lambda row: ravel_pytree(row)[0])(arrays)
    return np.asarray(flat)[keep].reshape(int(keep.sum()), -1)


def to_dataframe(repertoire: AbstractRepertoire) -> "pandas.DataFrame":
    """The stored elites of `repertoire`, one row each, in pyribs' `ArchiveDataFrame`
    columns: `index` (the cell or slot), `objective` (the fitness), `measures_0`, ...
    (the descriptor), `solution_0`, ... (the genotype's array leaves flattened in
    `jax.flatten_util.ravel_pytree` order) and, when the repertoire stores `extra`, `extra`
    (one value per elite, such as its id) or `extra_0`, ....

    A multi-objective repertoire adds `objective_0`, ... (its objective vector; `objective`
    is then the sum); a `ParetoRepertoire` adds `cell` and `position` (in its cell's front),
    one row per solution.

    Needs pandas (`pip install 'eqx_qd[pandas]'`)."""
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - the tests install the extra
        raise ImportError("to_dataframe needs pandas: pip install 'eqx_qd[pandas]'") from e
    if not isinstance(repertoire, AbstractRepertoire):
        raise TypeError(
            "to_dataframe: repertoire must be an eqx_qd.AbstractRepertoire, got "
            f"{type(repertoire).__name__}"
        )
    keep = np.asarray(repertoire.filled)
    columns: dict[str, np.ndarray] = {
        "index": np.flatnonzero(keep),
        "objective": np.asarray(repertoire.fitnesses)[keep],
    }
    if isinstance(repertoire, AbstractMultiObjectiveRepertoire):
        for i, col in enumerate(np.asarray(repertoire.objectives)[keep].T):
            columns[f"objective_{i}"] = col
    if isinstance(repertoire, ParetoRepertoire):
        columns["cell"], columns["position"] = np.divmod(columns["index"], repertoire.front_length)
    for i, col in enumerate(np.asarray(repertoire.descriptors)[keep].T):
        columns[f"measures_{i}"] = col
    for i, col in enumerate(_flat_rows(repertoire.genotypes, keep).T):
        columns[f"solution_{i}"] = col
    if repertoire.extra is not None:
        extra = _flat_rows(repertoire.extra, keep)
        if extra.shape[1] == 1:
            columns["extra"] = extra[:, 0]
        else:
            for i, col in enumerate(extra.T):
                columns[f"extra_{i}"] = col
    return pandas.DataFrame(columns)
