"""Named jaxtyping aliases shared across the package.

A leading space in a one-axis shape string (`" batch"`) keeps linters from reading it as a name.
"""

from collections.abc import Sequence
from typing import Any, TypeAlias

from jaxtyping import Array, ArrayLike, Float, Key, PyTree


PRNGKey: TypeAlias = Key[Array, ""]
Genotypes: TypeAlias = PyTree[Any]
"""A batch of genotypes: any pytree whose array leaves share a leading batch axis."""
Fitnesses: TypeAlias = Float[Array, " batch"]
Descriptors: TypeAlias = Float[Array, "batch num_descriptors"]
Centroids: TypeAlias = Float[Array, "num_cells num_descriptors"]
Extra: TypeAlias = PyTree[Any]
BoundsLike: TypeAlias = ArrayLike | Sequence[float]
"""A bound: a number, an array, or a list of numbers (one per dimension)."""
CentroidsLike: TypeAlias = ArrayLike | Sequence[Sequence[float]]
"""Centroids as given by a user: an array or a list of rows."""
