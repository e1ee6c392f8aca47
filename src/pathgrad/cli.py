"""The ``pathgrad`` command: train, resume, eval, plot, envs, export.

Exit status: 0 on success, 2 for a usage or config error (one line on stderr,
nothing written), 130 after SIGINT and 143 after SIGTERM (the update in flight
is undone and a final checkpoint written, so the run stays resumable).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pathgrad import envs as _builtin_envs  # noqa: F401  (registers the built-in envs)
from pathgrad.checkpoint import latest_checkpoint, read_checkpoint
from pathgrad.config import ConfigError, RunConfig, load_config
from pathgrad.env import build_learning_env, get_registered_learning_env_names
from pathgrad.evaluation import evaluate_episodes
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.progress import ProgressReporter
from pathgrad.run import (
    CONFIG_FILE,
    CURVE_FILE,
    METRICS_FILE,
    MetricsLog,
    build_env,
    build_policy,
    build_run,
    new_run_dir,
    write_config,
    write_summary,
)

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class UsageError(Exception):
    """A problem with the command line or its files: one line, exit status 2."""


class Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives."""


@contextlib.contextmanager
def _signals_raise(trainer: Any) -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and SIGTERM Terminated, between optimizer steps."""

    def handler(signum: int, frame: Any) -> None:
        trainer.request_interrupt(KeyboardInterrupt if signum == signal.SIGINT else Terminated)

    previous_int = signal.signal(signal.SIGINT, handler)
    previous_term = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """Let final writes finish: further SIGINT/SIGTERM are ignored inside the block."""
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)


def _budget(config: RunConfig) -> dict[str, int]:
    if config.trainer.total_updates is not None:
        return {"total_updates": config.trainer.total_updates}
    return {"total_timesteps": config.trainer.total_timesteps}


def _init_wandb(config: RunConfig, run_dir: Path, resume: bool) -> Any:
    if not config.logging.wandb:
        return None
    import wandb  # load_config has checked that it is installed

    return wandb.init(
        project=config.logging.wandb_project,
        name=run_dir.name,
        id=run_dir.name.replace("/", "-"),
        dir=str(run_dir),
        config=config.model_dump(mode="python"),
        resume="allow" if resume else None,
    )


def _run_training(
    config: RunConfig, run_dir: Path, objects: Any, *, resume: bool, quiet: bool
) -> int:
    """Train with logging, progress and signal handling; always leave a resumable run."""
    trainer = objects.trainer
    wandb_run = _init_wandb(config, run_dir, resume)
    writer = None
    if config.logging.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run_dir / "tb"), purge_step=trainer.global_step or None)
    trainer.writer = writer
    metrics = MetricsLog(run_dir / METRICS_FILE)
    if resume:
        metrics.resume_at(trainer.global_step)
    budget = _budget(config)
    unit = "updates" if "total_updates" in budget else "steps"
    done = trainer.num_updates if unit == "updates" else trainer.global_step
    progress = ProgressReporter(
        next(iter(budget.values())),
        unit,
        start=done,
        print_every=config.logging.print_every_updates,
        quiet=quiet,
    )
    trainer.callbacks[:] = [metrics, progress]
    status, code = "failed", 1  # until training returns or a signal stops it
    try:
        with _signals_raise(trainer):
            trainer.train(**budget)
            last_eval = trainer.last_eval_metrics.get("global_step")
            if trainer.eval_env is not None and last_eval != trainer.global_step:
                trainer.evaluate()  # the final policy gets an evaluation too
        status, code = "completed", 0
    except KeyboardInterrupt:
        status, code = "interrupted", EXIT_SIGINT
    except Terminated:
        status, code = "terminated", EXIT_SIGTERM
    finally:
        with _signals_ignored():
            progress.close()
            final = trainer.save_checkpoint(
                run_dir
                / "checkpoints"
                / f"{trainer.cfg.experiment_name}_final_step_{trainer.global_step}.pt",
                kind="final",
            )
            write_summary(run_dir, trainer, status)
            curve = _write_curve(run_dir)
            if writer is not None:
                writer.close()
            if wandb_run is not None:
                wandb_run.finish()
    if not quiet:
        last = trainer.last_eval_metrics
        if last:
            print(
                f"final evaluation at step {int(last['global_step']):,}: "
                f"return {last.get('eval/avg_reward', float('nan')):.4g}, "
                f"success rate {last.get('eval/success_rate', float('nan')):.2f}"
            )
        print(f"{status}: {trainer.num_updates} updates, {trainer.global_step:,} env steps")
        print(f"run:        {run_dir}")
        print(f"checkpoint: {final}")
        if curve is not None:
            print(f"curve:      {curve}")
        if writer is not None:
            print(f"tensorboard --logdir {run_dir / 'tb'}")
    return code


def _write_curve(run_dir: Path) -> Path | None:
    from pathgrad.plotting import plot_runs

    try:
        return plot_runs([run_dir], run_dir / CURVE_FILE)
    except FileNotFoundError:
        return None


def command_train(args: argparse.Namespace) -> int:
    """``pathgrad train [CONFIG.yaml] [key=value ...]``."""
    config_path = args.config
    overrides = list(args.overrides)
    if config_path is not None and "=" in config_path and not Path(config_path).exists():
        overrides.insert(0, config_path)  # the first override, not a file
        config_path = None
    config = load_config(config_path, overrides)
    run_dir = new_run_dir(config)
    objects = build_run(config, run_dir)
    run_dir.mkdir(parents=True)
    write_config(run_dir, config)
    return _run_training(config, run_dir, objects, resume=False, quiet=args.quiet)


def command_resume(args: argparse.Namespace) -> int:
    """``pathgrad resume RUN_DIR [--total-updates N | --total-timesteps N]``."""
    run_dir = Path(args.run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise UsageError(f"'{run_dir}' is not a run directory (no {CONFIG_FILE}).")
    overrides = []
    if args.total_updates is not None:
        overrides = [f"trainer.total_updates={args.total_updates}", "trainer.total_timesteps=null"]
    elif args.total_timesteps is not None:
        overrides = [
            f"trainer.total_timesteps={args.total_timesteps}",
            "trainer.total_updates=null",
        ]
    config = load_config(run_dir / CONFIG_FILE, overrides)
    try:
        checkpoint = latest_checkpoint(run_dir / "checkpoints")
    except FileNotFoundError as error:
        raise UsageError(str(error)) from error
    objects = build_run(config, run_dir)
    resume_scheduler = "restart" if args.restart_scheduler else "restore"
    try:
        objects.trainer.load_checkpoint(checkpoint, resume_scheduler=resume_scheduler)
    except ValueError as error:
        raise UsageError(str(error)) from error
    if overrides:
        write_config(run_dir, config)
    if not args.quiet:
        print(
            f"resuming {run_dir} from {checkpoint.name}: update {objects.trainer.num_updates}, "
            f"{objects.trainer.global_step:,} env steps"
        )
    return _run_training(config, run_dir, objects, resume=True, quiet=args.quiet)


def _load_for_evaluation(target: Path) -> tuple[RunConfig, dict[str, Any]]:
    """Config and checkpoint of a run directory (latest checkpoint) or a checkpoint file."""
    if target.is_dir():
        try:
            path = latest_checkpoint(target / "checkpoints")
        except FileNotFoundError as error:
            raise UsageError(str(error)) from error
    else:
        path = target
    try:
        checkpoint = read_checkpoint(path)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from error
    if "config" not in checkpoint:
        raise UsageError(f"'{path}' carries no run config (not written by `pathgrad train`).")
    return RunConfig.model_validate(checkpoint["config"]), checkpoint


def _policy_from_checkpoint(
    config: RunConfig, checkpoint: dict[str, Any], env: Any
) -> tuple[Any, RunningObservationNormalizer | None]:
    policy = build_policy(config, env)
    policy.load_state_dict(checkpoint["policy"])
    policy.eval()
    normalizer = None
    if checkpoint.get("observation_normalizer") is not None:
        state = checkpoint["observation_normalizer"]
        normalizer = RunningObservationNormalizer(int(state["mean"].shape[0]), config.env.device)
        normalizer.load_state_dict(state)
    return policy, normalizer


def command_eval(args: argparse.Namespace) -> int:
    """``pathgrad eval RUN_DIR|CHECKPOINT [--episodes N] [--seed S] [--json]``."""
    config, checkpoint = _load_for_evaluation(Path(args.target))
    env = build_env(config, config.eval.num_envs, config.trainer.seed + 1)
    policy, normalizer = _policy_from_checkpoint(config, checkpoint, env)
    episodes = args.episodes or config.eval.episodes
    seed = args.seed if args.seed is not None else config.eval.seed
    metrics = evaluate_episodes(
        policy,
        env,
        episodes,
        config.env.device,
        seed=seed,
        observation_transform=normalizer.normalize if normalizer is not None else None,
    )
    result = {
        "env": config.env.name,
        "global_step": checkpoint["global_step"],
        "num_updates": checkpoint["num_updates"],
        "episodes": episodes,
        **metrics,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{config.env.name}: {episodes} episodes, seed {seed}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    Console().print(table)
    return 0


def command_plot(args: argparse.Namespace) -> int:
    """``pathgrad plot RUN_DIR... [-o curves.png]``."""
    from pathgrad.plotting import plot_runs

    try:
        path = plot_runs(args.run_dirs, args.output)
    except FileNotFoundError as error:
        raise UsageError(str(error)) from error
    print(f"wrote {path}")
    return 0


def command_envs(args: argparse.Namespace) -> int:
    """``pathgrad envs``: registered envs with their sizes and episode length."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="registered environments")
    for column in ("name", "observation", "action", "episode steps"):
        table.add_column(column, justify="left" if column == "name" else "right")
    for name in get_registered_learning_env_names():
        env = build_learning_env(name, num_envs=1, device="cpu")
        table.add_row(
            name,
            str(int(env.single_observation_space.shape[-1])),
            str(int(env.single_action_space.shape[-1])),
            str(getattr(env, "max_episode_steps", "-")),
        )
    Console().print(table)
    return 0


def command_export(args: argparse.Namespace) -> int:
    """``pathgrad export CHECKPOINT -o policy.pt``: TorchScript of the deterministic policy."""
    from pathgrad.export import export_policy

    config, checkpoint = _load_for_evaluation(Path(args.checkpoint))
    env = build_env(config, 1, config.trainer.seed)
    policy, normalizer = _policy_from_checkpoint(config, checkpoint, env)
    observation, _ = env.reset(seed=0)
    path = export_policy(policy, normalizer, observation, args.output)
    print(f"wrote {path} (torch.jit.load it; input [B, {observation.shape[-1]}] observations)")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pathgrad", description="Analytic policy gradients through differentiable simulators."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train from a config (default: PointMass)")
    train.add_argument("config", nargs="?", help="YAML config (omit for the default task)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.seed=3")
    train.add_argument("--quiet", action="store_true", help="print nothing but errors")
    train.set_defaults(handler=command_train)

    resume = commands.add_parser("resume", help="continue a run from its latest checkpoint")
    resume.add_argument("run_dir")
    budget = resume.add_mutually_exclusive_group()
    budget.add_argument("--total-updates", type=int, help="new absolute update budget")
    budget.add_argument("--total-timesteps", type=int, help="new absolute env-step budget")
    resume.add_argument(
        "--restart-scheduler",
        action="store_true",
        help="restart the learning-rate schedule (optimizer state is kept)",
    )
    resume.add_argument("--quiet", action="store_true")
    resume.set_defaults(handler=command_resume)

    evaluate = commands.add_parser("eval", help="evaluate a run or a checkpoint")
    evaluate.add_argument("target", help="run directory (latest checkpoint) or checkpoint file")
    evaluate.add_argument("--episodes", type=int, help="episodes (default: the config's)")
    evaluate.add_argument("--seed", type=int, help="reset seed (default: the config's)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.set_defaults(handler=command_eval)

    plot = commands.add_parser("plot", help="learning curves of one or several runs")
    plot.add_argument("run_dirs", nargs="+")
    plot.add_argument("-o", "--output", default="curves.png")
    plot.set_defaults(handler=command_plot)

    listing = commands.add_parser("envs", help="list the registered environments")
    listing.set_defaults(handler=command_envs)

    export = commands.add_parser("export", help="TorchScript of a checkpoint's policy")
    export.add_argument("checkpoint")
    export.add_argument("-o", "--output", required=True)
    export.set_defaults(handler=command_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pathgrad`` command; returns the exit status."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # Overrides may follow options (`train cfg.yaml --quiet a.b=1`): argparse leaves them over.
    unknown = [item for item in extra if args.command != "train" or item.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "train":
        args.overrides = [*args.overrides, *extra]
    if getattr(args, "episodes", None) is not None and args.episodes <= 0:
        print("pathgrad: error: --episodes must be positive.", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except ConfigError as error:
        print(f"pathgrad: config error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as error:
        print(f"pathgrad: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
