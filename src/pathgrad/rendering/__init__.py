"""Seeing a policy: episodes of a trained policy drawn into a GIF or an MP4.

:func:`record_episodes` steps one env with the deterministic policy and keeps
every state; :func:`write_animation` draws them (:mod:`pathgrad.rendering.drawings`
chooses the drawing) with the episode, step and return so far overlaid, and
writes the frames: Pillow for ``.gif``, ffmpeg (from the ``imageio-ffmpeg``
package, or on ``PATH``) for ``.mp4``, fed raw RGBA frames through a pipe.
One figure serves every frame, without matplotlib's animation (which draws
each frame twice): what stays still (axes, ticks, labels, a ground) is drawn
once and only the moving artists over it (blitting), until the limits change
(:class:`~pathgrad.rendering.canvas.Backdrop`). The file is
written under a temporary name in its folder (created where missing) and
renamed, so an unwritable folder fails before anything is drawn and an
interrupted render leaves no partial file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pathgrad.rendering.drawings import scene_for

__all__ = ["Frame", "draw_frames", "record_episodes", "write_animation"]

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
    output = Path(output)
    suffix = output.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"cannot render to '{output.name}': give a .gif or .mp4 file name.")
    if not frames:
        raise ValueError("no frames to draw.")
    ffmpeg = _ffmpeg() if suffix == ".mp4" else None
    try:
        with _temporary_beside(output) as temporary:
            _draw_movie(env, frames, temporary, title, fps, ffmpeg)
    except subprocess.CalledProcessError as error:
        stderr = error.stderr or b""
        if isinstance(stderr, bytes):
            stderr = stderr.decode(errors="replace")
        lines = stderr.strip().splitlines() or [f"exit status {error.returncode}"]
        raise RuntimeError(f"ffmpeg could not write '{output}': {lines[-1]}") from error
    return output


def draw_frames(env: Any, frames: list[Frame], title: str) -> Iterator[np.ndarray]:
    """Each frame drawn: an RGBA image ``[height, width, 4]`` (a view, valid until the next)."""
    scene = scene_for(env, frames)
    episodes = 1 + max(frame.episode for frame in frames)
    for index, frame in enumerate(frames):
        caption = (f"{title}\nepisode {frame.episode + 1}/{episodes}   step {frame.step}   "
                   f"return {frame.episode_return:.2f}")  # fmt: skip
        scene.draw(index, caption)
        yield np.asarray(scene.figure.canvas.buffer_rgba())


def _draw_movie(
    env: Any, frames: list[Frame], path: Path, title: str, fps: int, ffmpeg: str | None
) -> None:
    images = draw_frames(env, frames, title)
    if ffmpeg is None:
        _write_gif(images, path, fps)
    else:
        _write_mp4(images, path, fps, ffmpeg)


def _write_gif(images: Iterator[np.ndarray], path: Path, fps: int) -> None:
    """Pillow's GIF: each frame reduced to 256 colours as it comes (fast octree)."""
    from PIL import Image

    paletted = [
        Image.fromarray(rgba[..., :3]).quantize(256, method=Image.Quantize.FASTOCTREE)
        for rgba in images
    ]
    paletted[0].save(path, format="GIF", save_all=True, append_images=paletted[1:],
                     duration=int(1000 / fps), loop=0)  # fmt: skip


def _write_mp4(images: Iterator[np.ndarray], path: Path, fps: int, ffmpeg: str) -> None:
    """ffmpeg reading raw RGBA frames on its stdin, H.264 in yuv420p (even sizes).

    Raises:
        subprocess.CalledProcessError: If ffmpeg fails (its stderr attached).
    """
    process, broken = None, False
    try:
        for rgba in images:
            height, width = (rgba.shape[0] // 2) * 2, (rgba.shape[1] // 2) * 2
            if process is None:
                command = [ffmpeg, "-f", "rawvideo", "-vcodec", "rawvideo",
                           "-s", f"{width}x{height}", "-pix_fmt", "rgba",
                           "-framerate", str(fps), "-loglevel", "error", "-i", "pipe:",
                           "-vcodec", "h264", "-pix_fmt", "yuv420p", "-y", str(path)]  # fmt: skip
                process = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )  # fmt: skip
            try:
                process.stdin.write(np.ascontiguousarray(rgba[:height, :width]).tobytes())
            except BrokenPipeError:
                broken = True  # ffmpeg stopped reading: its status and last words below
                break
        if process is None:
            return
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
        stderr = process.stderr.read()
        if process.wait() != 0 or broken:
            stderr = stderr or b"ffmpeg stopped reading the frames"
            raise subprocess.CalledProcessError(process.returncode, process.args, None, stderr)
    finally:
        if process is not None and process.poll() is None:  # interrupted: stop ffmpeg
            process.kill()
            process.wait()
        if process is not None:
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
            process.stderr.close()


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
