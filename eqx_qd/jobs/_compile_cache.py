"""JAX's persistent compilation cache, as the jobs use it and a Python user can: which folder
(`--compile-cache`, `$EQX_QD_COMPILE_CACHE`, else the user's cache folder) and the settings
under which every program is kept."""

import os

from ._folder import user_cache_dir


CACHE_ENV = "EQX_QD_COMPILE_CACHE"
"""The variable naming the cache folder (`off`, `0`, `none` or empty: no cache)."""


def default_compile_cache() -> str | None:
    """`$EQX_QD_COMPILE_CACHE` (None when it says `off`), else `~/.cache/eqx_qd/xla`
    (`$XDG_CACHE_HOME/eqx_qd/xla`)."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else env
    return user_cache_dir("xla")


def use_compile_cache(folder: str | os.PathLike | None = None) -> str | None:
    """Keep the programs JAX compiles in `folder` (default: `default_compile_cache()`), so
    that another process running the same programs loads them instead of compiling them
    again: what `eqx-qd` does for its jobs. Call it before the first compile.

    Every program is kept, however quick its compile: JAX's own setting keeps only those that
    took a second or more, which leaves out most of a QD loop's (the CMA family's first call
    compiles about 140 programs of a fraction of a second each), so
    `jax.config.update("jax_compilation_cache_dir", ...)` alone left a second process compiling
    them all again. Tracing is not cached: a second process still traces each program, most of
    what is left of its first call. **Returns:** the folder, or None (no cache: `off`)."""
    import jax

    path = default_compile_cache() if folder is None else os.fspath(folder)
    if path is None:
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return path
