"""Saving and loading repertoires (Equinox serialisation, atomic writes)."""

import os
import tempfile
from collections.abc import Callable
from typing import Any, IO

import equinox as eqx

from ._repertoire import MapElitesRepertoire


def atomic_write(
    path: str | os.PathLike, write: Callable[[IO[Any]], object], *, text: bool = False
) -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, flush it to disk and rename it to
    ``path``: a crash never leaves a partial file (and removes the temporary one)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w" if text else "wb", **({"newline": ""} if text else {})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save_repertoire(path: str | os.PathLike, repertoire: MapElitesRepertoire) -> None:
    """Write the repertoire's arrays to ``path`` (``eqx.tree_serialise_leaves`` format),
    atomically."""
    atomic_write(path, lambda f: eqx.tree_serialise_leaves(f, repertoire))


def load_repertoire(path: str | os.PathLike, like: MapElitesRepertoire) -> MapElitesRepertoire:
    """Read a repertoire saved by `save_repertoire`; ``like`` gives its structure and shapes
    (an empty repertoire with the same tessellation and genotype shape will do)."""
    with open(path, "rb") as f:
        return eqx.tree_deserialise_leaves(f, like)
