"""The ``eqx-qd`` command: ``eqx-qd run {map-elites, pgame, pbt, me-pbt, ippo} [options]``."""

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2
        self.exit(2, f"eqx-qd: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text}")
    return value


def _run_options(parser: argparse.ArgumentParser, name: str) -> None:
    """The options every job shares."""
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out", help=f"run folder (default: runs/{name}-<time>)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="eqx-qd", description="Quality-Diversity runs with eqx_qd.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("run", help="run an algorithm")
    algos = run.add_subparsers(dest="algorithm", required=True, parser_class=_Parser)
    me = algos.add_parser(
        "map-elites",
        help="MAP-Elites on a pure-JAX task (default: rastrigin, 100-D, CVT 1024 cells)",
    )
    me.add_argument("--config", help="TOML file with MapElitesConfig keys (options override it)")
    me.add_argument("--task", help="rastrigin, sphere or arm")
    me.add_argument("--genotype-dim", type=_positive_int, dest="genotype_dim")
    me.add_argument("--cells", type=_positive_int, help="CVT cells, or bins per axis with --grid")
    me.add_argument("--grid", action="store_true", default=None, help="grid instead of CVT")
    me.add_argument("--centroids", help=".npy file of CVT centroids")
    me.add_argument("--cvt-samples", type=_positive_int, dest="cvt_samples")
    me.add_argument("--batch-size", "--batch", type=_positive_int, dest="batch_size")
    me.add_argument("--iterations", "--iters", type=_positive_int, dest="iterations")
    me.add_argument("--log-period", type=_positive_int, dest="log_period")
    me.add_argument("--iso-sigma", type=_non_negative_float, dest="iso_sigma")
    me.add_argument("--line-sigma", type=_non_negative_float, dest="line_sigma")
    _run_options(me, "map-elites")

    pg = algos.add_parser(
        "pgame",
        help="PGA-MAP-Elites (default: the local preset, walker2d_uni, 10k evaluations)",
        description="Without --config the local preset runs (minutes on a laptop CPU); a "
        "--config TOML file starts from the GECCO 2021 paper's defaults instead. Options "
        "override both.",
    )
    pg.add_argument("--config", help="TOML file with PGAMEConfig keys (the repo's arguments)")
    pg.add_argument("--env", help="walker2d_uni, halfcheetah_uni, hopper_uni, ant_uni, "
                    "ant_omni or point_maze")  # fmt: skip
    pg.add_argument("--max-evals", type=_positive_int, dest="max_evals")
    pg.add_argument("--eval-batch-size", type=_positive_int, dest="eval_batch_size")
    pg.add_argument("--n-niches", type=_positive_int, dest="n_niches")
    pg.add_argument("--episode-length", type=_positive_int, dest="episode_length")
    pg.add_argument("--save-period", type=_positive_int, dest="save_period")
    pg.add_argument(
        "--no-gradient", action="store_false", dest="gradient_op", default=None,
        help="plain MAP-Elites (GA only) with the same budget and outputs",
    )  # fmt: skip
    _run_options(pg, "pgame")

    pb = algos.add_parser(
        "pbt",
        help="PBT-SAC or PBT-TD3 (default: 8 SAC agents on the open point maze, ~1 min)",
    )
    pb.add_argument("--config", help="TOML file with PBTConfig keys (options override it)")
    pb.add_argument("--agent", help="sac or td3")
    pb.add_argument("--env", help="point_maze_open, point_maze, or a brax QD task")
    pb.add_argument("--population-size", type=_positive_int, dest="population_size")
    pb.add_argument("--rounds", type=_positive_int)
    pb.add_argument("--iterations-per-round", type=_positive_int, dest="iterations_per_round")
    pb.add_argument("--explore", help="resample or perturb")
    _run_options(pb, "pbt")

    mp = algos.add_parser(
        "me-pbt",
        help="ME-PBT, one device (default: 10 PBT-TD3 + 10 GA on the point maze, 40 iterations)",
    )
    mp.add_argument("--config", help="TOML file with MEPBTConfig keys (options override it)")
    mp.add_argument("--agent", help="td3 or sac")
    mp.add_argument("--env", help="point_maze or a brax QD task")
    mp.add_argument("--iterations", "--iters", type=_positive_int, dest="iterations")
    mp.add_argument("--pg-population-size", type=_positive_int, dest="pg_population_size")
    mp.add_argument("--ga-population-size", type=int, dest="ga_population_size")
    mp.add_argument("--cells", type=_positive_int)
    mp.add_argument(
        "--devices", type=_positive_int,
        help="devices to shard over (on CPU, this many host devices are created)",
    )  # fmt: skip
    _run_options(mp, "me-pbt")

    ip = algos.add_parser(
        "ippo",
        help="independent PPO (default: 4 agents on the discrete LineTargets task, < 1 min)",
    )
    ip.add_argument("--config", help="TOML file with IPPOConfig keys (options override it)")
    ip.add_argument("--env", help="line_targets, point_maze_open, or a multi-agent brax task")
    ip.add_argument("--num-agents", type=_positive_int, dest="num_agents")
    ip.add_argument("--num-updates", type=int, dest="num_updates", help="total PPO updates")
    ip.add_argument("--eval-frequency", type=_positive_int, dest="eval_frequency")
    ip.add_argument("--batch-size", type=_positive_int, dest="batch_size", help="parallel envs")
    ip.add_argument("--rollout-length", type=_positive_int, dest="rollout_length")
    ip.add_argument(
        "--shared-params", action="store_const", const=True, dest="shared_params",
        help="one actor and one critic shared by all agents",
    )  # fmt: skip
    _run_options(ip, "ippo")
    ip.add_argument(
        "--resume", metavar="FOLDER",
        help="continue the run in FOLDER from its latest checkpoint (its config.toml, unless "
        "--config is given) up to --num-updates",
    )  # fmt: skip
    return parser


def _run_ippo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .jobs._ippo import IPPOConfig, run_ippo
    from .jobs._map_elites import default_run_folder

    if args.resume is not None:
        if args.out is not None:
            parser.error("--resume FOLDER writes into FOLDER; drop --out")
        saved = os.path.join(args.resume, "config.toml")
        if args.config is None:
            if not os.path.isfile(saved):
                parser.error(f"cannot resume: {saved!r} does not exist")
            args.config = saved
    config = _config_from_args(parser, args, IPPOConfig, IPPOConfig.from_mapping)
    out = args.resume or args.out or default_run_folder("ippo")
    try:
        result = run_ippo(
            config, out, progress=not args.no_progress, plots=not args.no_plots,
            resume=args.resume is not None,
        )  # fmt: skip
    except ValueError as e:
        parser.error(str(e))
    last = {k: v[-1] for k, v in result.progress.items()}
    print(
        f"done: {int(last['updates'])} updates ({int(last['env_steps'])} env steps), "
        f"mean return {last['mean_return']:.4g} (std {last['std_return']:.3g}), "
        f"{100 * last['terminated']:.0f}% of evaluation episodes terminated"
    )
    print(f"run folder: {result.folder}")
    return 0


def _run_me_pbt(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .jobs._map_elites import default_run_folder
    from .jobs._me_pbt import MEPBTConfig, run_me_pbt

    config = _config_from_args(parser, args, MEPBTConfig, MEPBTConfig.from_mapping)
    out = args.out or default_run_folder("me-pbt")
    result = run_me_pbt(config, out, progress=not args.no_progress, plots=not args.no_plots)
    last = {k: v[-1] for k, v in result.progress.items()}
    print(
        f"done: {int(last['evaluations'])} evaluations, QD-score {last['qd_score']:.6g}, "
        f"coverage {100 * last['coverage']:.1f}%, max fitness {last['max_fitness']:.6g}"
    )
    print(f"run folder: {result.folder}")
    return 0


def _config_from_args(parser, args, cls, default):
    """The config from ``--config`` (or ``default(options)`` without it), options winning; bad
    input exits through ``parser.error``."""
    keys = [f.name for f in dataclasses.fields(cls)]
    overrides = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    try:
        if args.config is not None:
            return cls.from_toml(args.config, **overrides)
        return default(overrides)
    except (ValueError, TypeError) as e:
        parser.error(str(e))


def _run_pbt(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .jobs._map_elites import default_run_folder
    from .jobs._pbt import PBTConfig, run_pbt

    config = _config_from_args(parser, args, PBTConfig, PBTConfig.from_mapping)
    out = args.out or default_run_folder("pbt")
    result = run_pbt(config, out, progress=not args.no_progress, plots=not args.no_plots)
    last = result.returns[-1]
    print(
        f"done: {config.rounds} rounds, final mean return {last.mean():.6g} (max {last.max():.6g})"
    )
    print(f"run folder: {result.folder}")
    return 0


def _run_pgame(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .jobs._map_elites import default_run_folder
    from .jobs._pgame import PGAMEConfig, run_pgame

    config = _config_from_args(parser, args, PGAMEConfig, lambda o: PGAMEConfig.local(**o))
    out = args.out or default_run_folder("pgame")
    try:
        result = run_pgame(config, out, progress=not args.no_progress, plots=not args.no_plots)
    except ValueError as e:
        parser.error(str(e))
    last = {k: v[-1] for k, v in result.progress.items()}
    print(
        f"done: {int(last['evaluations'])} evaluations, QD-score {last['qd_score']:.6g}, "
        f"coverage {int(last['coverage'])} cells, max fitness {last['max_fitness']:.6g} "
        f"(averaged over {config.num_reevals} re-evaluations: {last['averaged_max_fitness']:.6g})"
    )
    print(f"run folder: {result.folder}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    devices = getattr(args, "devices", None)
    if devices is not None and devices > 1 and os.environ["JAX_PLATFORMS"] == "cpu":
        # Read when JAX first initialises its CPU backend, which has not happened yet.
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}"
    if args.algorithm == "pgame":
        return _run_pgame(parser, args)
    if args.algorithm == "pbt":
        return _run_pbt(parser, args)
    if args.algorithm == "me-pbt":
        return _run_me_pbt(parser, args)
    if args.algorithm == "ippo":
        return _run_ippo(parser, args)
    from .jobs._map_elites import default_run_folder, MapElitesConfig, run_map_elites

    config = _config_from_args(parser, args, MapElitesConfig, MapElitesConfig.from_mapping)
    if config.centroids is not None and not os.path.isfile(config.centroids):
        parser.error(f"centroids file {config.centroids!r} does not exist")
    out = args.out or default_run_folder("map-elites")
    try:
        result = run_map_elites(config, out, progress=not args.no_progress, plots=not args.no_plots)
    except ValueError as e:
        parser.error(str(e))
    last = {k: v[-1] for k, v in result.history.items()}
    print(
        f"done: {int(last['evaluations'])} evaluations, QD-score {last['qd_score']:.6g}, "
        f"coverage {100 * last['coverage']:.1f}%, max fitness {last['max_fitness']:.6g}"
    )
    print(f"run folder: {result.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
