"""The agent options the agent jobs share (PBT, ME-PBT): what a config says of its agent, and
the agent and training environment built from it."""

import dataclasses
from typing import Any

from ._config import JobConfig
from ._registry import AGENTS, make_agent, make_env


AGENT_OPTIONS = (
    "hidden",
    "minibatch_size",
    "num_envs",
    "buffer_size",
    "grad_updates_per_step",
    "rollout_length",
    "target_entropy_scale",
    "critic_target_every_step",
    "same_start",
    "matmul_dtype",
)
"""The config fields a job passes to its agent's factory (those the factory takes)."""


def agent_options(config: JobConfig) -> dict[str, Any]:
    """The options of `config` that its agent's factory takes. An option set away from its
    default that the chosen agent does not take is an error naming it (never ignored)."""
    entry = AGENTS.get(config.agent)  # type: ignore[attr-defined]
    fields = {f.name: f for f in dataclasses.fields(config)}
    out: dict[str, Any] = {}
    for name in AGENT_OPTIONS:
        if name not in fields:
            continue
        value = getattr(config, name)
        if entry.takes_any_option() or name in entry.options():
            out[name] = value
        elif value != fields[name].default:
            raise ValueError(
                f"{name}: agent {entry.name!r} takes no option {name}; its options: "
                f"{', '.join(entry.options()) or 'none'}"
            )
    return out


def build_agent(config: JobConfig, env: Any) -> Any:
    """The agent `config.agent` names, sized for `env`, built with `agent_options`."""
    return make_agent(config.agent, env, **agent_options(config))  # type: ignore[attr-defined]


def training_env(config: JobConfig, env: Any) -> Any:
    """The environment a PBT or ME-PBT job trains its agents on: `env` (the task, on which
    they are scored), or with `same_start` the task with its reset noise on, each training
    environment then keeping the random first state it drew (QDax's training
    environments)."""
    if not getattr(config, "same_start", False):
        return env
    return make_env(
        config.env,  # type: ignore[attr-defined]
        episode_length=config.episode_length,  # type: ignore[attr-defined]
        reset_noise=True,
    )
