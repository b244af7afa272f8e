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
from .._compile import compiler_options
from .._custom_types import PRNGKey
from .._extras import require
from .._misc import f32
from ._base import (
    AbstractMultiObjectiveQDEnv,
    AbstractQDEnv,
    AbstractRenderable,
    Arena,
    EnvState,
    locomotion_descriptor,
)
from ._mjx import models_on_this_process, step_traced_once


@contextlib.contextmanager
def _brax_numerics():
    # brax relies on numpy's implicit promotions (let it run under strict user settings too) and
    # traces through deprecated mujoco accessors (noise a user cannot act on).
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            yield


Segment = tuple[float, float, float, float]
"""A wall: a capsule of radius 0.5 m and height 0.5 m from (x0, y0) to (x1, y1)."""


class _TaskSpec(typing.NamedTuple):
    """How a QD task is made from a brax robot.

    - `robot`: brax's environment name.
    - `feet`: foot geoms for feet-contact descriptors; empty: the final (x, y) of the torso.
    - `reward_offset`: QDax's offset (minimum reward per step), for the QD-score.
    - `reward`: `"brax"` (the robot's reward), `"no_forward"` (without its forward term, for
      omni tasks) or `"to_target"` (minus the torso's distance to `target`).
    - `bounds`: the descriptor box ((x low, y low), (x high, y high)); None: [0, 1] per foot, or
      +-`omni_bound`.
    - `walls`: capsules added to the world (real geometry: the robot collides with them).
    - `wall_colliders`: the robot's geoms made to collide with walls (the feet always do).
    - `xy_obs`: (subtract, divide): the torso's normalised (x, y) put in front of the observation.
    - `target`: the goal of a `"to_target"` reward, drawn as a sphere.
    - `brax_options`: keyword arguments of the brax environment.
    """

    robot: str
    feet: tuple[str, ...] = ()
    reward_offset: float = 0.0
    reward: str = "brax"
    bounds: tuple[tuple[float, float], tuple[float, float]] | None = None
    walls: tuple[Segment, ...] = ()
    wall_colliders: tuple[str, ...] = ()
    xy_obs: tuple[tuple[float, float], tuple[float, float]] | None = None
    target: tuple[float, float] | None = None
    brax_options: tuple[tuple[str, Any], ...] = ()

    @property
    def omni(self) -> bool:
        """Whether the descriptor is the final (x, y) of the torso."""
        return not self.feet


def _trap(x: float) -> tuple[Segment, ...]:
    # QDax v1's trap (brax v1 capsules of radius 0.5 whose length counts both caps): a U open
    # towards the start, its back wall across x, the side walls 5 m long at y = +-3.
    return ((x, -2.0, x, 2.0), (x - 5.0, 3.0, x, 3.0), (x - 5.0, -3.0, x, -3.0))


# QDax v1's maze: a 45 m square, a wall at x = 20 that blocks the straight way to the target at
# (35, 0), a dead end under y = 7.5, and a wall down from the top at x = 10.
_MAZE: tuple[Segment, ...] = (
    (-5.0, -5.0, 40.0, -5.0),
    (-5.0, 40.0, 40.0, 40.0),
    (-5.0, -4.0, -5.0, 39.0),
    (40.0, -4.0, 40.0, 39.0),
    (20.0, -4.0, 20.0, 19.0),
    (11.0, 7.5, 19.0, 7.5),
    (10.0, 20.75, 10.0, 39.25),
)

_ANT_FEET = ("left_foot_geom", "right_foot_geom", "third_foot_geom", "fourth_foot_geom")

# Reward offsets are QDax's (`qdax.tasks.brax.v1` and `v2`, `reward_offset`), so that QD-scores
# stay comparable across libraries; the deceptive tasks' bounds, walls, observations and rewards
# are those of QDax's brax-v1 versions (`exploration_wrappers.py`, `humanoidtrap.py`), rebuilt on
# current brax.
QD_BRAX_TASKS: dict[str, _TaskSpec] = {
    "walker2d_uni": _TaskSpec("walker2d", ("foot_geom", "foot_left_geom"), 1.413),
    "halfcheetah_uni": _TaskSpec("halfcheetah", ("bfoot", "ffoot"), 9.231),
    "hopper_uni": _TaskSpec("hopper", ("foot_geom",), 0.9),
    "ant_uni": _TaskSpec("ant", _ANT_FEET, 3.24),
    "ant_omni": _TaskSpec("ant", (), 3.0, reward="no_forward"),
    # Current brax's humanoid touches the floor with its foot spheres only (QDax names the shins,
    # which held the feet in brax v1's humanoid).
    "humanoid_uni": _TaskSpec("humanoid", ("left_foot", "right_foot"), 0.0),
    "humanoid_omni": _TaskSpec("humanoid", (), 0.0, reward="no_forward"),
    "anttrap": _TaskSpec(
        "ant",
        (),
        3.38,
        bounds=((0.0, -8.0), (30.0, 8.0)),
        walls=_trap(12.0),
        wall_colliders=("torso_geom",),
        xy_obs=((15.0, 0.0), (15.0, 8.0)),
    ),
    "antmaze": _TaskSpec(
        "ant",
        (),
        40.32,
        reward="to_target",
        bounds=((-5.0, -5.0), (40.0, 40.0)),
        walls=_MAZE,
        wall_colliders=("torso_geom",),
        xy_obs=((17.5, 17.5), (22.5, 22.5)),
        target=(35.0, 0.0),
        # QDax's maze ends an episode only when the torso is under 0.2 m or over 5 m (the ant
        # would otherwise end a costly episode by jumping).
        brax_options=(("healthy_z_range", (0.2, 5.0)),),
    ),
    "humanoidtrap": _TaskSpec(
        "humanoid",
        (),
        0.0,
        bounds=((0.0, -8.0), (30.0, 8.0)),
        walls=_trap(9.0),
        wall_colliders=("left_shin1", "right_shin1"),
        brax_options=(("healthy_z_range", (0.8, 2.1)),),  # QDax v1's humanoid trap
    ),
}
"""QD brax tasks: name -> how the task is made (`_TaskSpec`)."""

_FORWARD_METRIC = {"ant": "reward_forward", "humanoid": "forward_reward"}
"""The metric holding each robot's forward reward (removed by `"no_forward"`)."""

DEFAULT_BACKEND = "spring"
"""brax's fastest physics backend on CPU for every robot here (figures in the README)."""


def _import_brax_envs():
    require("brax", "A brax task")
    # brax prints "Failed to import warp" on stdout and its dependencies (jaxopt, ...) warn about
    # deprecations at import time; keep that noise out of user output.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from brax import envs
    return envs


def _new_brax_env(robot: str, backend: str, debug: bool, **options: Any) -> Any:
    envs = _import_brax_envs()
    # Built eagerly even when first asked for inside a trace: the cached system must hold no
    # tracers.
    with warnings.catch_warnings(), jax.ensure_compile_time_eval(), models_on_this_process():
        warnings.simplefilter("ignore")  # "brax is not actively maintained"
        return envs.get_environment(robot, backend=backend, debug=debug, **options)


@functools.lru_cache(maxsize=32)
def _brax_env(robot: str, backend: str, debug: bool) -> Any:
    return step_traced_once(_new_brax_env(robot, backend, debug))


def _with_walls(env: Any, spec: _TaskSpec) -> Any:
    """`env` with `spec`'s walls (and target) added to its robot's MJCF world."""
    import xml.etree.ElementTree as ET

    from brax.io import mjcf
    from etils import epath

    root = ET.fromstring(
        (epath.resource_path("brax") / f"envs/assets/{spec.robot}.xml").read_text()
    )
    world = root.find("worldbody")
    assert world is not None
    # Contact bits: the floor has conaffinity 1 and the feet contype 1; walls take conaffinity
    # 1 | 2, and the other robot geoms that must hit them contype 2, which the floor ignores.
    for x0, y0, x1, y1 in spec.walls:
        ET.SubElement(
            world,
            "geom",
            type="capsule",
            size="0.5",
            contype="0",
            conaffinity="3",
            fromto=f"{x0} {y0} 0.5 {x1} {y1} 0.5",
            rgba="0.55 0.25 0.2 1",
        )
    if spec.target is not None:
        x, y = spec.target
        ET.SubElement(
            world,
            "geom",
            type="sphere",
            size="0.5",
            contype="0",
            conaffinity="0",
            pos=f"{x} {y} 0.5",
            rgba="0.2 0.7 0.2 1",
        )
    named = {g.get("name"): g for g in root.iter("geom")}
    missing = [n for n in spec.wall_colliders if n not in named]
    if missing:
        raise ValueError(f"brax robot {spec.robot!r} has no geoms named {missing}")
    for name in spec.wall_colliders:
        named[name].set("contype", "2")
    sys = mjcf.loads(ET.tostring(root, encoding="unicode"))
    # The robot's own constructor tuned the options and gears per backend: keep its tuning.
    env.sys = sys.replace(opt=env.sys.opt, actuator=env.sys.actuator)
    return env


@functools.lru_cache(maxsize=32)
def _task_env(name: str, backend: str) -> Any:
    """The brax environment of QD task `name`: its robot with the task's options and walls
    (a fresh object: `_with_walls` replaces its system, which a shared one must not see)."""
    spec = QD_BRAX_TASKS[name]
    # Contacts are only recorded by the non-mjx backends when brax runs in debug mode.
    env = _new_brax_env(spec.robot, backend, bool(spec.feet), **dict(spec.brax_options))
    if not (spec.walls or spec.target):
        return step_traced_once(env)
    with warnings.catch_warnings(), jax.ensure_compile_time_eval(), models_on_this_process():
        warnings.simplefilter("ignore")  # as in _new_brax_env
        return step_traced_once(_with_walls(env, spec))


@functools.lru_cache(maxsize=32)
def _sizes(name: str, backend: str) -> tuple[int, int]:
    env = _task_env(name, backend)
    # brax's own `observation_size` runs a reset eagerly, some 200 small XLA programs; its
    # shapes alone are what is needed: an abstract evaluation.
    with _brax_numerics():
        obs_size = int(jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs.shape[-1])
    return obs_size + (2 if QD_BRAX_TASKS[name].xy_obs else 0), int(env.action_size)


@functools.lru_cache(maxsize=32)
def _first_state(name: str, backend: str) -> Any:
    """The brax state every episode of a deterministic task starts from (brax's reset with key
    0), as NumPy arrays: a constant of the task, computed once per process. A program that
    plays episodes then holds no reset (about a third of a brax rollout's compile time); this
    one program runs once, so it is compiled at XLA's lowest optimisation level, which compiles
    it faster (`benchmarks/log/measurements-behind-the-code.md`)."""
    env = _task_env(name, backend)
    with jax.ensure_compile_time_eval():  # concrete even when first called inside a trace
        key_data = jax.device_get(jax.random.key_data(jax.random.key(0)))
    options = {**compiler_options(), "xla_backend_optimization_level": 0}
    with _brax_numerics():
        # A compiled program called with concrete input runs now, even inside a trace.
        compiled = jax.jit(env.reset).lower(key_data).compile(options)
        return jax.device_get(compiled(key_data))


@functools.lru_cache(maxsize=32)
def _foot_geom_ids(name: str, backend: str) -> tuple[int, ...]:
    import mujoco

    spec = QD_BRAX_TASKS[name]
    model = _task_env(name, backend).sys.mj_model
    ids = tuple(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n) for n in spec.feet)
    missing = [n for n, i in zip(spec.feet, ids) if i < 0]
    if missing:
        raise ValueError(f"brax robot {spec.robot!r} has no geoms named {missing}")
    return ids


class _Frame(typing.NamedTuple):
    x: Any  # what brax's viewer reads of a state: the links' transforms


@typing.final
class BraxQDEnv(AbstractQDEnv, AbstractRenderable):
    """A brax robot as a QD task.

    `*_uni` tasks: the brax reward (forward velocity + healthy bonus - control cost), and the
    fraction of valid steps in which each foot touches the ground as descriptor (one dimension
    per foot, in [0, 1]). `*_omni`: the reward without its forward term (survival minus
    control and contact costs) and the final (x, y) of the torso as descriptor, within
    `omni_bound`.

    The deceptive tasks of the ME-PBT paper, as QDax's brax-v1 versions defined them, with
    their walls as brax geometry that the robot collides with, and the final (x, y) of the
    torso as descriptor: `anttrap` (the ant's reward, which pays running along +x straight
    into a U-shaped trap at x = 12; descriptor box [0, 30] x [-8, 8]), `humanoidtrap` (the
    same for the humanoid, the trap at x = 9) and `antmaze` (reward: minus the distance to a
    target at (35, 0) behind a wall; box [-5, 40]^2). The ant tasks put the torso's normalised
    (x, y) in front of the observation, as QDax's did.

    By default every episode starts from the same state (a deterministic task, as QDax scores):
    brax's reset with key 0, computed once per process and held by programs as a constant (a
    program that plays episodes compiles no reset). `reset_noise=True` keeps brax's random
    initial perturbation, and `obs_noise` adds gaussian noise to observations (the
    stochastic variants of the PGA-ME paper).

    **Arguments:**

    - `name`: one of `QD_BRAX_TASKS` (`walker2d_uni`, `halfcheetah_uni`, `hopper_uni`,
      `ant_uni`, `ant_omni`, `humanoid_uni`, `humanoid_omni`, `anttrap`, `antmaze`,
      `humanoidtrap`).
    - `episode_length`: steps per episode.
    - `backend`: brax's physics (`spring`, fastest on CPU; `positional`,
      `generalized`, `mjx`).
    - `reset_noise`, `obs_noise`: as above.
    - `omni_bound`: half-width of the `*_omni` descriptor box.
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
        self._env = _task_env(name, backend)
        self._feet = _foot_geom_ids(name, backend) if spec.feet else ()
        self._sizes = _sizes(name, backend)

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
        if self.spec.bounds is not None:
            return self.spec.bounds
        if self._feet:
            return (0.0,) * d, (1.0,) * d
        return (-self.omni_bound,) * d, (self.omni_bound,) * d

    @property
    def reward_offset(self) -> float:
        return self.spec.reward_offset

    @property
    def descriptor_names(self) -> tuple[str, ...]:
        if self.spec.feet:  # "foot_left_geom" -> "foot_left contact"
            return tuple(f"{name.removesuffix('_geom')} contact" for name in self.spec.feet)
        return ("final x", "final y")

    @property
    def arena(self) -> Arena | None:
        spec = self.spec
        return Arena(spec.walls, 0.5, spec.target) if spec.omni else None

    def render_html(self, states: EnvState, *, height: int = 480) -> str:
        """brax's own HTML viewer (three.js, loaded from brax's CDN) of an episode: `states`
        stacked on a leading time axis, as `rollout_states` returns them (cut to the steps
        wanted: those after termination may hold broken physics). Walls and targets show;
        `height` is the viewer's height in pixels."""
        require("brax", "render_html")
        from brax.base import Transform
        from brax.io import html

        x = jax.device_get(states.physics.pipeline_state.x)
        check.positive_int("render_html: number of states", int(x.pos.shape[0]))
        frames = [_Frame(Transform(pos=x.pos[i], rot=x.rot[i])) for i in range(x.pos.shape[0])]
        return html.render(self.brax_env.sys, frames, height=height, colab=False)

    def descriptor(
        self,
        state_descs: Float[Array, "time state_desc_dim"],
        valid: Float[Array, " time"],
    ) -> Float[Array, " descriptor_size"]:
        return locomotion_descriptor(
            state_descs, valid, feet=bool(self._feet), bounds=self.descriptor_bounds
        )

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
        spec = self.spec
        reward = brax_state.reward
        torso_xy = brax_state.pipeline_state.x.pos[0, :2]
        if spec.reward == "no_forward":
            reward = reward - brax_state.metrics[_FORWARD_METRIC[spec.robot]]
        elif spec.reward == "to_target":
            assert spec.target is not None
            reward = -jnp.linalg.norm(jnp.asarray(spec.target) - torso_xy)
        obs = brax_state.obs
        if spec.xy_obs is not None:
            subtract, divide = spec.xy_obs
            xy = (torso_xy - jnp.asarray(subtract)) / jnp.asarray(divide)
            obs = jnp.concatenate([xy.astype(obs.dtype), obs])
        if self.obs_noise > 0:  # static: no random numbers drawn for deterministic tasks
            obs = obs + self.obs_noise * jr.normal(key, obs.shape)
        return EnvState(
            brax_state, obs, f32(reward), f32(brax_state.done), self._state_desc(brax_state)
        )

    def reset(self, *, key: PRNGKey) -> EnvState:
        reset_key, obs_key = jr.split(key)
        if self.reset_noise:
            with _brax_numerics():
                brax_state = self.brax_env.reset(jr.key_data(reset_key))
        else:  # every episode starts from one state: a constant
            brax_state = jax.tree.map(jnp.asarray, _first_state(self.name, self.backend))
        return self._wrap(brax_state, obs_key)

    def step(
        self, state: EnvState, action: Float[Array, " action_size"], *, key: PRNGKey
    ) -> EnvState:
        with _brax_numerics():
            brax_state = self.brax_env.step(state.physics, jnp.clip(action, -1.0, 1.0))
        return self._wrap(brax_state, key)


class _MOSpec(typing.NamedTuple):
    """How a multi-objective task is made from a QD brax task.

    - `base`: the `QD_BRAX_TASKS` task whose robot, feet descriptor and start it keeps.
    - `objectives`: `(name, brax metric)` per objective; the metric `"jump"` is ours (see
      `BraxMultiObjectiveEnv`).
    - `reference`: the hypervolume reference point per 1,000 steps (scaled to the episode).
    """

    base: str
    objectives: tuple[tuple[str, str], ...]
    reference: tuple[float, ...]


# The bi-objective tasks and reference points are MOME-PGX's (Janmohamed, Pierrot and Cully,
# GECCO 2023; its repository's `envs_setup.py`): forward reward against energy (brax's control
# cost, negative), per 1,000 steps. Where current brax's control cost can fall below the
# paper's energy coordinate (the hopper, the humanoid), that coordinate is the exact bound,
# minus the cost weight times the action size per step.
MO_BRAX_TASKS: dict[str, _MOSpec] = {
    "walker2d_multi": _MOSpec(
        "walker2d_uni", (("forward", "reward_forward"), ("energy", "reward_ctrl")), (-210, -15)
    ),
    "halfcheetah_multi": _MOSpec(
        "halfcheetah_uni", (("forward", "reward_run"), ("energy", "reward_ctrl")), (-2000, -800)
    ),
    "hopper_multi": _MOSpec(
        "hopper_uni", (("forward", "reward_forward"), ("energy", "reward_ctrl")), (-50, -3)
    ),
    "ant_multi": _MOSpec(
        "ant_uni", (("forward", "reward_forward"), ("energy", "reward_ctrl")), (-350, -4500)
    ),
    "humanoid_multi": _MOSpec(
        "humanoid_uni",
        (("forward", "forward_reward"), ("energy", "reward_quadctrl")),
        (-100, -1700),
    ),
    "hopper_multi3": _MOSpec(
        "hopper_uni",
        (("forward", "reward_forward"), ("jump", "jump"), ("energy", "reward_ctrl")),
        (-50, -1, -3),
    ),
}
"""Multi-objective brax tasks: name -> how the task is made (`_MOSpec`)."""


@functools.lru_cache(maxsize=32)
def _start_height(name: str, backend: str) -> float:
    """The torso's height in the deterministic start of QD task `name`."""
    return float(_first_state(name, backend).pipeline_state.x.pos[0, 2])


@typing.final
class BraxMultiObjectiveEnv(AbstractMultiObjectiveQDEnv, AbstractRenderable):
    """A brax robot as a multi-objective QD task: the reward of each step is a vector, one
    entry per objective, and the descriptor is the feet-contact rates of its `*_uni` task.

    The bi-objective tasks of MOME-PGX (`walker2d_multi`, `halfcheetah_multi`, `hopper_multi`,
    `ant_multi`, `humanoid_multi`): the forward reward (velocity along x, brax's weight) and
    the energy objective, brax's control cost with its sign flipped (minus the weighted sum
    of squared actions, at most 0). One tri-objective task, `hopper_multi3`: forward, jump
    (how far the torso is above its starting height each step, 0 when below) and energy.
    brax's healthy bonus and termination stay (an episode ends when the robot falls).

    Everything else is the base `BraxQDEnv` task's (`base`): observations, start (the same
    state every episode unless `reset_noise`), feet-contact descriptor and bounds, rendering.

    **Arguments:** `name` (one of `MO_BRAX_TASKS`), and `episode_length`, `backend`,
    `reset_noise`, `obs_noise` as `BraxQDEnv`'s.
    """

    name: str = eqx.field(static=True)
    base: BraxQDEnv
    _jump_from: float = eqx.field(static=True)

    def __init__(
        self,
        name: str,
        *,
        episode_length: int = 100,
        backend: str = DEFAULT_BACKEND,
        reset_noise: bool = False,
        obs_noise: float = 0.0,
    ):
        if name not in MO_BRAX_TASKS:
            raise ValueError(
                f"unknown multi-objective brax task {name!r}; known: {sorted(MO_BRAX_TASKS)}"
            )
        spec = MO_BRAX_TASKS[name]
        self.name = name
        self.base = BraxQDEnv(
            spec.base,
            episode_length=episode_length,
            backend=backend,
            reset_noise=reset_noise,
            obs_noise=obs_noise,
        )
        jumps = any(metric == "jump" for _, metric in spec.objectives)
        self._jump_from = _start_height(spec.base, backend) if jumps else 0.0

    @property
    def spec(self) -> _MOSpec:
        return MO_BRAX_TASKS[self.name]

    @property
    def objective_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.spec.objectives)

    @property
    def reference_point(self) -> tuple[float, ...]:
        scale = self.episode_length / 1000.0
        return tuple(float(r) * scale for r in self.spec.reference)

    @property
    def observation_size(self) -> int:
        return self.base.observation_size

    @property
    def action_size(self) -> int:
        return self.base.action_size

    @property
    def state_descriptor_size(self) -> int:
        return self.base.state_descriptor_size

    @property
    def descriptor_size(self) -> int:
        return self.base.descriptor_size

    @property
    def episode_length(self) -> int:
        return self.base.episode_length

    @property
    def descriptor_bounds(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return self.base.descriptor_bounds

    @property
    def reward_offset(self) -> float:
        return self.base.reward_offset

    @property
    def descriptor_names(self) -> tuple[str, ...]:
        return self.base.descriptor_names

    @property
    def arena(self) -> Arena | None:
        return None

    def render_html(self, states: EnvState, *, height: int = 480) -> str:
        """The base task's brax viewer (`BraxQDEnv.render_html`)."""
        return self.base.render_html(states, height=height)

    def descriptor(
        self,
        state_descs: Float[Array, "time state_desc_dim"],
        valid: Float[Array, " time"],
    ) -> Float[Array, " descriptor_size"]:
        return self.base.descriptor(state_descs, valid)

    def _objectives(self, state: EnvState) -> Float[Array, " num_objectives"]:
        metrics = state.physics.metrics
        values = []
        for _, metric in self.spec.objectives:
            if metric == "jump":
                height = state.physics.pipeline_state.x.pos[0, 2]
                values.append(jnp.maximum(height - self._jump_from, 0.0))
            else:
                values.append(metrics[metric])
        return jnp.stack([f32(v) for v in values])

    def reset(self, *, key: PRNGKey) -> EnvState:
        state = self.base.reset(key=key)
        zeros = jnp.zeros((len(self.spec.objectives),), jnp.float32)
        return eqx.tree_at(lambda s: s.reward, state, zeros)

    def step(
        self, state: EnvState, action: Float[Array, " action_size"], *, key: PRNGKey
    ) -> EnvState:
        nxt = self.base.step(state, action, key=key)
        return eqx.tree_at(lambda s: s.reward, nxt, self._objectives(nxt))
