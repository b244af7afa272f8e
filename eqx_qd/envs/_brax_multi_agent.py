"""Multi-agent brax: one robot whose actuators are split among agents.

Each agent drives a group of actuators (a leg, for instance) and observes the robot's root
(height, orientation and velocities: everything but the horizontal position) plus the positions
and velocities of its own joints. All agents share the robot's reward (a team reward) and its
termination; episodes are truncated after `episode_length` steps.
"""

import functools
import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import f32
from ._brax import _brax_env, _brax_numerics, DEFAULT_BACKEND
from ._multi_agent import AbstractMultiAgentEnv, MultiAgentState


class _Split(typing.NamedTuple):
    robot: str
    groups: tuple[tuple[int, ...], ...]  # actuator indices per agent
    skip_root: int  # leading root positions left out of observations (x, or x and y)


MA_BRAX_TASKS: dict[str, _Split] = {
    "walker2d_2x3": _Split("walker2d", ((0, 1, 2), (3, 4, 5)), 1),
    "halfcheetah_2x3": _Split("halfcheetah", ((0, 1, 2), (3, 4, 5)), 1),
    "ant_4x2": _Split("ant", ((0, 1), (2, 3), (4, 5), (6, 7)), 2),
}
"""Multi-agent brax tasks: name -> (robot, actuator indices per agent, skipped root positions).
walker2d and halfcheetah: one leg (thigh, shin/leg, foot) per agent; ant: one leg (hip, ankle)
per agent."""


@functools.lru_cache(maxsize=16)
def _indices(name: str, backend: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Root position / velocity indices and per-agent joint position / velocity indices."""
    split = MA_BRAX_TASKS[name]
    model = _brax_env(split.robot, backend, False).sys.mj_model  # numpy: safe under tracing
    joints = model.actuator_trnid[:, 0]
    q_id, qd_id = model.jnt_qposadr[joints], model.jnt_dofadr[joints]
    root_q = np.setdiff1d(np.arange(model.nq), q_id)[split.skip_root :]
    root_qd = np.setdiff1d(np.arange(model.nv), qd_id)
    groups = np.asarray(split.groups)
    return root_q, root_qd, q_id[groups], qd_id[groups]


@typing.final
class BraxMultiAgentEnv(AbstractMultiAgentEnv):
    """A multi-agent view of a brax robot (`MA_BRAX_TASKS`), continuous actions in [-1, 1].

    `walker2d_2x3`: 2 agents, 3 actuators and 11 observations each; `ant_4x2`: 4 agents,
    2 actuators and 15 observations each. Resets draw brax's own small reset noise from the
    key, so episodes start apart (unlike `BraxQDEnv`, whose default start is fixed).

    **Fields:** `name` (one of `MA_BRAX_TASKS`), `episode_length` (the time limit), `backend`
    (brax's physics).
    """

    name: str = eqx.field(static=True)
    episode_length: int = eqx.field(default=1000, static=True)
    backend: str = eqx.field(default=DEFAULT_BACKEND, static=True)

    def __check_init__(self):
        if self.name not in MA_BRAX_TASKS:
            raise ValueError(
                f"unknown multi-agent brax task {self.name!r}; known: {list(MA_BRAX_TASKS)}"
            )
        check.positive_int("BraxMultiAgentEnv.episode_length", self.episode_length)

    @property
    def brax_env(self) -> typing.Any:
        return _brax_env(MA_BRAX_TASKS[self.name].robot, self.backend, False)

    @property
    def num_agents(self) -> int:
        return len(MA_BRAX_TASKS[self.name].groups)

    @property
    def observation_size(self) -> int:
        root_q, root_qd, q, qd = _indices(self.name, self.backend)
        return len(root_q) + len(root_qd) + q.shape[1] + qd.shape[1]

    @property
    def action_size(self) -> int:
        return len(MA_BRAX_TASKS[self.name].groups[0])

    @property
    def discrete(self) -> bool:
        return False

    def _observe(self, pipeline_state: typing.Any) -> Float[Array, "num_agents obs_dim"]:
        root_q, root_qd, q, qd = _indices(self.name, self.backend)
        pos, vel = pipeline_state.q.astype(jnp.float32), pipeline_state.qd.astype(jnp.float32)
        root = jnp.concatenate([pos[root_q], vel[root_qd]])
        own = jnp.concatenate([pos[q], vel[qd]], axis=-1)
        return jnp.concatenate([jnp.broadcast_to(root, (q.shape[0], root.shape[0])), own], -1)

    def _wrap(self, brax_state: typing.Any, t: Array) -> MultiAgentState:
        brax_state = brax_state.replace(metrics={k: f32(v) for k, v in brax_state.metrics.items()})
        terminated = f32(brax_state.done)
        truncated = (t >= self.episode_length).astype(jnp.float32) * (1.0 - terminated)
        reward = jnp.full((self.num_agents,), brax_state.reward, jnp.float32)
        return MultiAgentState(
            brax_state, self._observe(brax_state.pipeline_state), reward, terminated, truncated, t
        )

    def reset(self, *, key: PRNGKey) -> MultiAgentState:
        with _brax_numerics():
            brax_state = self.brax_env.reset(jr.key_data(key))
        return self._wrap(brax_state, jnp.zeros((), jnp.int32))

    def step(self, state: MultiAgentState, actions: Array, *, key: PRNGKey) -> MultiAgentState:
        """`actions`: `(num_agents, action_size)`, clipped to [-1, 1]."""
        groups = np.asarray(MA_BRAX_TASKS[self.name].groups).reshape(-1)
        full = jnp.zeros(groups.size, jnp.float32).at[groups].set(actions.reshape(-1))
        with _brax_numerics():
            brax_state = self.brax_env.step(state.physics, jnp.clip(full, -1.0, 1.0))
        return self._wrap(brax_state, state.t + 1)
