"""``pathgrad render RUN_DIR|CHECKPOINT -o rollout.gif|.mp4``: episodes of a trained policy."""

from __future__ import annotations

import argparse
from pathlib import Path

from pathgrad.commands import UsageError, signals_raise

__all__ = ["command_render"]

MAX_EPISODES = 100


def command_render(args: argparse.Namespace) -> int:
    """Draw ``--episodes`` deterministic episodes into a GIF or MP4."""
    from pathgrad.rendering import FORMATS, record_episodes, write_animation
    from pathgrad.runs.loading import load

    output = Path(args.output)
    if output.suffix.lower() not in FORMATS:
        raise UsageError(f"-o '{output}': give a .gif or .mp4 file name.")
    if output.is_dir():
        raise UsageError(f"-o '{output}' is a directory; give a file name.")
    if not 0 < args.episodes <= MAX_EPISODES:
        raise UsageError(f"--episodes must be between 1 and {MAX_EPISODES}.")
    if args.every < 1 or args.fps < 1:
        raise UsageError("--every and --fps must be at least 1.")
    loaded = load(args.target, env_options=getattr(args, "env_options", ()))
    env, path = loaded.env, loaded.checkpoint_path
    frames = record_episodes(env, loaded.module, args.episodes, args.seed, args.every)
    title = f"{loaded.config.env.name}: {path.parent.parent.name or path.name}"
    try:
        with signals_raise():  # an interrupted write leaves no partial file
            written = write_animation(env, frames, output, title=title, fps=args.fps)
    except RuntimeError as error:
        raise UsageError(str(error)) from error
    except OSError as error:
        raise UsageError(f"cannot write '{output}': {error.strerror or error}") from error
    print(f"wrote {written}: {args.episodes} episode(s), {len(frames)} frames")
    return 0
