"""Seeing a policy: episodes of a trained policy drawn into a GIF or an MP4.

:func:`record_episodes` steps one env with the deterministic policy and keeps
every state; :func:`write_animation` draws them (:mod:`pathgrad.rendering.drawings`)
with the episode, step and return so far overlaid, through matplotlib's
animation writers: Pillow for ``.gif``, ffmpeg (from the ``imageio-ffmpeg``
package, or on ``PATH``) for ``.mp4``. The file is written under a temporary
name in its folder (created where missing) and renamed, so an unwritable
folder fails before anything is drawn and an interrupted render leaves no
partial file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from pathgrad.rendering.drawings import drawing_for, is_3d, observation_bars

__all__ = ["Frame", "record_episodes", "write_animation"]

FORMATS = (".gif", ".mp4")


@dataclasses.dataclass
class Frame:
    """One drawn step: the state of env row 0, its observation and the running return."""

    episode: int
    step: int
    episode_return: float
    state: dict[str, torch.Tensor]
    observation: torch.Tensor


def _row(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value[0].detach().cpu().clone() for key, value in state.items()}


@torch.no_grad()
def record_episodes(env: Any, act: Any, episodes: int, seed: int, every: int = 1) -> list[Frame]:
    """Frames of ``episodes`` episodes of ``act(observation) -> action`` in ``env`` (row 0).

    Every ``every``-th step is kept, and the first and last of each episode.
    """
    frames: list[Frame] = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        total, step, done = 0.0, 0, False
        while not done:
            state = _row(env.state) if hasattr(env, "state") else {}
            if step % every == 0:
                frames.append(Frame(episode, step, total, state, observation[0].cpu().clone()))
            observation, reward, terminated, truncated, _ = env.step(act(observation))
            total += float(reward[0])
            step += 1
            done = bool(terminated[0] or truncated[0])
        frames.append(Frame(episode, step, total, state, observation[0].cpu().clone()))
    return frames


def _ffmpeg() -> str:
    with contextlib.suppress(ImportError):
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    found = shutil.which("ffmpeg")
    if found is None:
        raise RuntimeError("MP4 needs ffmpeg: pip install imageio-ffmpeg (or write a .gif).")
    return found


def write_animation(
    env: Any, frames: list[Frame], output: str | Path, *, title: str, fps: int = 30
) -> Path:
    """Draw ``frames`` into ``output`` (``.gif`` or ``.mp4``); returns the path.

    Raises:
        ValueError: For another suffix or no frames.
        RuntimeError: For an MP4 without ffmpeg, or ffmpeg failing (its last line).
        OSError: If the output folder cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")

    output = Path(output)
    suffix = output.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"cannot render to '{output.name}': give a .gif or .mp4 file name.")
    if not frames:
        raise ValueError("no frames to draw.")
    if suffix == ".mp4":
        matplotlib.rcParams["animation.ffmpeg_path"] = _ffmpeg()
    try:
        with _temporary_beside(output) as temporary, _quiet_movie_writer():
            _draw_movie(env, frames, temporary, title, fps)
    except subprocess.CalledProcessError as error:
        lines = (error.stderr or "").strip().splitlines() or [f"exit status {error.returncode}"]
        raise RuntimeError(f"ffmpeg could not write '{output}': {lines[-1]}") from error
    return output


def _draw_movie(env: Any, frames: list[Frame], path: Path, title: str, fps: int) -> None:
    import matplotlib.pyplot as plt
    from matplotlib import animation

    drawing = drawing_for(env)
    figure = plt.figure(figsize=(5, 5))
    axes = figure.add_subplot(projection="3d" if is_3d(env) else None)
    episodes = 1 + max(frame.episode for frame in frames)

    def draw(index: int) -> list:
        frame = frames[index]
        axes.clear()
        history = [f.state for f in frames[: index + 1] if f.episode == frame.episode]
        if drawing is not None and frame.state:
            drawing(env, frame.state, history, axes)
        else:
            observation_bars(frame.observation, axes)
        axes.set_title(
            f"{title}\nepisode {frame.episode + 1}/{episodes}   step {frame.step}   "
            f"return {frame.episode_return:.2f}",
            fontsize=10,
        )
        return []

    gif = path.suffix.lower() == ".gif"
    writer = animation.PillowWriter(fps=fps) if gif else animation.FFMpegWriter(fps)
    try:
        movie = animation.FuncAnimation(figure, draw, frames=len(frames), blit=False)
        movie.save(str(path), writer=writer)
    finally:
        plt.close(figure)


@contextlib.contextmanager
def _temporary_beside(output: Path) -> Iterator[Path]:
    """A new temporary file in ``output``'s folder (created if missing), moved onto ``output``.

    Made before anything is drawn, so an unwritable folder fails at once with an
    OSError; removed if the block fails.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = output.with_name(f".{output.name}.{secrets.token_hex(6)}.tmp{output.suffix}")
    # O_EXCL: a new file of our own; mode 0o666 less the umask, as the writers would make it
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield temporary
        os.replace(temporary, output)
    finally:
        temporary.unlink(missing_ok=True)


@contextlib.contextmanager
def _quiet_movie_writer() -> Iterator[None]:
    """matplotlib's copy of ffmpeg's messages on stderr silenced (its error says them)."""
    logger = logging.getLogger("matplotlib.animation")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
