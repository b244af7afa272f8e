"""The seed repositories' own config files, read into the house's config keys: the
PGA-MAP-Elites repository's argument files (`--config-file` of `eqx-qd run pgame`) and the
DCRL-MAP-Elites repository's Hydra files (`eqx-qd run dcrl-me`). The repositories' names live
here only; what a file leaves unsaid comes from the preset the caller passes (`over`), so this
room imports no job config.
"""

import os
from collections.abc import Mapping
from typing import Any


# ------------------------------------------------ the PGA-MAP-Elites repository's argument files
ORIGINAL_DEFAULTS: dict[str, str | bool] = {
    "env": "QDAntBulletEnv-v0",
    "seed": "0",
    "save_path": ".",
    "dim_map": "4",
    "n_niches": "1296",
    "n_species": "1",
    "max_evals": "1e6",
    "mutation_op": "None",
    "crossover_op": "iso_dd",
    "min_genotype": "False",
    "max_genotype": "False",
    "mutation_rate": "0.05",
    "crossover_rate": "0.75",
    "eta_m": "5.0",
    "eta_c": "10.0",
    "sigma": "0.2",
    "iso_sigma": "0.01",
    "line_sigma": "0.2",
    "max_uniform": "0.1",
    "cvt_samples": "100000",
    "eval_batch_size": "100",
    "random_init": "500",
    "init_batch_size": "100",
    "save_period": "10000",
    "num_cpu": "32",
    "num_cpu_var": "32",
    "use_cached_cvt": False,
    "not_discard_dead": False,
    "neurons_list": "128 128",
    "train_batch_size": "256",
    "discount": "0.99",
    "tau": "0.005",
    "policy_noise": "0.2",
    "noise_clip": "0.5",
    "policy_freq": "2",
    "nr_of_steps_crit": "300",
    "nr_of_steps_act": "10",
    "proportion_evo": "0.5",
    "normalise": False,
    "affine": False,
    "gradient_op": False,
    "lr": "0.001",
}
"""The repository's `main.py` argument defaults (as its parser reads them: text, or `False`
for a flag left out), which apply to every argument a config file does not set."""

REPO_NAMES: dict[str, str] = {
    "n_niches": "cells",
    "neurons_list": "hidden",
    "nr_of_steps_crit": "critic_steps",
    "nr_of_steps_act": "pg_steps",
    "eval_batch_size": "batch_size",
    "train_batch_size": "minibatch_size",
    "max_evals": "evaluations",
    "dim_map": "num_descriptors",
    "save_period": "snapshot_every",
    "proportion_evo": "ga_fraction",
    "not_discard_dead": "insert_dead",
    "policy_freq": "policy_delay",
    "lr": "pg_lr",
    "n_species": "species",
}
"""The repository's argument names that `PGAMEConfig` calls otherwise, and our names (the
others are the same). Its config files are read with these; a TOML file or run folder
written with them (before the house vocabulary) is read too (`JobConfig.RENAMED`)."""

ORIGINAL_ENVS = {
    "QDWalker2DBulletEnv-v0": "walker2d_uni",
    "QDHalfCheetahBulletEnv-v0": "halfcheetah_uni",
    "QDHopperBulletEnv-v0": "hopper_uni",
    "QDAntBulletEnv-v0": "ant_uni",
}
"""The repository's QDgym tasks and the brax tasks that stand in for them."""

UNUSED: dict[str, str] = {
    "num_cpu": "evaluation is vectorised by JAX, not spread over processes",
    "num_cpu_var": "variation is vectorised by JAX, not spread over processes",
    "save_path": "the run folder is --out",
}
"""The repository's arguments that have no counterpart in the house, and why."""


def read_pga_me_config(
    path: str | os.PathLike, over: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Read one of the PGA-MAP-Elites repository's config files (one command-line token per
    line: `--key=value`, a bare `--flag`, or `--key` then its value on the next line) as
    its `main.py` would, defaults included (`ORIGINAL_DEFAULTS`).

    **Returns:** the house keys (the repository's names in ours: `REPO_NAMES`) and values,
    over `over` (the job's paper preset: what the repository has no argument for, such as
    `episode_length` and `buffer_size`), and notes for the user: how each QDgym task is stood
    in for, and the arguments that have no counterpart here (`UNUSED`). An unknown argument,
    a flag given a value or a value that does not parse is a `ValueError` naming the line.
    """
    path = os.fspath(path)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read config file {path!r}: {e}") from e
    given: dict[str, str | bool] = {}
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        where = f"config file {path!r}, line {number}"
        if pending is not None and not line.startswith("--"):
            given[pending[1]], pending = line, None
            continue
        if not line.startswith("--"):
            raise ValueError(f"{where}: expected --argument, got {line!r}")
        name, sep, value = line[2:].partition("=")
        if name not in ORIGINAL_DEFAULTS:
            raise ValueError(f"{where}: unknown argument --{name}")
        flag = ORIGINAL_DEFAULTS[name] is False
        if flag and sep:
            raise ValueError(f"{where}: --{name} is a flag and takes no value, got {value!r}")
        pending = None
        if flag:
            given[name] = True
        elif sep:
            given[name] = value
        else:
            pending = (number, name)
    if pending is not None:
        raise ValueError(f"config file {path!r}, line {pending[0]}: --{pending[1]} has no value")
    args = {**ORIGINAL_DEFAULTS, **given}
    notes = [f"{name}: not used ({why})" for name, why in UNUSED.items() if name in given]
    values: dict[str, Any] = {}
    for name, text in args.items():
        if name in UNUSED:
            continue
        try:
            values[REPO_NAMES.get(name, name)] = _original_value(name, text)
        except ValueError:
            raise ValueError(
                f"config file {path!r}: --{name}={text!r} is not a valid value"
            ) from None
    env = values["env"]
    if env in ORIGINAL_ENVS:
        values["env"] = ORIGINAL_ENVS[env]
        notes.append(
            f"env: {env} runs as {values['env']} (a brax task: other physics and fitness scale)"
        )
    return {**over, **values}, notes


_INTEGERS = frozenset(
    ("seed", "dim_map", "n_niches", "n_species", "max_evals", "cvt_samples", "eval_batch_size")
    + ("random_init", "init_batch_size", "save_period", "num_cpu", "num_cpu_var")
    + ("train_batch_size", "policy_freq", "nr_of_steps_crit", "nr_of_steps_act")
)
"""The repository's integer arguments (its parser's `type=int`); the other values are floats,
text or flags."""


def _original_value(name: str, text: str | bool) -> Any:
    if isinstance(text, bool):
        return text
    if name in ("mutation_op", "crossover_op"):
        return "none" if text in ("None", "False", "") else text
    if name in ("min_genotype", "max_genotype"):
        return None if text in ("False", "None") else float(text)
    if name == "neurons_list":
        return tuple(int(t) for t in text.split())
    if name in ("env",):
        return text
    if name in _INTEGERS:
        number = float(text)  # "1e6", as the repository's max_evals default
        if number != int(number):
            raise ValueError(text)
        return int(number)
    return float(text)


QDAX_NAMES: dict[str, str] = {
    "dcrl_batch_size": "pg_batch_size",
    "qpg_batch_size": "pg_batch_size",
    "actor_batch_size": "actor_evals",
    "critic_hidden_layer_size": "critic_hidden",
    "num_critic_training_steps": "critic_steps",
    "num_pg_training_steps": "pg_steps",
    "replay_buffer_size": "buffer_size",
    "critic_learning_rate": "critic_lr",
    "actor_learning_rate": "actor_lr",
    "policy_learning_rate": "pg_lr",
    "soft_tau_update": "tau",
    "num_centroids": "cells",
    "num_init_cvt_samples": "cvt_samples",
    "policy_hidden_layer_sizes": "hidden",
}
"""QDax's `DCRLConfig` and the DCRL repository's names that the house calls otherwise
(`ai_batch_size`, `lengthscale`, `discount`, `reward_scaling`, `noise_clip`, `policy_noise`,
`policy_delay`, `iso_sigma`, `line_sigma` are the same). Their `batch_size` is the critic's
minibatch (`minibatch_size` here) and `ga_batch_size` the rest of the batch: the file reader
translates both."""


# ------------------------------------------------ the DCRL-MAP-Elites repository's Hydra files
_TOP = {
    "seed": "seed",
    "batch_size": "batch_size",
    "num_init_cvt_samples": "cvt_samples",
    "num_centroids": "cells",
    "policy_hidden_layer_sizes": "hidden",
}
_ALGO = {
    **{k: v for k, v in QDAX_NAMES.items() if k not in _TOP},
    "ai_batch_size": "ai_batch_size",
    "lengthscale": "lengthscale",
    "iso_sigma": "iso_sigma",
    "line_sigma": "line_sigma",
    "batch_size": "minibatch_size",
    "discount": "discount",
    "reward_scaling": "reward_scaling",
    "noise_clip": "noise_clip",
    "policy_noise": "policy_noise",
    "policy_delay": "policy_delay",
}
_ALGORITHMS = ("dcrl_me", "dcg_me")


def read_dcrl_me_config(
    path: str | os.PathLike, over: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Read a config file of the DCRL-MAP-Elites repository (Hydra YAML) as its `main_*.py`
    would: a top file (`configs/dcrl_me.yaml`) whose `defaults` name the `env` and `algo`
    files in the folders beside it, or one `algo` file (`configs/algo/dcrl_me.yaml`).

    **Returns:** the house keys and values, over `over` (the job's paper preset; its
    `num_iterations` becomes `evaluations`: the initial population of `batch_size`, as the
    repository's, then that
    many batches; `ga_batch_size` must be the rest of the batch) and notes for the user (the
    environment's bounds and version come from our task). An algorithm other than DCRL-ME or
    DCG-ME, an unknown key or a value that does not fit is a `ValueError` naming it.
    """
    import yaml  # a dependency of brax's flax: always installed

    path = os.fspath(path)
    data = _load_yaml(yaml, path)
    folder = os.path.dirname(os.path.abspath(path))
    groups: dict[str, dict] = {"env": {}, "algo": {}}
    for entry in data.pop("defaults", []) or []:
        if isinstance(entry, dict):
            for group, name in entry.items():
                if group in groups:
                    groups[group] = _load_yaml(yaml, os.path.join(folder, group, f"{name}.yaml"))
    hydra = data.pop("hydra", None)
    del hydra  # the output folder: ours is --out
    for group in groups:
        if isinstance(data.get(group), dict):
            groups[group] = {**groups[group], **data.pop(group)}
    if not groups["algo"] and "name" in data:  # an algo file alone
        groups["algo"], data = data, {}
    algo, env = groups["algo"], groups["env"]
    name = algo.pop("name", None)
    if name not in _ALGORITHMS:
        raise ValueError(
            f"config file {path!r} configures algorithm {name!r}; this job reads "
            f"{' and '.join(_ALGORITHMS)} (PGA-ME: eqx-qd run pgame)"
        )
    values: dict[str, Any] = {}
    notes: list[str] = []
    iterations = data.pop("num_iterations", None)
    for key, value in data.items():
        if key not in _TOP:
            raise ValueError(f"config file {path!r}: unknown key {key!r}")
        values[_TOP[key]] = tuple(value) if isinstance(value, list) else value
    if algo.pop("dc_actor", True) is not True:
        raise ValueError(
            f"config file {path!r}: dc_actor false (the ablation without a conditioned actor) "
            "is not built"
        )
    ga = algo.pop("ga_batch_size", None)
    for key, value in algo.items():
        if key not in _ALGO:
            raise ValueError(f"config file {path!r}: unknown algo key {key!r}")
        values[_ALGO[key]] = tuple(value) if isinstance(value, list) else value
    for key in ("critic_lr", "actor_lr", "pg_lr", "lengthscale", "tau"):
        if isinstance(values.get(key), str):  # YAML 1.1 reads "3e-4" as a string
            try:
                values[key] = float(values[key])
            except ValueError:
                raise ValueError(f"config file {path!r}: {key} {values[key]!r} is not a number")
    if env:
        if "name" in env:
            values["env"] = env.pop("name")
        if "episode_length" in env:
            values["episode_length"] = env.pop("episode_length")
        if env:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
            notes.append(f"env: {shown} not read (our task's own bounds and physics apply)")
    batch = values.get("batch_size", over["batch_size"])
    values.setdefault("random_init", batch)
    values.setdefault("init_batch_size", batch)
    if iterations is not None:
        values["evaluations"] = values["random_init"] + int(iterations) * batch
    values = {**over, **values}  # what the files leave unsaid is the paper's
    if ga is not None:
        rest = batch - values["pg_batch_size"] - values["ai_batch_size"]
        if ga != rest:
            raise ValueError(
                f"config file {path!r}: ga_batch_size {ga} is not the rest of batch_size "
                f"{batch} ({rest})"
            )
    return values, notes


def _load_yaml(yaml, path: str) -> dict:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ValueError(f"cannot read config file {path!r}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ValueError(f"config file {path!r} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"config file {path!r} does not hold a mapping of keys")
    return data
