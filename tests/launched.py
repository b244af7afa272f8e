"""The environment of a process a test launches (not a test module; imports no JAX, so a
launched script may import the test module that uses it without conftest's device settings)."""

import os


def launched_env(**overrides: str) -> dict[str, str]:
    """The environment of a process a test launches: this one's and ``overrides``, with only
    the optimisation level left of XLA_FLAGS (a user's host-device flag would change the
    devices the process sees)."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    level = " ".join(f for f in flags if f.startswith("--xla_backend_optimization_level"))
    env = {**os.environ, **overrides}
    if level:
        env["XLA_FLAGS"] = level
    else:
        env.pop("XLA_FLAGS", None)
    return env
