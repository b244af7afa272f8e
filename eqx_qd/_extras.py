"""The optional extras: which modules each brings, and the error that names the extra to
install when one is missing. `pip install eqx_qd` gives the QD core, the agents and the pure-JAX
environments (jax, equinox, optax, jaxtyping, numpy); the rest comes by use."""

import importlib.util
import sys


EXTRAS: dict[str, tuple[str, ...]] = {
    "brax": ("brax",),
    "plot": ("matplotlib",),
    "jobs": ("tqdm", "scipy", "matplotlib"),
    "testing": ("hypothesis",),
    "playground": ("mujoco_playground",),
}
"""Extra -> the modules it installs that the package imports (pyproject's extras hold the
versions; `all` is every extra)."""


class MissingExtra(ImportError):
    """A part of eqx_qd was used without the extra that installs what it imports. The message
    names the extra: `pip install 'eqx_qd[EXTRA]'`."""

    def __init__(self, what: str, extra: str, modules: list[str]):
        self.extra, self.modules = extra, modules
        super().__init__(
            f"{what} needs {', '.join(modules)}, which a plain `pip install eqx_qd` leaves out: "
            f"pip install 'eqx_qd[{extra}]' (or 'eqx_qd[all]')"
        )


def _absent(module: str) -> bool:
    if module in sys.modules:  # (None there: an import that is blocked)
        return sys.modules[module] is None
    return importlib.util.find_spec(module) is None


def require(extra: str, what: str) -> None:
    """Raise `MissingExtra` naming `extra` if a module it installs is absent; `what` is the
    part of eqx_qd that needs it, for the message. Looks the modules up without importing
    them."""
    missing = [m for m in EXTRAS[extra] if _absent(m)]
    if missing:
        raise MissingExtra(what, extra, missing)
