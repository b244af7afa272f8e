"""Training IPPO: scanned updates with a progress bar, evaluation on full episodes, metric
summaries, and atomic checkpoints that can be restored (best or latest) and trained on."""

import json
import os
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._custom_types import PRNGKey
from .._io import atomic_write
from .._misc import filter_scan
from .ppo import IPPO, Metrics, PPOState


# ----------------------------------------------------------------------------- progress

# The bars of running `train_ippo` calls, with the update count each started from (host only).
_BARS: list[tuple[Any, int]] = []


def _advance_bar(updates: Array) -> None:
    if _BARS:
        bar, start = _BARS[-1]
        target = int(np.max(updates)) - start  # max: under vmap, one call sees every member
        if target > bar.n:
            bar.update(target - bar.n)


# ----------------------------------------------------------------------------- training


@eqx.filter_jit
def train_updates(
    agent: IPPO, state: PPOState, num_updates: int, progress: bool = False
) -> tuple[PPOState, Metrics]:
    """``num_updates`` PPO updates in one ``lax.scan``; metrics stacked ``(num_updates, agents)``.

    Vmap it over a batch of states (e.g. built from `PPOHParams.stack`) to train a sweep in one
    program. With ``progress``, each update reports to the bar of a running `train_ippo`.
    """

    def body(state, _):
        state, metrics = agent.train_step(state)
        if progress:
            jax.debug.callback(_advance_bar, state.updates)
        return state, metrics

    return filter_scan(body, state, None, length=num_updates)


# ----------------------------------------------------------------------------- evaluation


class EpisodeStats(eqx.Module):
    """Full episodes of the current policies: per-episode returns and last rewards per agent,
    how each ended, and its length."""

    returns: Float[Array, "n_evals num_agents"]
    final_rewards: Float[Array, "n_evals num_agents"]
    terminated: Bool[Array, " n_evals"]
    truncated: Bool[Array, " n_evals"]
    lengths: Int[Array, " n_evals"]

    def to_dict(self) -> dict[str, list]:
        return {k: np.asarray(getattr(self, k)).tolist() for k in _EVAL_FIELDS}


_EVAL_FIELDS = tuple(EpisodeStats.__dataclass_fields__)


@eqx.filter_jit
def evaluate_ippo(
    agent: IPPO,
    state: PPOState,
    n_evals: int,
    *,
    key: PRNGKey,
    deterministic: bool = True,
    max_steps: int = 100_000,
) -> EpisodeStats:
    """``n_evals`` episodes run until terminated or truncated (``max_steps`` is a safety cap for
    environments without a time limit: an episode reaching it counts as truncated).

    Deterministic evaluation takes each policy's mode; otherwise actions are sampled.
    """
    env = agent.env

    def episode(key):
        reset_key, key = jr.split(key)
        start = env.reset(key=reset_key)
        zeros = jnp.zeros((env.num_agents,), jnp.float32)
        false = jnp.zeros((), bool)
        carry = (start, zeros, zeros, false, false, key)

        def running(carry):
            s, _, _, terminated, truncated, _ = carry
            return ~(terminated | truncated)

        def step(carry):
            s, returns, _, _, _, key = carry
            key, act_key, step_key = jr.split(key, 3)
            actions = agent.act(state, s.obs, key=act_key, deterministic=deterministic)
            nxt = env.step(s, actions, key=step_key)
            capped = nxt.t >= max_steps
            return (
                nxt, returns + nxt.reward, nxt.reward, nxt.terminated > 0,
                (nxt.truncated > 0) | (capped & (nxt.terminated == 0)), key,
            )  # fmt: skip

        s, returns, final, terminated, truncated, _ = jax.lax.while_loop(running, step, carry)
        return returns, final, terminated, truncated, s.t

    return EpisodeStats(*jax.vmap(episode)(jr.split(key, n_evals)))


class Summary(typing.NamedTuple):
    """Statistics of per-episode values over the episode axis."""

    mean: Array
    var: Array
    std: Array
    min: Array
    max: Array
    median: Array
    has_nans: Array


def summarize(values: Array | np.ndarray, axis: int = 0) -> Summary:
    """Mean, variance, standard deviation, min, max, median and NaN flag along ``axis`` (the
    episodes axis of `EpisodeStats` fields by default)."""
    values = jnp.asarray(values)
    if values.dtype == bool:
        values = values.astype(jnp.float32)
    return Summary(
        jnp.mean(values, axis), jnp.var(values, axis), jnp.std(values, axis),
        jnp.min(values, axis), jnp.max(values, axis), jnp.median(values, axis),
        jnp.any(jnp.isnan(values), axis),
    )  # fmt: skip


# ----------------------------------------------------------------------------- checkpoints

_CKPT = re.compile(r"^(\d{10})\.eqx$")
CHECKPOINTS = "checkpoints"


def _write_json(path: str, data: Any) -> None:
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=1).encode()))


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _save_leaf(f: typing.BinaryIO, x: Any) -> None:
    # Typed keys are stored as their raw key data.
    eqx.default_serialise_filter_spec(f, jr.key_data(x) if _is_key(x) else x)


def _load_leaf(f: typing.BinaryIO, like: Any) -> Any:
    if _is_key(like):
        data = eqx.default_deserialise_filter_spec(f, jr.key_data(like))
        return jr.wrap_key_data(data, impl=jr.key_impl(like))
    return eqx.default_deserialise_filter_spec(f, like)


def save_checkpoint(directory: str | os.PathLike, state: PPOState, metrics: EpisodeStats) -> str:
    """Write ``state`` and its evaluation under ``directory/checkpoints/<updates>.eqx`` / ``.json``.

    Both files are written to temporary names and renamed; the metrics land first, so every
    ``.eqx`` present is complete and has its metrics beside it.
    """
    folder = os.path.join(os.fspath(directory), CHECKPOINTS)
    os.makedirs(folder, exist_ok=True)
    stem = os.path.join(folder, f"{int(state.updates):010d}")
    _write_json(stem + ".json", {"updates": int(state.updates), **metrics.to_dict()})
    atomic_write(stem + ".eqx", lambda f: eqx.tree_serialise_leaves(f, state, _save_leaf))
    return stem + ".eqx"


class Checkpoint(typing.NamedTuple):
    updates: int
    path: str
    metrics: dict[str, np.ndarray]


def list_checkpoints(directory: str | os.PathLike) -> list[Checkpoint]:
    """The complete checkpoints of a run folder, oldest first."""
    folder = os.path.join(os.fspath(directory), CHECKPOINTS)
    if not os.path.isdir(folder):
        return []
    out = []
    for name in sorted(os.listdir(folder)):
        match = _CKPT.match(name)
        if match:
            with open(os.path.join(folder, name[:-4] + ".json")) as f:
                raw = json.load(f)
            metrics = {k: np.asarray(raw[k]) for k in _EVAL_FIELDS}
            out.append(Checkpoint(int(match.group(1)), os.path.join(folder, name), metrics))
    return out


def mean_return(metrics: Mapping[str, np.ndarray]) -> float:
    """The default "best" criterion: the mean return over episodes and agents."""
    return float(np.mean(metrics["returns"]))


def restore_checkpoint(
    directory: str | os.PathLike,
    like: PPOState,
    *,
    which: str = "latest",
    criterion: Callable[[Mapping[str, np.ndarray]], float] = mean_return,
) -> tuple[PPOState, Checkpoint]:
    """Load the ``"latest"`` checkpoint, or the ``"best"`` one: the highest ``criterion`` of its
    evaluation metrics (a mapping of `EpisodeStats` field names to arrays).

    ``like`` gives the structure (e.g. ``agent.init(key=...)`` with the same agent). Training
    continues from the returned state with its update count carried on.
    """
    checkpoints = list_checkpoints(directory)
    if not checkpoints:
        raise FileNotFoundError(f"no checkpoints under {os.fspath(directory)!r}")
    if which == "latest":
        chosen = checkpoints[-1]
    elif which == "best":
        scores = [criterion(c.metrics) for c in checkpoints]
        chosen = checkpoints[int(np.nanargmax(scores))]
    else:
        raise ValueError(f"which must be 'latest' or 'best', got {which!r}")
    try:
        with open(chosen.path, "rb") as f:
            return eqx.tree_deserialise_leaves(f, like, _load_leaf), chosen
    except (ValueError, RuntimeError, EOFError) as e:
        raise ValueError(
            f"checkpoint {chosen.path!r} does not fit the template state ({e}); build `like` "
            "with the same agent (environment, sizes, shared_params, normalise_observations) "
            "and hyperparameter shapes as the run"
        ) from e


def write_run_info(
    directory: str | os.PathLike, agent: IPPO, state: PPOState, config: str | None = None
) -> None:
    """The agent's structure and the hyperparameters as JSON (and a config text, e.g. TOML)
    beside the checkpoints."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    structure = {
        "env": repr(agent.env),
        "num_agents": agent.num_agents,
        "observation_size": agent.env.observation_size,
        "action_size": agent.env.action_size,
        "discrete": agent.env.discrete,
        **{
            name: getattr(agent, name)
            for name in agent.__dataclass_fields__
            if name not in ("env", "make_actor")  # described above / not data
        },
    }
    _write_json(os.path.join(directory, "agent.json"), structure)
    _write_json(os.path.join(directory, "hparams.json"), state.hparams.to_dict())
    if config is not None:
        atomic_write(os.path.join(directory, "config.toml"), lambda f: f.write(config.encode()))


# ----------------------------------------------------------------------------- driver


class TrainingLog(typing.NamedTuple):
    """Per-evaluation records of a `train` call (updates counted since the very start)."""

    updates: list[int]
    env_steps: list[int]
    evals: list[EpisodeStats]
    metrics: list[dict[str, np.ndarray]]  # the train metrics of the updates before each eval


def train_ippo(
    agent: IPPO,
    state: PPOState,
    num_updates: int,
    *,
    key: PRNGKey,
    eval_frequency: int,
    n_evals: int = 16,
    checkpoint_dir: str | os.PathLike | None = None,
    config_text: str | None = None,
    progress: bool = True,
    deterministic_eval: bool = True,
) -> tuple[PPOState, TrainingLog]:
    """Train ``num_updates`` more updates, evaluating every ``eval_frequency`` updates.

    A fresh state (zero updates) is evaluated first too. With ``checkpoint_dir``, every
    evaluation is checkpointed there (atomically), with the agent, hyperparameters and
    ``config_text`` written beside. Evaluation keys derive from ``key`` and the update count,
    so a run continued from a checkpoint sees the same keys as an uninterrupted one.
    """
    from tqdm.auto import tqdm

    if num_updates < 0 or eval_frequency < 1:
        raise ValueError(
            f"need num_updates >= 0 and eval_frequency >= 1, got {num_updates}, {eval_frequency}"
        )
    if n_evals < 1:
        raise ValueError(f"n_evals must be positive, got {n_evals}")
    if checkpoint_dir is not None:
        write_run_info(checkpoint_dir, agent, state, config_text)
    log = TrainingLog([], [], [], [])
    steps_per_update = agent.rollout_length * agent.batch_size

    def record(state, metrics):
        updates = int(state.updates)
        result = evaluate_ippo(
            agent, state, n_evals, key=jr.fold_in(key, updates), deterministic=deterministic_eval
        )
        log.updates.append(updates)
        log.env_steps.append(updates * steps_per_update)
        log.evals.append(result)
        log.metrics.append(metrics)
        if checkpoint_dir is not None:
            save_checkpoint(checkpoint_dir, state, result)

    if int(state.updates) == 0:
        record(state, {})
    bar = tqdm(total=num_updates, disable=not progress, desc="ippo", unit="update")
    _BARS.append((bar, int(state.updates)))
    try:
        done = 0
        while done < num_updates:
            chunk = min(eval_frequency, num_updates - done)
            state, metrics = train_updates(agent, state, chunk, progress)
            done += chunk
            metrics = {k: np.asarray(v) for k, v in metrics.items()}
            record(state, metrics)
            bar.set_postfix(ret=f"{float(np.mean(log.evals[-1].returns)):.3g}")
    finally:
        _BARS.pop()
        bar.close()
    return state, log
