"""MuJoCo Playground environments (MJX physics) behind the environment contract, and QD tasks
on its dm_control suite robots.

`PlaygroundEnv` wraps any Playground environment by its registry name (its own reset, reward,
termination and observation); `PlaygroundQDEnv` makes QD tasks of the dm_control suite's
walker, hopper, cheetah and humanoid with the brax tasks' conventions (`*_uni`: the fraction
of steps each foot touches the ground; `*_omni`: the torso's final (x, y)). Their models ship
inside the `playground` package: nothing is downloaded at run time.

Playground's locomotion and manipulation robots load their meshes from a MuJoCo Menagerie
clone that Playground makes with `git` the first time one is loaded, which fails offline; such
environments take `menagerie=` (or `EQX_QD_MENAGERIE`), the folder of a local clone.

Playground is imported lazily (its import starts Warp); environments are cached per
configuration so that equal tasks share one Playground object (no retrace).
"""

import abc
import contextlib
import functools
import io
import os
import pathlib
import typing
import warnings
from collections.abc import Iterator
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from .. import _validate as check
from .._compile import compiler_options
from .._custom_types import PRNGKey
from .._extras import require
from .._misc import f32
from ._base import AbstractEnv, AbstractQDEnv, Arena, EnvState, locomotion_descriptor
from ._mjx import models_on_this_process, step_traced_once


MJX_IMPLS = ("auto", "jax", "warp")
"""MJX's physics implementations: `jax` (XLA, any device), `warp` (NVIDIA Warp kernels, for a
GPU) and `auto` (Warp when JAX's default device is a GPU, else `jax`)."""

MENAGERIE_ENV_VAR = "EQX_QD_MENAGERIE"
"""The environment variable naming a local MuJoCo Menagerie clone, when `menagerie=` is not
given."""

_MENAGERIE_URL = "https://github.com/google-deepmind/mujoco_menagerie"


def resolve_impl(impl: str) -> str:
    """`impl` with `auto` resolved: `warp` when JAX's default backend is a GPU, else `jax`."""
    check.one_of("MJX impl", impl, MJX_IMPLS)
    if impl != "auto":
        return impl
    return "warp" if jax.default_backend() == "gpu" else "jax"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # Playground and MJX rely on numpy's implicit promotions (let them run under strict user
    # settings too); its models use MuJoCo attributes that now warn (settotalmass...), and Warp
    # prints its device table at import: noise a user cannot act on.
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield


def _import_playground() -> Any:
    require("playground", "A MuJoCo Playground environment")
    with _quiet():
        from mujoco_playground import registry
    return registry


def _needs_menagerie(name: str) -> bool:
    registry = _import_playground()
    return name in registry.locomotion.ALL_ENVS or name in registry.manipulation.ALL_ENVS


def _menagerie_folder(name: str, menagerie: str | None) -> pathlib.Path | None:
    """The Menagerie folder environment `name` loads from: `menagerie`, else
    `EQX_QD_MENAGERIE`, else Playground's own clone if it made one; `None` for environments
    that need none. A folder that is missing is an error that says what to do."""
    if not _needs_menagerie(name):
        return None
    from mujoco_playground._src import mjx_env

    given = menagerie or os.environ.get(MENAGERIE_ENV_VAR)
    if given is None:
        own = pathlib.Path(str(mjx_env.MENAGERIE_PATH))
        if own.is_dir():
            return own
        raise ValueError(
            f"Playground environment {name!r} loads its robot from the MuJoCo Menagerie, which "
            f"Playground clones from GitHub at run time (that fails offline, and no clone is at "
            f"{own}): clone {_MENAGERIE_URL} (at commit {mjx_env.MENAGERIE_COMMIT_SHA}) and "
            f"pass its folder as menagerie=PATH or in ${MENAGERIE_ENV_VAR}"
        )
    folder = pathlib.Path(given).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"menagerie={given!r}: no such folder; it must be a local clone of {_MENAGERIE_URL}"
        )
    return folder


@contextlib.contextmanager
def _menagerie_at(folder: pathlib.Path | None) -> Iterator[None]:
    """Playground reads its Menagerie folder from a module constant when a robot loads: point
    it at `folder` for the load only."""
    if folder is None:
        yield
        return
    from etils import epath
    from mujoco_playground._src import mjx_env

    before = mjx_env.MENAGERIE_PATH
    mjx_env.MENAGERIE_PATH = epath.Path(folder)
    try:
        yield
    finally:
        mjx_env.MENAGERIE_PATH = before


@functools.lru_cache(maxsize=32)
def _playground_env(name: str, impl: str, menagerie: str | None) -> Any:
    registry = _import_playground()
    if name not in registry.ALL_ENVS:
        raise ValueError(
            f"unknown MuJoCo Playground environment {name!r}; known: {', '.join(registry.ALL_ENVS)}"
        )
    folder = _menagerie_folder(name, menagerie)
    # Built eagerly even when first asked for inside a trace: the cached model holds no tracers.
    with _quiet(), _menagerie_at(folder), jax.ensure_compile_time_eval(), models_on_this_process():
        try:
            return step_traced_once(registry.load(name, config_overrides={"impl": impl}))
        except (FileNotFoundError, ValueError) as e:
            if folder is None:
                raise
            raise ValueError(
                f"Playground environment {name!r} could not load its robot from the Menagerie "
                f"folder {folder} (is it a clone of {_MENAGERIE_URL}?): {e}"
            ) from e


def _policy_obs(obs: Any) -> Any:
    # Playground's locomotion environments observe a dict: the policy's part is "state".
    if isinstance(obs, dict):
        return obs["state"]
    return obs


class _PlaygroundTask(typing.NamedTuple):
    """How a QD task is made from a Playground dm_control environment.

    - `env`: Playground's name (its reward is the task's).
    - `feet`: per foot, the geoms that make it; empty: the torso's final (x, y).
    - `robot`: for help lines.
    - `floor`: the ground geom (a foot touches the ground, not the robot's own body).
    """

    env: str
    feet: tuple[tuple[str, ...], ...]
    robot: str
    floor: str = "floor"


PLAYGROUND_QD_TASKS: dict[str, _PlaygroundTask] = {
    "playground_walker_uni": _PlaygroundTask(
        "WalkerRun", (("right_foot",), ("left_foot",)), "planar walker"
    ),
    "playground_hopper_uni": _PlaygroundTask("HopperHop", (("foot",),), "hopper"),
    "playground_cheetah_uni": _PlaygroundTask(
        "CheetahRun", (("bfoot",), ("ffoot",)), "cheetah", floor="ground"
    ),
    # dm_control's humanoid has two capsules per foot.
    "playground_humanoid_uni": _PlaygroundTask(
        "HumanoidRun",
        (("left_right_foot", "right_right_foot"), ("left_left_foot", "right_left_foot")),
        "humanoid",
    ),
    # Standing's reward has no direction in it: every final position is as good.
    "playground_humanoid_omni": _PlaygroundTask("HumanoidStand", (), "humanoid"),
}
"""QD tasks on Playground's dm_control suite: name -> how the task is made."""


def task_impl(name: str, impl: str = "auto") -> str:
    """The MJX implementation Playground QD task `name` runs on when asked for `impl`:
    `auto` is `jax` for the `*_uni` tasks (their feet contacts are read from the `jax`
    implementation's contact data, which `warp` lays out otherwise) and `resolve_impl`'s pick
    for the others; `warp` for a `*_uni` task is an error."""
    check.one_of("Playground QD task", name, tuple(PLAYGROUND_QD_TASKS))
    resolved = resolve_impl(impl)
    if PLAYGROUND_QD_TASKS[name].feet:
        if impl == "warp":
            raise ValueError(
                f"Playground QD task {name!r}: feet-contact descriptors read the contacts of "
                "MJX's jax implementation; impl='warp' cannot give them: pass impl='jax' or "
                "'auto'"
            )
        return "jax"
    return resolved


@functools.lru_cache(maxsize=32)
def _foot_geoms(name: str, impl: str) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """The floor's geom id and each foot's geom ids in task `name`'s model."""
    import mujoco

    spec = PLAYGROUND_QD_TASKS[name]
    model = _playground_env(spec.env, impl, None).mj_model
    names = (spec.floor, *(g for geoms in spec.feet for g in geoms))
    ids = {g: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in names}
    missing = [g for g, i in ids.items() if i < 0]
    if missing:
        raise ValueError(f"Playground's {spec.env} has no geoms named {missing}")
    return ids[spec.floor], tuple(tuple(ids[g] for g in geoms) for geoms in spec.feet)


@functools.lru_cache(maxsize=32)
def _first_state(name: str, impl: str) -> Any:
    """The state every episode of a deterministic QD task starts from: the robot at rest in its
    model's reference pose (upright; Playground's own reset draws a random pose, upside down
    for some seeds), with Playground's observation of it. NumPy arrays, computed once per
    process by one program compiled at XLA's lowest optimisation level (it runs once)."""
    from mujoco import mjx

    env = _playground_env(PLAYGROUND_QD_TASKS[name].env, impl, None)

    def rest(key_data: Any) -> Any:
        state = env.reset(key_data)
        data = state.data.replace(
            qpos=jnp.asarray(env.mj_model.qpos0, state.data.qpos.dtype),
            qvel=jnp.zeros_like(state.data.qvel),
        )
        data = mjx.forward(env.mjx_model, data)
        # Playground's dm_control environments observe through `_get_obs(data, info)`.
        return state.replace(data=data, obs=env._get_obs(data, state.info))

    with jax.ensure_compile_time_eval():
        key_data = jax.device_get(jax.random.key_data(jax.random.key(0)))
    options = {**compiler_options(), "xla_backend_optimization_level": 0}
    with _quiet():
        compiled = jax.jit(rest).lower(key_data).compile(options)
        return jax.device_get(compiled(key_data))


@functools.lru_cache(maxsize=64)
def _sizes(name: str, impl: str, menagerie: str | None) -> tuple[int, int]:
    env = _playground_env(name, impl, menagerie)
    with _quiet():
        obs = jax.eval_shape(env.reset, jax.random.key_data(jax.random.key(0))).obs
    return int(_policy_obs(obs).shape[-1]), int(env.action_size)


class _AbstractPlayground(AbstractEnv):
    """What both Playground wrappers share: the Playground object, its sizes and the steps."""

    name: eqx.AbstractVar[str]
    impl: eqx.AbstractVar[str]
    length: eqx.AbstractVar[int]
    obs_noise: eqx.AbstractVar[float]
    _env: eqx.AbstractVar[Any]
    _sizes: eqx.AbstractVar[tuple[int, int]]

    @property
    def playground_env(self) -> Any:
        """The underlying Playground environment (an `MjxEnv`)."""
        return self._env

    @property
    def observation_size(self) -> int:
        return self._sizes[0]

    @property
    def action_size(self) -> int:
        return self._sizes[1]

    @property
    def episode_length(self) -> int:
        return self.length

    @abc.abstractmethod
    def _state_desc(self, state: Any) -> Float[Array, " state_desc_dim"]:
        """The per-step state descriptor of Playground state `state`."""

    def _wrap(self, state: Any, key: PRNGKey) -> EnvState:
        obs = f32(_policy_obs(state.obs))
        if self.obs_noise > 0:  # static: no random numbers drawn for deterministic tasks
            obs = obs + self.obs_noise * jr.normal(key, obs.shape)
        return EnvState(state, obs, f32(state.reward), f32(state.done), self._state_desc(state))

    def step(
        self, state: EnvState, action: Float[Array, " action_size"], *, key: PRNGKey
    ) -> EnvState:
        with _quiet():
            physics = self._env.step(state.physics, jnp.clip(action, -1.0, 1.0))
        return self._wrap(physics, key)


@typing.final
class PlaygroundEnv(_AbstractPlayground):
    """Any MuJoCo Playground environment behind the environment contract: its own reset (a
    random start drawn from the key), reward, termination and observation (the `"state"`
    entry where it observes a dict), with episodes cut after `episode_length` steps. The state
    descriptor is the (x, y) of its first body (the torso of Playground's robots).

    PBT, PPO and the other agents train on it unchanged; for QD, use `PlaygroundQDEnv`.

    **Arguments:**

    - `name`: Playground's registry name (`"WalkerRun"`, `"Go1JoystickFlatTerrain"`...).
    - `episode_length`: steps per episode.
    - `impl`: MJX's physics (`MJX_IMPLS`): `jax`, `warp` (a GPU) or `auto`.
    - `menagerie`: a local MuJoCo Menagerie clone, for the robots Playground loads from it
      (its locomotion and manipulation environments); `None`: `$EQX_QD_MENAGERIE`, else
      Playground's own clone (an error when there is none: Playground would clone it from
      GitHub, which fails offline).
    - `obs_noise`: standard deviation of gaussian noise added to observations.
    """

    name: str = eqx.field(static=True)
    impl: str = eqx.field(static=True)
    length: int = eqx.field(static=True)
    obs_noise: float = eqx.field(static=True)
    menagerie: str | None = eqx.field(static=True)
    _env: Any = eqx.field(static=True)  # the cached Playground env (hashed by identity)
    _sizes: tuple[int, int] = eqx.field(static=True)

    def __init__(
        self,
        name: str,
        *,
        episode_length: int = 1000,
        impl: str = "auto",
        menagerie: str | os.PathLike | None = None,
        obs_noise: float = 0.0,
    ):
        check.positive_int("PlaygroundEnv episode_length", episode_length)
        check.non_negative("PlaygroundEnv obs_noise", obs_noise)
        self.name = name
        self.impl = resolve_impl(impl)
        self.length = episode_length
        self.obs_noise = float(obs_noise)
        self.menagerie = None if menagerie is None else os.fspath(menagerie)
        self._env = _playground_env(name, self.impl, self.menagerie)
        self._sizes = _sizes(name, self.impl, self.menagerie)

    @property
    def state_descriptor_size(self) -> int:
        return 2

    def _state_desc(self, state: Any) -> Float[Array, " state_desc_dim"]:
        return f32(state.data.xpos[1, :2])

    def reset(self, *, key: PRNGKey) -> EnvState:
        reset_key, obs_key = jr.split(key)
        with _quiet():
            physics = self._env.reset(jr.key_data(reset_key))
        return self._wrap(physics, obs_key)


@typing.final
class PlaygroundQDEnv(_AbstractPlayground, AbstractQDEnv):
    """A MuJoCo Playground dm_control robot as a QD task, with the brax tasks' conventions.

    The reward is Playground's (`WalkerRun`, `HopperHop`, `CheetahRun`, `HumanoidRun`,
    `HumanoidStand`: dm_control's tolerance rewards, each step in [0, 1], so the QD-score needs
    no offset). `*_uni` tasks: the fraction of valid steps in which each foot touches the
    ground (one of its geoms and the floor are in a contact of MJX's collision detection at
    distance <= 0), one dimension per foot in [0, 1]; `*_omni`: the torso's final (x, y)
    within `omni_bound`, on standing's reward, which favours no direction.

    By default every episode starts from the same state, the robot at rest in its model's
    reference pose (computed once per process, held by programs as a constant);
    `reset_noise=True` takes Playground's own reset (a random pose and joint angles, drawn
    from the key), and `obs_noise` adds gaussian noise to observations.

    **Arguments:**

    - `name`: one of `PLAYGROUND_QD_TASKS` (`playground_walker_uni`, `playground_hopper_uni`,
      `playground_cheetah_uni`, `playground_humanoid_uni`, `playground_humanoid_omni`).
    - `episode_length`: steps per episode (Playground's control step: 25 ms for the walker and
      humanoid, 20 ms for the hopper, 10 ms for the cheetah).
    - `impl`: MJX's physics (`MJX_IMPLS`, resolved by `task_impl`): feet contacts are read
      from the `jax` implementation's contact data, so `*_uni` tasks run on `jax`; `auto`
      puts `*_omni` on Warp on a GPU.
    - `reset_noise`, `obs_noise`: as above.
    - `omni_bound`: half-width of the `*_omni` descriptor box.
    """

    name: str = eqx.field(static=True)
    impl: str = eqx.field(static=True)
    length: int = eqx.field(static=True)
    reset_noise: bool = eqx.field(static=True)
    obs_noise: float = eqx.field(static=True)
    omni_bound: float = eqx.field(static=True)
    _env: Any = eqx.field(static=True)
    _floor: int = eqx.field(static=True)
    _feet: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    _sizes: tuple[int, int] = eqx.field(static=True)

    def __init__(
        self,
        name: str,
        *,
        episode_length: int = 1000,
        impl: str = "auto",
        reset_noise: bool = False,
        obs_noise: float = 0.0,
        omni_bound: float = 10.0,
    ):
        if name not in PLAYGROUND_QD_TASKS:
            raise ValueError(
                f"unknown Playground QD task {name!r}; known: {sorted(PLAYGROUND_QD_TASKS)}"
            )
        check.positive_int("PlaygroundQDEnv episode_length", episode_length)
        check.non_negative("PlaygroundQDEnv obs_noise", obs_noise)
        check.positive("PlaygroundQDEnv omni_bound", omni_bound)
        spec = PLAYGROUND_QD_TASKS[name]
        resolved = task_impl(name, impl)
        self.name = name
        self.impl = resolved
        self.length = episode_length
        self.reset_noise = reset_noise
        self.obs_noise = float(obs_noise)
        self.omni_bound = float(omni_bound)
        self._env = _playground_env(spec.env, resolved, None)
        self._floor, self._feet = _foot_geoms(name, resolved) if spec.feet else (-1, ())
        self._sizes = _sizes(spec.env, resolved, None)

    @property
    def spec(self) -> _PlaygroundTask:
        return PLAYGROUND_QD_TASKS[self.name]

    @property
    def state_descriptor_size(self) -> int:
        return len(self._feet) if self._feet else 2

    @property
    def descriptor_size(self) -> int:
        return self.state_descriptor_size

    @property
    def descriptor_bounds(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        d = self.descriptor_size
        if self._feet:
            return (0.0,) * d, (1.0,) * d
        return (-self.omni_bound,) * d, (self.omni_bound,) * d

    @property
    def reward_offset(self) -> float:
        return 0.0

    @property
    def descriptor_names(self) -> tuple[str, ...]:
        if self.spec.feet:  # ("left_right_foot", ...) -> "right_foot contact"
            return tuple(f"{_foot_name(geoms)} contact" for geoms in self.spec.feet)
        return ("final x", "final y")

    @property
    def arena(self) -> Arena | None:
        return None if self._feet else Arena()

    def descriptor(
        self,
        state_descs: Float[Array, "time state_desc_dim"],
        valid: Float[Array, " time"],
    ) -> Float[Array, " descriptor_size"]:
        return locomotion_descriptor(
            state_descs, valid, feet=bool(self._feet), bounds=self.descriptor_bounds
        )

    def _state_desc(self, state: Any) -> Float[Array, " state_desc_dim"]:
        data = state.data
        if not self._feet:
            return f32(data.xpos[1, :2])
        contact = data._impl.contact  # MJX's jax implementation keeps its contacts there
        geom1, geom2 = jnp.asarray(contact.geom1), jnp.asarray(contact.geom2)
        touching = contact.dist <= 0.0
        flags = []
        for geoms in self._feet:
            ids = jnp.asarray(geoms, jnp.int32)
            on_floor = (geom1 == self._floor) & jnp.isin(geom2, ids)
            on_floor |= (geom2 == self._floor) & jnp.isin(geom1, ids)
            flags.append(jnp.any(on_floor & touching))
        return jnp.stack(flags).astype(jnp.float32)

    def reset(self, *, key: PRNGKey) -> EnvState:
        reset_key, obs_key = jr.split(key)
        if self.reset_noise:
            with _quiet():
                physics = self._env.reset(jr.key_data(reset_key))
        else:  # every episode starts from one state: a constant
            physics = jax.tree.map(jnp.asarray, _first_state(self.name, self.impl))
        return self._wrap(physics, obs_key)


def _foot_name(geoms: tuple[str, ...]) -> str:
    if len(geoms) == 1:
        return geoms[0]
    # dm_control names a humanoid foot's capsules "<side>_<foot>_foot": the shared tail.
    tails = {g.split("_", 1)[1] for g in geoms}
    return tails.pop() if len(tails) == 1 else "+".join(geoms)
