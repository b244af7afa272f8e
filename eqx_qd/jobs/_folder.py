"""Run folders: the one place the jobs write files, every write atomic.

Every file is written to a temporary name in the same folder, flushed to disk and renamed over
its final name, so a crash (or `kill -9`) leaves either the old file or the new one, never a
partial one. Files get the permissions the user's umask gives (`tempfile` alone would make
them private). Temporary files that a killed write left behind are removed when the folder is
opened again, and never count as results.
"""

import csv
import io
import json
import os
import tempfile
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, IO

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._repertoire import MAPElitesRepertoire


_TMP_PREFIX = ".tmp-"


def user_cache_dir(name: str) -> str:
    """`$XDG_CACHE_HOME/eqx_qd/<name>` (default `~/.cache/eqx_qd/<name>`): where the jobs
    keep what outlives a run (compiled programs, cached centroids)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "eqx_qd", name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(
    path: str | os.PathLike, write: Callable[[IO[Any]], object], *, text: bool = False
) -> None:
    """Call `write(f)` on a temporary file beside `path`, flush it to disk and rename it to
    `path`. On any error the temporary file is removed and `path` is left as it was. With
    `text`, `f` is a text file (no newline translation) rather than a binary one."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=_TMP_PREFIX)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w" if text else "wb", **({"newline": ""} if text else {})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# ------------------------------------------------------------------------- leaves with keys


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array | jax.ShapeDtypeStruct) and jnp.issubdtype(
        x.dtype, jax.dtypes.prng_key
    )


def _save_leaf(f: typing.BinaryIO, x: Any) -> None:
    # Typed keys are stored as their raw key data.
    eqx.default_serialise_filter_spec(f, jr.key_data(x) if _is_key(x) else x)


def _load_leaf(f: typing.BinaryIO, like: Any) -> Any:
    if _is_key(like):
        data = jnp.load(f)  # the raw key data
        return jr.wrap_key_data(data, impl=jr.key_impl(like))
    return eqx.default_deserialise_filter_spec(f, like)


def serialise(f: typing.BinaryIO, tree: Any) -> None:
    """Write the array leaves of `tree` (typed keys included) to the binary file `f` in
    Equinox's format."""
    eqx.tree_serialise_leaves(f, tree, _save_leaf)


def deserialise(f: typing.BinaryIO, like: Any) -> Any:
    """Read from the binary file `f` what `serialise` wrote; `like` gives the structure,
    shapes and dtypes (arrays, or `jax.ShapeDtypeStruct`s from `eqx.filter_eval_shape`,
    typed keys included)."""
    # Keys in a shape template become concrete (zero) keys: Equinox keeps each leaf's type.
    concrete = lambda x: jnp.zeros(x.shape, x.dtype) if isinstance(x, jax.ShapeDtypeStruct) else x
    like = jax.tree.map(lambda x: concrete(x) if _is_key(x) else x, like)
    return eqx.tree_deserialise_leaves(f, like, _load_leaf)


def save_repertoire(path: str | os.PathLike, repertoire: MAPElitesRepertoire) -> None:
    """Write the repertoire's arrays to `path` (Equinox serialisation), atomically."""
    atomic_write(path, lambda f: serialise(f, repertoire))


def load_repertoire(path: str | os.PathLike, like: MAPElitesRepertoire) -> MAPElitesRepertoire:
    """Read from `path` a repertoire written by `save_repertoire`; `like` gives its
    structure and shapes
    (an empty repertoire with the same tessellation and genotype shape will do)."""
    with open(path, "rb") as f:
        return deserialise(f, like)


# ------------------------------------------------------------------------------- the folder


def _parse(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


class RunFolder:
    """A run's folder. Every `write_*` is atomic; `read_*` reads back what they wrote.

    Opening a folder to write (`create=True`) creates it if needed and removes the temporary
    files of writes that were interrupted; opening one to read touches nothing.

    **Arguments:** `path` (the folder), `create`.
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = True):
        self.path = os.fspath(path)
        self.caption: str | None = None
        """The title of the figures written here (`write_figure`)."""
        if create:
            os.makedirs(self.path, exist_ok=True)
            for name in os.listdir(self.path):
                if name.startswith(_TMP_PREFIX):
                    os.remove(os.path.join(self.path, name))

    def __repr__(self) -> str:
        return f"RunFolder({self.path!r})"

    def file(self, name: str) -> str:
        """The path of file `name` (which may name a subfolder: `checkpoints/0001.eqx`)."""
        return os.path.join(self.path, name)

    def exists(self, name: str) -> bool:
        """Whether file (or subfolder) `name` exists."""
        return os.path.exists(self.file(name))

    def subfolder(self, name: str, *, create: bool = True) -> "RunFolder":
        """The subfolder `name` as a `RunFolder` (created unless `create=False`)."""
        return RunFolder(self.file(name), create=create)

    # -- writing ------------------------------------------------------------------------------

    def write_bytes(self, name: str, data: bytes) -> None:
        """File `name` holding `data`."""
        atomic_write(self.file(name), lambda f: f.write(data))

    def write_text(self, name: str, text: str) -> None:
        """File `name` holding `text` (UTF-8)."""
        self.write_bytes(name, text.encode())

    def write_json(self, name: str, data: Any) -> None:
        """File `name` holding `data` as indented JSON."""
        self.write_text(name, json.dumps(data, indent=1) + "\n")

    def write_csv(self, name: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """CSV file `name`: the `header` row, then `rows` (the whole file, atomically; a log
        grows with `append_csv`)."""

        def write(f):
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)

        atomic_write(self.file(name), write, text=True)

    def append_csv(self, name: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """Add `rows` to the end of CSV file `name`, created with `header` when missing (then
        atomically). The rows are flushed to disk before this returns; a write killed midway
        can leave a partial last row, which `jobs.read_log` drops."""
        if not self.exists(name):
            self.write_csv(name, header, rows)
            return
        with open(self.file(name), "a", newline="") as f:
            csv.writer(f).writerows(rows)
            f.flush()
            os.fsync(f.fileno())

    def write_columns(self, name: str, columns: Mapping[str, np.ndarray | Sequence[Any]]) -> None:
        """CSV file `name` with one column per entry of `columns` (equal lengths)."""
        arrays = [np.asarray(v) for v in columns.values()]
        rows = zip(*[a.tolist() for a in arrays]) if arrays else iter(())
        self.write_csv(name, list(columns), rows)

    def write_npy(self, name: str, array: Any) -> None:
        """`array` as NumPy's `.npy` file `name`."""
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(array))
        self.write_bytes(name, buffer.getvalue())

    def write_eqx(self, name: str, tree: Any) -> None:
        """File `name` holding the array leaves of `tree` (typed keys included), Equinox's
        format."""
        atomic_write(self.file(name), lambda f: serialise(f, tree))

    def write_figure(self, name: str, fig: Any) -> None:
        """The matplotlib figure `fig` as the PNG file `name`, titled with the folder's
        `caption` when it has one (the job's runs: job, task and run, so a figure read alone
        says what it shows); the figure is closed afterwards."""
        import matplotlib.pyplot as plt

        if self.caption:
            own = getattr(fig, "_suptitle", None)
            if own is not None and own.get_text():  # a title of its own: the caption above
                fig.suptitle(f"{self.caption}\n{own.get_text()}")
            else:
                fig.suptitle(self.caption, fontsize="medium")
                fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        plt.close(fig)
        self.write_bytes(name, buffer.getvalue())

    # -- reading ------------------------------------------------------------------------------

    def read_text(self, name: str) -> str:
        """The text of file `name`."""
        with open(self.file(name)) as f:
            return f.read()

    def read_json(self, name: str) -> Any:
        """The JSON value in file `name`; a file that is not JSON is a `ValueError` naming it."""
        try:
            return json.loads(self.read_text(name))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(
                f"{self.file(name)!r} is truncated or corrupt (not JSON: {e}; edited by hand?)"
            ) from None

    def read_npy(self, name: str) -> np.ndarray:
        """The array in `.npy` file `name`; a truncated or corrupt file is a `ValueError`
        naming it."""
        try:
            return np.load(self.file(name))
        except (ValueError, EOFError, OSError) as e:
            if isinstance(e, FileNotFoundError):
                raise
            raise ValueError(f"{self.file(name)!r} is truncated or corrupt: {e}") from None

    def read_columns(self, name: str) -> dict[str, np.ndarray]:
        """The columns of a CSV file: float arrays where every value is a number, else str. A
        last row cut by a kill (of another length than the header) is dropped, as
        `jobs.read_log` does; a file with a header only gives empty columns."""
        with open(self.file(name), newline="") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            rows = [r for r in reader if len(r) == len(header)]
        out = {}
        for j, column in enumerate(header):
            values = [_parse(r[j]) for r in rows]
            numeric = all(isinstance(v, float) for v in values)
            out[column] = np.asarray(values, np.float64 if numeric else str)
        return out

    def read_eqx(self, name: str, like: Any) -> Any:
        """What `write_eqx` wrote to file `name`; `like` gives the structure (arrays, or
        shape structs from `eqx.filter_eval_shape`). A truncated or corrupt file, or one of
        another structure (written by an eqx_qd whose states had other fields), is a
        `ValueError` naming it."""
        with open(self.file(name), "rb") as f:
            try:
                return deserialise(f, like)
            except (ValueError, TypeError, EOFError, OSError, RuntimeError) as e:
                raise ValueError(
                    f"{self.file(name)!r} is truncated or corrupt (a write killed midway, "
                    "another run's file, or one an eqx_qd whose states differ wrote: see "
                    f"CHANGELOG.md): {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                ) from e
