"""The ``pathgrad`` command: train, resume, eval, plot, envs, configs, export, render.

Exit status: 0 on success, 2 for a usage, config or file error (one line on
stderr, nothing written or lost), 130 after SIGINT and 143 after SIGTERM (the
update in flight is undone and a final checkpoint written, so the run stays
resumable), 3 when training diverged (too many consecutive skipped updates;
the final checkpoint keeps the last good parameters), 1 when training itself
fails or a data-parallel rank loses the others.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pathgrad import envs as _builtin_envs  # noqa: F401  (registers the built-in envs)
from pathgrad.commands import (
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_USAGE,
    RunFailed,
    Terminated,
    UsageError,
    signals_exit,
)
from pathgrad.commands.check_env import add_check_env_parser
from pathgrad.commands.inspection import (
    command_configs,
    command_envs,
    command_eval,
    command_export,
    command_plot,
)
from pathgrad.commands.rendering import command_render
from pathgrad.commands.training import command_resume, command_train
from pathgrad.core import quiet_warp
from pathgrad.core.crash_report import print_crash
from pathgrad.core.env_contract import EnvContractError
from pathgrad.core.parent_watch import watch_parent
from pathgrad.distributed import DistributedError, LostContact
from pathgrad.distributed.launch_report import LOST_CONTACT_EXIT, launched_rank
from pathgrad.runs.config import ConfigError
from pathgrad.runs.run import RunDirectoryError

__all__ = ["main"]

THREADS_HELP = "torch threads (trainer.num_threads; auto: 1 below 4096 envs, else free CPUs)"
NPROC_HELP = "data-parallel ranks on this machine (runs torchrun; see docs/distributed.md)"
ENV_OPTIONS_HELP = "env options for these episodes, e.g. env.cfg.command=[0.5,0,0] (a command)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pathgrad", description="Analytic policy gradients through differentiable simulators."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train from a config (default: PointMass)")
    train.add_argument("config", nargs="?", help="YAML config (omit for the default task)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.seed=3")
    train.add_argument("--quiet", action="store_true", help="print nothing but errors")
    train.add_argument("--num-threads", metavar="N|auto", help=THREADS_HELP)
    train.add_argument("--nproc", type=int, metavar="N", help=NPROC_HELP)
    train.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )
    train.add_argument(
        "--seeds", type=int, nargs="+", metavar="S", help="one run per seed (a sweep)"
    )
    train.add_argument(
        "--grid",
        action="append",
        metavar="KEY=V1,V2",
        help="one run per value (repeatable: every combination, times the seeds)",
    )
    train.add_argument("--jobs", type=int, default=1, help="sweep runs at a time (processes)")
    train.add_argument(
        "--run-dir", metavar="DIR", help="create the run in DIR (new or empty) instead of runs/"
    )
    train.add_argument(
        "--sweep-dir",
        metavar="DIR",
        help="the sweep's folder; an existing one gets only the runs it is missing",
    )
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
    source = resume.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", help="resume from this file instead of the latest one")
    source.add_argument(
        "--rebuild-index",
        action="store_true",
        help="rewrite checkpoints/index.json from the checkpoint files first",
    )
    resume.add_argument("--quiet", action="store_true")
    resume.add_argument("--num-threads", metavar="N|auto", help=THREADS_HELP)
    resume.add_argument("--nproc", type=int, metavar="N", help=NPROC_HELP)
    resume.add_argument(
        "--device",
        help="continue on this torch device (env.device), e.g. cpu after training on cuda",
    )
    resume.set_defaults(handler=command_resume)

    evaluate = commands.add_parser("eval", help="evaluate a run or a checkpoint")
    evaluate.add_argument("target", help="run directory (latest checkpoint) or checkpoint file")
    evaluate.add_argument("--episodes", type=int, help="episodes (default: the config's)")
    evaluate.add_argument("--seed", type=int, help="reset seed (default: the config's)")
    evaluate.add_argument("--device", help="torch device (default: the config's, else cpu)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("env_options", nargs="*", metavar="env.cfg.KEY=VALUE",
                          help=ENV_OPTIONS_HELP)  # fmt: skip
    evaluate.set_defaults(handler=command_eval)

    plot = commands.add_parser("plot", help="learning curves of one or several runs")
    plot.add_argument("run_dirs", nargs="+")
    plot.add_argument(
        "-o", "--output", help="PNG file (default: curves.png, or curves-N.png if it exists)"
    )
    plot.add_argument(
        "--aggregate",
        choices=["median", "mean"],
        help="runs that differ only in their seed as one curve with a band",
    )
    plot.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="also plot this evaluation metric (e.g. forward_velocity); repeatable",
    )
    plot.add_argument(
        "--x",
        choices=["steps", "time"],
        help="only this x axis: env steps or wall time (default: both, side by side)",
    )
    plot.set_defaults(handler=command_plot)

    configs = commands.add_parser("configs", help="list the built-in configs (train NAME)")
    configs.set_defaults(handler=command_configs)

    listing = commands.add_parser("envs", help="list the registered environments")
    listing.add_argument(
        "--module", action="append", default=[], help="import a module that registers envs first"
    )
    listing.set_defaults(handler=command_envs)
    add_check_env_parser(commands)

    render = commands.add_parser("render", help="episodes of a trained policy as a GIF or MP4")
    render.add_argument("target", help="run directory (latest checkpoint) or checkpoint file")
    render.add_argument("-o", "--output", required=True, help="rollout.gif or rollout.mp4")
    render.add_argument("--episodes", type=int, default=1, help="episodes to draw (default 1)")
    render.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    render.add_argument("--every", type=int, default=1, help="draw every N-th step")
    render.add_argument("--fps", type=int, default=30, help="frames per second")
    render.add_argument("env_options", nargs="*", metavar="env.cfg.KEY=VALUE",
                        help=ENV_OPTIONS_HELP)  # fmt: skip
    render.set_defaults(handler=command_render)

    export = commands.add_parser(
        "export", help="a deployable policy: torch.export (.pt2) or ONNX (.onnx)"
    )
    export.add_argument("checkpoint", help="run directory (latest checkpoint) or checkpoint file")
    export.add_argument("-o", "--output", required=True, help="policy.pt2 or policy.onnx")
    export.set_defaults(handler=command_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pathgrad`` command; returns the exit status."""
    quiet_warp.install()  # before any user module can import Warp
    try:
        # Until a command starts writing (it then turns signals into exceptions it
        # can clean up after), a signal ends the process at once: nothing is lost.
        with signals_exit():
            parser = _parser()
            args, extra = parser.parse_known_args(argv)
            # Overrides may follow options (`train cfg.yaml --quiet a.b=1`): argparse leaves them.
            trailing = {"train": "overrides", "eval": "env_options", "render": "env_options"}
            field = trailing.get(args.command)
            unknown = [item for item in extra if field is None or item.startswith("-")]
            if unknown:
                parser.error(f"unrecognized arguments: {' '.join(unknown)}")
            if field is not None:
                setattr(args, field, [*getattr(args, field), *extra])
            args.argv = list(sys.argv[1:] if argv is None else argv)
            watch_parent()  # a sweep's run or a launcher's rank ends with its supervisor
            return args.handler(args)
    except ConfigError as error:
        _report(f"pathgrad: config error: {error}")
        return EXIT_USAGE
    except (UsageError, RunDirectoryError, EnvContractError) as error:
        _report(f"pathgrad: error: {error}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _say_unless_launched("pathgrad: interrupted")
        return EXIT_SIGINT
    except Terminated:
        _say_unless_launched("pathgrad: terminated")
        return EXIT_SIGTERM
    except LostContact as error:
        _say_unless_launched(f"pathgrad: error: {error}")
        return LOST_CONTACT_EXIT if launched_rank() else 1
    except DistributedError as error:
        _report(f"pathgrad: error: {error}")
        return 1
    except RunFailed as error:
        print(f"pathgrad: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"pathgrad: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - a bug: in the user's env or callback, or ours
        print_crash(error)
        return 1


def _report(line: str) -> None:
    """Print an error line; under ``--nproc``, ranks above 0 leave it to rank 0.

    Every rank meets the same bad input.
    """
    if launched_rank() and os.environ.get("RANK", "0") != "0":
        return
    print(line, file=sys.stderr)


def _say_unless_launched(line: str) -> None:
    """Print a line that, under ``--nproc``, the launcher says for the whole job.

    A rank that loses contact or is stopped by a signal knows only its side:
    the launcher sees which rank ended the job and how
    (:mod:`pathgrad.distributed.launch_report`).
    """
    if not launched_rank():
        print(line, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
