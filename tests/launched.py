"""The environment of a process a test launches (not a test module; imports no JAX, so a
launched script may import the test module that uses it without conftest's device settings)."""

import os


def launched_env(**overrides: str) -> dict[str, str]:
    """The environment of a process a test launches: this one's and ``overrides``, with only
    the suite's compile options left of XLA_FLAGS (the optimisation level and the fusion code
    generator, set by the top-level `conftest.py`; a user's host-device flag would change the
    devices the process sees)."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    kept = ("--xla_backend_optimization_level", "--xla_cpu_use_fusion_emitters")
    suite = " ".join(f for f in flags if f.startswith(kept))
    env = {**os.environ, **overrides}
    if suite:
        env["XLA_FLAGS"] = suite
    else:
        env.pop("XLA_FLAGS", None)
    return env
