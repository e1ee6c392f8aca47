"""A still of a rendered rollout: evenly spaced frames of a GIF side by side in one PNG.

Run: ``python benchmarks/rollout_still.py rollout.gif -o still.png [--frames 5]``
(the GIF from ``pathgrad render RUN -o rollout.gif``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image, ImageSequence, UnidentifiedImageError


def still(gif: Path, frames: int) -> Image.Image:
    """``frames`` evenly spaced frames of ``gif`` (first and last included), left to right."""
    if frames < 1:
        raise ValueError(f"--frames must be at least 1, got {frames}.")
    with Image.open(gif) as animation:
        every = [frame.convert("RGB") for frame in ImageSequence.Iterator(animation)]
    count = min(frames, len(every))
    picks = [every[round(i * (len(every) - 1) / max(count - 1, 1))] for i in range(count)]
    width, height = picks[0].size
    strip = Image.new("RGB", (width * count, height), "white")
    for index, frame in enumerate(picks):
        strip.paste(frame, (index * width, 0))
    return strip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gif", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=5)
    args = parser.parse_args()
    try:
        picture = still(args.gif, args.frames)
    except (OSError, UnidentifiedImageError, ValueError) as error:
        parser.exit(2, f"rollout_still.py: error: {args.gif}: {error}\n")
    picture.save(args.output)
    print(args.output)


if __name__ == "__main__":
    main()
