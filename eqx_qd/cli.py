"""The `eqx-qd` command: `eqx-qd run JOB [options]`, one subcommand per job of
`eqx_qd.jobs`, with one option per field of the job's config (generated, so a new config field
is a new option without a second edit). `--config FILE` reads a TOML file; options override it.

Plugins register your own jobs, agents, environments, tasks and emitters before the command
line is parsed: `eqx-qd --plugin mypkg.agents run pbt --agent ddpg` imports `mypkg.agents`
first, and every entry point of the group `eqx_qd.plugins` of the installed packages is loaded
too. A plugin registers things and computes nothing at import (the devices are set up after).

The command never chooses the platform: JAX picks its default backend (a GPU when there is
one), and the devices used are printed at start. Bad input exits with one line and code 2.
"""

import argparse
import dataclasses
import os
import re
import sys
import tomllib
import typing
from collections.abc import Callable, Sequence
from typing import Any


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # No prefixes: `--iteration 3` is an unknown option, not `--iterations 3`.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, exit code 2
        if message.startswith("unrecognized arguments:"):
            message += self._suggestions(message.split(":", 1)[1].split())
        self.exit(2, f"eqx-qd: error: {' '.join(message.split())}\n")

    def _options(self) -> set[str]:
        """Every option string of this parser and of its subcommands'."""
        found = set(self._option_string_actions)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found |= sub._options() if isinstance(sub, _Parser) else set()
        return found

    def _suggestions(self, words: Sequence[str]) -> str:
        import difflib

        known = sorted(self._options())
        hints = [
            f"{w}: did you mean {close[0]}?"
            for w in words
            if w.startswith("--") and (close := difflib.get_close_matches(w, known, n=1))
        ]
        return f" ({'; '.join(hints)})" if hints else ""


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.replace(" ", ",").split(",") if t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None


def _parser_for(tp: Any) -> tuple[Callable[[str], Any] | None, str]:
    """(argparse `type`, metavar) of a config field type; `None` for bools (flags)."""
    from .jobs._config import _is_optional

    _, tp = _is_optional(tp)
    if tp is bool:
        return None, ""
    if tp is int:
        return _int, "INT"
    if tp is float:
        return _float, "X"
    if typing.get_origin(tp) is tuple:
        return _int_list, "N,N,..."
    return str, "TEXT"


def _add_field(parser: argparse.ArgumentParser, field: dataclasses.Field, tp: Any, default: Any):
    flag = "--" + field.name.replace("_", "-")
    aliases = field.metadata.get("aliases", ())
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    from .jobs.checks import Choices

    check = field.metadata.get("check")
    choices = f": {', '.join(check.names())}" if isinstance(check, Choices) else ""
    text = f"{field.metadata.get('help', '')}{choices} (default: {shown})"
    kind, metavar = _parser_for(tp)
    if kind is None:  # a bool: --flag / --no-flag, plus aliases such as --no-gradient
        parser.add_argument(
            flag, dest=field.name, action=argparse.BooleanOptionalAction, default=None, help=text
        )
        for alias in aliases:
            value = not alias.startswith("--no-")
            parser.add_argument(
                alias, dest=field.name, action="store_const", const=value, help=argparse.SUPPRESS
            )
        return
    parser.add_argument(
        flag, *aliases, dest=field.name, type=kind, metavar=metavar, default=None, help=text
    )


def build_parser() -> argparse.ArgumentParser:
    """The `eqx-qd` parser, generated from the jobs' config dataclasses."""
    from .jobs import JOBS
    from .jobs._compile_cache import CACHE_ENV
    from .jobs._folder import user_cache_dir

    parser = _Parser(prog="eqx-qd", description="Quality-Diversity and population-based RL runs.")
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it registers jobs, agents, environments... in eqx_qd.jobs); "
        "repeatable. Entry points of the group eqx_qd.plugins are loaded too",
    )
    parser.add_argument(
        "--compile-cache",
        metavar="FOLDER",
        default=None,
        help="JAX's persistent compilation cache: a second run of the same programs skips their "
        f"XLA compiles (default: ${CACHE_ENV}, else {user_cache_dir('xla')})",
    )
    parser.add_argument("--no-compile-cache", action="store_true", help="compile everything afresh")
    parser.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="join a multi-process run (jax.distributed) whose process 0 listens at HOST:PORT "
        "(default: $JAX_COORDINATOR_ADDRESS, or what a SLURM / Open MPI job says)",
    )
    parser.add_argument(
        "--num-processes", metavar="N", type=_int, help="processes in the run (with --coordinator)"
    )
    parser.add_argument(
        "--process-id", metavar="I", type=_int, help="this process's index, 0 .. N-1; 0 writes"
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="join a multi-process run, every setting from the environment (SLURM, Open MPI)",
    )
    parser.add_argument(
        "--heartbeat-timeout",
        metavar="S",
        type=_int,
        default=30,
        help="in a multi-process run, seconds of silence after which a process counts as "
        "stopped; the others then exit (status 75) naming it (default: 30)",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser(
        "list",
        help="print the jobs, tasks, environments, agents and emitters (plugins' too)",
        description="Everything a job's config can name, with each factory's options.",
    )
    report = commands.add_parser(
        "report",
        help="compare QD run folders over seeds (medians, quartiles, p-values, plots)",
        description="Group QD run folders by algorithm and task, and write the curves' median and "
        "interquartile range over seeds, the cumulative fitness density averaged over seeds, "
        "a table of final medians and two-sided Mann-Whitney U p-values between groups. "
        "Another library's runs take part as peer run folders (peer.json, progress.csv, "
        "fitnesses.npy: see eqx_qd.jobs.read_peer_curves).",
    )
    report.add_argument(
        "folders", nargs="+", metavar="RUN_FOLDER", help="finished QD runs, or peer run folders"
    )
    report.add_argument(
        "--out",
        metavar="FOLDER",
        default="report",
        help="where to write the report (default: report)",
    )
    report.add_argument(
        "--p-method",
        choices=("auto", "exact", "asymptotic"),
        default="auto",
        help="Mann-Whitney U: exact for small samples without ties (auto), exact, or "
        "asymptotic without continuity correction (the paper's tables)",
    )
    report.add_argument(
        "--x",
        choices=("evaluations", "env_steps"),
        default="evaluations",
        help="the curves' axis: evaluations, or environment steps (PGA-ME and ME-PBT runs, "
        "as QDax plots them) (default: evaluations)",
    )
    report.add_argument(
        "--truncate",
        action="store_true",
        help="cut every run of a group at its shortest run's end and take the final values "
        "there (equal budget); by default each run is read to its own end",
    )
    report.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    status = commands.add_parser(
        "status",
        help="say where run folders stand: running, finished, failed or interrupted",
        description="One line per run folder: its job, its status (a folder whose process is "
        "gone, or whose heartbeat stopped, reads interrupted), its newest checkpoint and, "
        "after a failure or an interruption, why.",
    )
    status.add_argument("folders", nargs="+", metavar="RUN_FOLDER", help="run folders")
    replay = commands.add_parser(
        "replay",
        help="play one elite of a PGA-ME or ME-PBT run again and write what it does",
        description="Play an elite of a QD run folder again (the best, or the one --id or "
        "--cell names) and write into the folder replay_<id>.html (brax's viewer of the "
        "episode, for brax tasks; open it in a browser) and replay_<id>.png (its path in the "
        "plane, for mazes, traps and omni tasks).",
    )
    replay.add_argument("folder", metavar="RUN_FOLDER", help="a PGA-ME or ME-PBT run folder")
    which = replay.add_mutually_exclusive_group()
    which.add_argument(
        "--id",
        type=_int,
        default=None,
        help="the elite's id (PGA-ME: the id column of actors.csv and archive_*.csv; a wrong "
        "id lists the best elites' ids)",
    )
    which.add_argument("--cell", type=_int, default=None, help="the elite's cell")
    replay.add_argument(
        "--seed", type=_int, default=0, help="the episode's key, on stochastic tasks (default: 0)"
    )
    run = commands.add_parser("run", help="run a job")
    jobs = run.add_subparsers(dest="job", required=True, parser_class=_Parser)
    for job in JOBS.values():
        sub = jobs.add_parser(job.name, help=job.help, description=job.description or job.help)
        sub.add_argument(
            "--config",
            metavar="FILE",
            help=f"TOML file of {job.config_cls.__name__} keys (top level or [{job.name}]); "
            "options override it",
        )
        if job.translator is not None:
            sub.add_argument("--config-file", metavar="FILE", help=job.translator.help)
        if job.presets:
            shown = "; ".join(f"{name}: {_preset_text(v)}" for name, v in job.presets.items())
            sub.add_argument(
                "--preset",
                choices=sorted(job.presets),
                help=f"start from these values instead of the defaults shown below: {shown}",
            )
        defaults = job.default_values()
        hints = typing.get_type_hints(job.config_cls)
        for f in dataclasses.fields(job.config_cls):  # type: ignore[arg-type]
            _add_field(sub, f, hints[f.name], defaults[f.name])
        sub.add_argument(
            "--out", metavar="FOLDER", help=f"run folder (default: runs/{job.name}-seed<S>-<time>)"
        )
        sub.add_argument(
            "--seeds",
            metavar="S,S,...",
            type=_int_list,
            help="run these seeds one after another, each in OUT/seed-S (instead of --seed); "
            "then `eqx-qd report OUT/seed-*` compares them with other runs",
        )
        sub.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
        sub.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        sub.add_argument(
            "--log",
            action="append",
            default=[],
            choices=("tensorboard", "wandb"),
            help="log every row there too (repeatable): TensorBoard event files in "
            "FOLDER/tensorboard, or a Weights & Biases run ($WANDB_PROJECT, $WANDB_MODE); "
            "extras eqx_qd[tensorboard] / eqx_qd[wandb]",
        )
        sub.add_argument(
            "--resume",
            metavar="FOLDER",
            help="continue the run in FOLDER from its newest checkpoint, with its config.toml "
            "(options may lengthen it); with --out, fork it into a new folder instead",
        )
        sub.add_argument(
            "--from",
            dest="from_checkpoint",
            metavar="STEP|best|latest",
            help="with --resume and --out: the checkpoint of FOLDER to fork from (default: latest)",
        )
    return parser


def _preset_text(values: dict[str, Any]) -> str:
    if not values:
        return "the config's own defaults"
    shown = (",".join(map(str, v)) if isinstance(v, tuple) else v for v in values.values())
    return " ".join(f"{k}={v}" for k, v in zip(values, shown))


def _config(parser: _Parser, args: argparse.Namespace, job: Any) -> Any:
    """The config from `--config` (or the job's default without it), options winning."""
    keys = job.config_cls.keys()
    overrides = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    try:
        preset = getattr(args, "preset", None)
        if preset is not None:
            if args.config is not None or getattr(args, "config_file", None) is not None:
                parser.error("--preset and a config file both give the starting values: use one")
            return job.config_cls.from_mapping({**job.preset_values(preset), **overrides})
        original = getattr(args, "config_file", None)
        if original is not None:
            if args.config is not None:
                parser.error("--config and --config-file both give the config: use one")
            values, notes = job.translator(original)
            for note in notes:
                print(f"eqx-qd: {original}: {note}", file=sys.stderr)
            return job.config_cls.from_mapping({**values, **overrides})
        if args.config is not None:
            return job.config_cls.from_toml(args.config, **overrides)
        return job.default_config(**overrides)
    except (ValueError, TypeError) as e:
        parser.error(_as_typed(str(e), overrides))


def _as_typed(message: str, options: dict[str, Any]) -> str:
    """`message` with the config keys the user gave as options spelled as they typed them
    (`batch_size` -> `--batch-size`): a key of several words wherever it appears, a one-word
    key (`cells`, a word of prose too) where it starts the message; keys from a file keep
    their names."""
    for key in sorted(options, key=len, reverse=True):
        spelled = "--" + key.replace("_", "-")
        if "_" in key:
            message = re.sub(rf"(?<![\w-]){re.escape(key)}(?![\w-])", spelled, message)
        elif re.match(rf"{re.escape(key)}\b(?!-)", message):
            message = spelled + message[len(key) :]
    return message


def _requested_devices(args: argparse.Namespace, job: Any) -> int | None:
    """`devices` from the options or the `--config` file, read before anything is built
    (building a config may start JAX, after which the device count is fixed)."""
    if "devices" not in job.config_cls.keys():
        return None
    if getattr(args, "devices", None) is not None:
        return args.devices
    if args.config is None:
        return None
    try:
        with open(args.config, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return None  # the config's own reading reports it
    value = data.get(job.name, data).get("devices")
    return value if isinstance(value, int) else None


# The options `launch` takes, named in its errors (the command shows them as typed).
_LAUNCH_OPTIONS = ("devices", "coordinator", "num_processes", "process_id", "heartbeat_timeout")


def _compile_cache(args: argparse.Namespace) -> str | bool:
    """`--compile-cache FOLDER`, `--no-compile-cache`, or the default (`True`: the folder of
    `$EQX_QD_COMPILE_CACHE`, or none when it says `off`)."""
    if args.no_compile_cache:
        return False
    return True if args.compile_cache is None else args.compile_cache


def _resume_command(args: argparse.Namespace, job: Any, folder: str) -> str:
    """The command line that resumes `folder` on this process (plugins and multi-process
    options as typed)."""
    parts = ["eqx-qd"]
    for module in args.plugin:
        parts += ["--plugin", module]
    for flag, value in (
        ("--coordinator", args.coordinator),
        ("--num-processes", args.num_processes),
        ("--process-id", args.process_id),
        ("--heartbeat-timeout", args.heartbeat_timeout if args.heartbeat_timeout != 30 else None),
    ):
        if value is not None:
            parts += [flag, str(value)]
    if args.distributed:
        parts.append("--distributed")
    parts += ["run", job.name, "--resume", folder]
    return " ".join(parts)


def _describe_devices() -> str:
    import jax

    devices = jax.devices()
    kinds = sorted({f"{d.platform}" for d in devices})
    text = f"{len(devices)} {'/'.join(kinds)} device{'s' if len(devices) > 1 else ''}"
    if jax.process_count() > 1:
        text += f", process {jax.process_index()} of {jax.process_count()}"
    return text


def _split_line(config: Any) -> str:
    """What the job's automatic device count came to, for its log."""
    import jax

    from .jobs._distributed import population_devices, usable_cores

    n = population_devices(None, config.population_size)
    where = jax.default_backend()
    per = f", at most one per core of {usable_cores()}" if where == "cpu" else ""
    return (
        f"population of {config.population_size} split over {n} {where} device"
        f"{'s' if n > 1 else ''} (devices none: as many as divide it{per}; --devices 1 for "
        "one device's numbers)"
    )


def _listing() -> str:
    """What `eqx-qd list` prints: every job and every registered name, with help and options."""
    from .jobs import AGENTS, EMITTERS, ENVIRONMENTS, JOBS, MO_TASKS, TASKS

    lines = ["jobs (eqx-qd run JOB --help for their options):"]
    for job in JOBS.values():
        presets = f" (presets: {', '.join(sorted(job.presets))})" if job.presets else ""
        lines.append(f"  {job.name:18s} {job.help}{presets}")
    for title, registry in (
        ("tasks (map-elites --task)", TASKS),
        ("multi-objective tasks (mome --task)", MO_TASKS),
        ("environments (--env)", ENVIRONMENTS),
        ("agents (pbt / me-pbt --agent)", AGENTS),
        ("emitters (map-elites --emitter)", EMITTERS),
    ):
        lines.append(f"{title}:")
        for entry in registry:
            tags = f" [{', '.join(sorted(entry.tags))}]" if entry.tags else ""
            options = ", ".join(o for o in entry.options() if not o.startswith("_")) or "none"
            about = entry.help.replace("`", "").rstrip(".")
            lines.append(f"  {entry.name:18s} {about}{tags}; options: {options}")
    return "\n".join(lines)


def _report(parser: _Parser, args: argparse.Namespace) -> int:
    from .jobs import report

    for folder in args.folders:
        if not os.path.isdir(folder):
            parser.error(f"run folder {folder!r} does not exist")
    try:
        result = report(
            args.folders,
            args.out,
            x=args.x,
            p_method=args.p_method,
            plots=not args.no_plots,
            truncate=args.truncate,
        )
    except (ValueError, TypeError, OSError) as e:
        parser.error(str(e))
    for note in result.notes:
        print(f"eqx-qd: warning: {note}", file=sys.stderr)
    print(result.table())
    print(f"report written to {args.out}")
    return 0


def _status(parser: _Parser, args: argparse.Namespace) -> int:
    from .jobs import list_checkpoints, run_status

    for folder in args.folders:
        if not os.path.isfile(os.path.join(folder, "config.toml")):
            parser.error(f"{folder!r} is not a run folder (it has no config.toml)")
    for folder in args.folders:
        try:
            record = run_status(folder)
            checkpoints = list_checkpoints(folder)
        except ValueError as e:  # a half-written status.json or checkpoint record
            parser.error(str(e))
        newest = f"checkpoint {checkpoints[-1].step}" if checkpoints else "no checkpoint"
        line = f"{folder}: {record.get('job', '?')} {record['status']}, {newest}"
        if record.get("error"):
            line += f": {record['error']}"
        print(line)
    return 0


def _replay(parser: _Parser, args: argparse.Namespace) -> int:
    from .jobs import replay

    if not os.path.isfile(os.path.join(args.folder, "config.toml")):
        parser.error(f"{args.folder!r} is not a run folder (it has no config.toml)")
    try:
        result = replay(args.folder, id=args.id, cell=args.cell, seed=args.seed)
    except ValueError as e:
        parser.error(str(e))
    print(result.summary())
    return 0


def _plugin_modules(argv: Sequence[str]) -> list[str]:
    """The `--plugin` modules of `argv`, read before the parser is built: a plugin may
    register a job, whose command the parser then has."""
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    early.add_argument("--plugin", action="append", default=[])
    return early.parse_known_args(argv)[0].plugin


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from ._extras import MissingExtra, require

    try:
        require("jobs", "The eqx-qd command")
    except MissingExtra as e:
        sys.stderr.write(f"eqx-qd: error: {e}\n")
        return 2
    # Plugins first: they register jobs, agents, environments... (and compute nothing at
    # import, so the device and process setup below still comes before JAX starts).
    from .jobs._launch import load_plugins

    try:
        load_plugins(_plugin_modules(argv))
    except ValueError as e:
        _Parser(prog="eqx-qd").error(str(e).replace("plugin ", "--plugin ", 1))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        print(_listing())
        return 0
    if args.command == "report":
        return _report(parser, args)
    if args.command == "replay":
        return _replay(parser, args)
    if args.command == "status":
        return _status(parser, args)
    from ._machine import machine
    from .jobs import JOBS, launch, run
    from .jobs._choices import machine_choices
    from .jobs._distributed import process_count as jax_processes, set_resume_hint

    job = JOBS[args.job]
    resume = args.resume
    if args.from_checkpoint is not None and (resume is None or args.out is None):
        parser.error("--from STEP forks a run: give --resume FOLDER and --out NEW_FOLDER")
    if resume is not None:
        if args.seeds is not None:
            parser.error("--seeds runs new folders; it cannot --resume one")
        saved = os.path.join(resume, "config.toml")
        if not os.path.isfile(saved):
            parser.error(f"cannot resume: {saved!r} does not exist")
        if args.config is None:
            args.config = saved
    # Host devices, joining the processes, the compile cache: before JAX starts.
    requested = _requested_devices(args, job)
    typed = {k: v for k, v in vars(args).items() if v is not None and k in _LAUNCH_OPTIONS}
    if getattr(args, "devices", None) is None:
        typed.pop("devices", None)  # (a count from the config file is not an option)
    try:
        launched = launch(
            job.name,
            devices=requested,
            coordinator=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            distributed=args.distributed,
            heartbeat_timeout=args.heartbeat_timeout,
            compile_cache=_compile_cache(args),
        )
    except ValueError as e:
        parser.error(_as_typed(str(e), typed))
    cache, automatic = launched.compile_cache, launched.automatic
    config = _config(parser, args, job)
    if resume is not None and args.out is not None:  # a fork: it continues in --out
        resume = _fork(parser, resume, args.out, args.from_checkpoint or "latest")
    elif resume is not None:
        try:
            print(f"eqx-qd: {_resume_point(job, resume)}", flush=True)
        except ValueError as e:  # a checkpoint's record or status.json unreadable
            parser.error(str(e))
    runs = _seeded_runs(parser, args, job, config, resume)
    where = f"compile cache {cache}" if cache else "no compile cache"
    print(f"eqx-qd: {job.name} on {_describe_devices()} ({where})", flush=True)
    print(f"eqx-qd: machine: {machine()}", flush=True)
    auto = getattr(runs[0][0], "matmul_dtype", None) == "auto"  # (the agent jobs' option)
    env = getattr(runs[0][0], "env", None)
    choices = machine_choices(matmul_auto=auto, env=env if isinstance(env, str) else None)
    print(f"eqx-qd: for this machine: {choices}", flush=True)
    if automatic and getattr(runs[0][0], "devices", 0) is None:
        print(f"eqx-qd: {_split_line(runs[0][0])}", flush=True)
    typed = {k: v for k in job.config_cls.keys() if (v := getattr(args, k, None)) is not None}
    for config, out in runs:
        if jax_processes() > 1:
            own = ", each with its own --process-id" if args.process_id is not None else ""
            set_resume_hint(f"run {_resume_command(args, job, out)} on every process{own}")
        try:
            result = run(
                config,
                out,
                progress=not args.no_progress,
                plots=not args.no_plots,
                resume=resume is not None,
                log=args.log,
            )
        except ValueError as e:
            parser.error(_as_typed(str(e), typed))
        print(job.summary(result))
        print(f"run folder: {result.folder or f'{out} (written by process 0)'}")
    if len(runs) > 1:
        print(f"compare the seeds: eqx-qd report {os.path.dirname(runs[0][1])}/seed-*")
    return 0


def _resume_point(job: Any, folder: str) -> str:
    """Where a resumed run continues: its newest checkpoint's step, in the unit of the
    job's logs."""
    from .jobs import list_checkpoints, run_status

    status = run_status(folder).get("status", "unknown")
    checkpoints = list_checkpoints(folder)
    if not checkpoints:
        return f"resuming {folder} ({status}): it has no checkpoint yet, so it starts again"
    column = next(iter(job.logs.values()))
    return (
        f"resuming {folder} ({status}) from its newest checkpoint, {column} {checkpoints[-1].step}"
    )


def _fork(parser: _Parser, source: str, dest: str, which: str) -> str:
    from .jobs import fork_run

    try:
        chosen = fork_run(source, dest, int(which) if which.isdigit() else which)
    except (ValueError, FileNotFoundError) as e:
        parser.error(str(e))
    print(f"eqx-qd: forked {source} at checkpoint {chosen.step} into {dest}", flush=True)
    return dest


def _seeded_runs(
    parser: _Parser, args: argparse.Namespace, job: Any, config: Any, resume: str | None
) -> list[tuple[Any, str]]:
    """The (config, folder) pairs to run: one, or one per `--seeds` entry in OUT/seed-S, all
    checked before the first starts (so a bad seed or a taken folder stops nothing halfway)."""
    from .jobs._job import default_run_folder, holds_run

    if args.seeds is None:
        return [(config, resume or args.out or default_run_folder(job.name, config.seed))]
    if not args.seeds or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds must list distinct seeds, got {list(args.seeds)}")
    base = args.out or default_run_folder(job.name)
    runs = []
    for seed in args.seeds:
        out = os.path.join(base, f"seed-{seed}")
        if holds_run(out):
            parser.error(f"{out!r} already holds a run; choose another --out")
        try:
            runs.append((dataclasses.replace(config, seed=seed), out))  # checked again
        except (ValueError, TypeError) as e:
            parser.error(f"--seeds {seed}: {e}")
    return runs


if __name__ == "__main__":
    sys.exit(main())
