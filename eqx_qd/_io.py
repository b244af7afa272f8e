"""Saving and loading repertoires (Equinox serialisation, atomic writes)."""

import os
import tempfile

import equinox as eqx

from ._repertoire import MapElitesRepertoire


def save_repertoire(path: str | os.PathLike, repertoire: MapElitesRepertoire) -> None:
    """Write the repertoire's arrays to ``path`` (``eqx.tree_serialise_leaves`` format).

    The file is written to a temporary name and renamed, so a crash never leaves a partial file.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".eqx")
    try:
        with os.fdopen(fd, "wb") as f:
            eqx.tree_serialise_leaves(f, repertoire)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load_repertoire(path: str | os.PathLike, like: MapElitesRepertoire) -> MapElitesRepertoire:
    """Read a repertoire saved by `save_repertoire`; ``like`` gives its structure and shapes
    (an empty repertoire with the same tessellation and genotype shape will do)."""
    with open(path, "rb") as f:
        return eqx.tree_deserialise_leaves(f, like)
