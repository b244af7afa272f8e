"""QD locomotion tasks on current brax: feet-contact and final-position descriptors.

brax is imported lazily (its import prints warnings and takes seconds), and environments are
cached per configuration so that two equal tasks share one brax object (no retrace).
"""

import contextlib
import functools
import io
import typing
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import f32
from .base import AbstractQDEnv, EnvState, final_descriptor, mean_descriptor


@contextlib.contextmanager
def _brax_numerics():
    # brax relies on numpy's implicit promotions (let it run under strict user settings too) and
    # traces through deprecated mujoco accessors (noise a user cannot act on).
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            yield


class _TaskSpec(typing.NamedTuple):
    robot: str
    feet: tuple[str, ...]  # foot geoms for feet-contact descriptors; empty -> final (x, y)
    reward_offset: float
    omni: bool = False


# Reward offsets are QDax's (`qdax.tasks.brax.v1` and `v2`, `reward_offset`), so that QD-scores
# stay comparable across libraries.
QD_BRAX_TASKS: dict[str, _TaskSpec] = {
    "walker2d_uni": _TaskSpec("walker2d", ("foot_geom", "foot_left_geom"), 1.413),
    "halfcheetah_uni": _TaskSpec("halfcheetah", ("bfoot", "ffoot"), 9.231),
    "hopper_uni": _TaskSpec("hopper", ("foot_geom",), 0.9),
    "ant_uni": _TaskSpec(
        "ant", ("left_foot_geom", "right_foot_geom", "third_foot_geom", "fourth_foot_geom"), 3.24
    ),
    "ant_omni": _TaskSpec("ant", (), 3.0, omni=True),
}
"""QD brax tasks: name -> (brax robot, foot geoms, reward offset, omni)."""

DEFAULT_BACKEND = "spring"
"""brax's fastest physics backend on CPU for every robot here (figures in the README)."""


def _import_brax_envs():
    # brax prints "Failed to import warp" on stdout and its dependencies (jaxopt, ...) warn about
    # deprecations at import time; keep that noise out of user output.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from brax import envs
    return envs


@functools.lru_cache(maxsize=32)
def _brax_env(robot: str, backend: str, debug: bool) -> Any:
    envs = _import_brax_envs()
    # Built eagerly even when first asked for inside a trace: the cached system must hold no
    # tracers.
    with warnings.catch_warnings(), jax.ensure_compile_time_eval():
        warnings.simplefilter("ignore")  # "brax is not actively maintained"
        return envs.get_environment(robot, backend=backend, debug=debug)


@functools.lru_cache(maxsize=32)
def _sizes(robot: str, backend: str, debug: bool) -> tuple[int, int]:
    env = _brax_env(robot, backend, debug)
    with _brax_numerics():  # brax's observation_size runs a reset
        return int(env.observation_size), int(env.action_size)


@functools.lru_cache(maxsize=32)
def _foot_geom_ids(robot: str, backend: str, feet: tuple[str, ...]) -> tuple[int, ...]:
    import mujoco

    model = _brax_env(robot, backend, True).sys.mj_model
    ids = tuple(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name) for name in feet)
    missing = [name for name, i in zip(feet, ids) if i < 0]
    if missing:
        raise ValueError(f"brax robot {robot!r} has no geoms named {missing}")
    return ids


@typing.final
class BraxQDEnv(AbstractQDEnv):
    """A brax robot as a QD task.

    ``*_uni`` tasks: the brax reward (forward velocity + healthy bonus - control cost), and the
    fraction of valid steps in which each foot touches the ground as descriptor (one dimension
    per foot, in [0, 1]). ``ant_omni``: the reward without its forward term (survival minus
    control and contact costs) and the final (x, y) of the torso as descriptor, within
    ``omni_bound``.

    By default every episode starts from the same state (a deterministic task, as in QDax);
    ``reset_noise=True`` keeps brax's random initial perturbation, and ``obs_noise`` adds
    gaussian noise to observations (the stochastic variants of the PGA-ME paper).

    **Arguments:**

    - `name`: one of `QD_BRAX_TASKS` (``walker2d_uni``, ``halfcheetah_uni``, ``hopper_uni``,
      ``ant_uni``, ``ant_omni``).
    - `episode_length`: steps per episode.
    - `backend`: brax's physics (``spring``, fastest on CPU; ``positional``,
      ``generalized``, ``mjx``).
    - `reset_noise`, `obs_noise`: as above.
    - `omni_bound`: half-width of the ``ant_omni`` descriptor box.
    """

    name: str = eqx.field(static=True)
    backend: str = eqx.field(static=True)
    length: int = eqx.field(static=True)
    reset_noise: bool = eqx.field(static=True)
    omni_bound: float = eqx.field(static=True)
    obs_noise: float = eqx.field(static=True)
    _env: Any = eqx.field(static=True)  # the cached brax env (hashed by identity)
    _feet: tuple[int, ...] = eqx.field(static=True)
    _sizes: tuple[int, int] = eqx.field(static=True)

    def __init__(
        self,
        name: str,
        *,
        episode_length: int = 100,
        backend: str = DEFAULT_BACKEND,
        reset_noise: bool = False,
        obs_noise: float = 0.0,
        omni_bound: float = 30.0,
    ):
        if name not in QD_BRAX_TASKS:
            raise ValueError(f"unknown brax QD task {name!r}; known: {sorted(QD_BRAX_TASKS)}")
        check.positive_int("BraxQDEnv episode_length", episode_length)
        check.one_of("BraxQDEnv backend", backend, ("spring", "positional", "generalized", "mjx"))
        check.non_negative("BraxQDEnv obs_noise", obs_noise)
        check.positive("BraxQDEnv omni_bound", omni_bound)
        spec = QD_BRAX_TASKS[name]
        self.name = name
        self.backend = backend
        self.length = episode_length
        self.reset_noise = reset_noise
        self.omni_bound = float(omni_bound)
        self.obs_noise = float(obs_noise)
        # Contacts are only recorded by the non-mjx backends when brax runs in debug mode.
        self._env = _brax_env(spec.robot, backend, bool(spec.feet))
        self._feet = _foot_geom_ids(spec.robot, backend, spec.feet) if spec.feet else ()
        self._sizes = _sizes(spec.robot, backend, bool(spec.feet))

    @property
    def brax_env(self) -> Any:
        """The underlying brax environment."""
        return self._env

    @property
    def spec(self) -> _TaskSpec:
        return QD_BRAX_TASKS[self.name]

    @property
    def observation_size(self) -> int:
        return self._sizes[0]

    @property
    def action_size(self) -> int:
        return self._sizes[1]

    @property
    def state_descriptor_size(self) -> int:
        return len(self._feet) if self._feet else 2

    @property
    def descriptor_size(self) -> int:
        return self.state_descriptor_size

    @property
    def episode_length(self) -> int:
        return self.length

    @property
    def descriptor_bounds(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        d = self.descriptor_size
        if self._feet:
            return (0.0,) * d, (1.0,) * d
        return (-self.omni_bound,) * d, (self.omni_bound,) * d

    @property
    def reward_offset(self) -> float:
        return self.spec.reward_offset

    def descriptor(
        self,
        state_descs: Float[Array, "time state_desc_dim"],
        valid: Float[Array, " time"],
    ) -> Float[Array, " descriptor_size"]:
        if self._feet:
            return mean_descriptor(state_descs, valid)
        return jnp.clip(final_descriptor(state_descs, valid), -self.omni_bound, self.omni_bound)

    def _state_desc(self, brax_state: Any) -> Float[Array, " state_desc_dim"]:
        pipeline = brax_state.pipeline_state
        if not self._feet:
            return pipeline.x.pos[0, :2].astype(jnp.float32)
        contact = pipeline.contact
        geom1, geom2 = jnp.asarray(contact.geom1), jnp.asarray(contact.geom2)
        touching = contact.dist <= 0.0
        feet = jnp.asarray(self._feet, jnp.int32)
        involves = (geom1[None, :] == feet[:, None]) | (geom2[None, :] == feet[:, None])
        return jnp.any(involves & touching[None, :], axis=1).astype(jnp.float32)

    def _wrap(self, brax_state: Any, key: PRNGKey) -> EnvState:
        brax_state = brax_state.replace(metrics=jax.tree.map(f32, brax_state.metrics))
        reward = brax_state.reward
        if self.spec.omni:
            reward = reward - brax_state.metrics["reward_forward"]
        obs = brax_state.obs
        if self.obs_noise > 0:  # static: no random numbers drawn for deterministic tasks
            obs = obs + self.obs_noise * jr.normal(key, obs.shape)
        return EnvState(
            brax_state, obs, f32(reward), f32(brax_state.done), self._state_desc(brax_state)
        )

    def reset(self, *, key: PRNGKey) -> EnvState:
        reset_key, obs_key = jr.split(key)
        if not self.reset_noise:
            reset_key = jr.key(0)
        with _brax_numerics():
            brax_state = self.brax_env.reset(jr.key_data(reset_key))
        return self._wrap(brax_state, obs_key)

    def step(
        self, state: EnvState, action: Float[Array, " action_size"], *, key: PRNGKey
    ) -> EnvState:
        with _brax_numerics():
            brax_state = self.brax_env.step(state.physics, jnp.clip(action, -1.0, 1.0))
        return self._wrap(brax_state, key)
