"""An MJCF file as MuJoCo reads it: ``<include>``s expanded.

MuJoCo replaces each ``<include file="..."/>`` by the children of the included file's
``<mujoco>`` element (its path relative to the main file's folder), so a
robot maker's ``scene.xml`` that includes ``robot.xml`` is one model. Every reader of
a file's joints, options, actuators and tendons here parses it through
:func:`parse_mjcf`, so what it reads is what Newton's importer (which expands
includes too) built.
"""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

__all__ = ["parse_mjcf"]


def parse_mjcf(path: str | Path) -> ElementTree.Element:
    """The root ``<mujoco>`` element of ``path`` with its includes expanded (recursively;
    as in MuJoCo, an include's path is relative to the main file's folder).

    Raises:
        ElementTree.ParseError: For a file (or an included one) that is not XML.
        OSError: For a file that cannot be read.
        ValueError: For an include that does not exist or includes itself again.
    """
    path = Path(path)
    root = ElementTree.parse(path).getroot()
    try:
        _expand(root, path.parent, (path.resolve(),))
    except ValueError as error:
        raise ValueError(f"model_file '{path}': {error}") from None
    return root


def _expand(element: ElementTree.Element, folder: Path, chain: tuple[Path, ...]) -> None:
    """Replace ``element``'s includes by the included files' contents, in place."""
    kept: list[ElementTree.Element] = []
    for child in list(element):
        if child.tag != "include":
            _expand(child, folder, chain)
            kept.append(child)
            continue
        name = child.get("file", "")
        target = folder / name
        if not target.is_file():
            raise ValueError(f"<include file='{name}'>: '{target}' does not exist.")
        if target.resolve() in chain:
            raise ValueError(f"<include file='{name}'> includes a file that includes it.")
        included = ElementTree.parse(target).getroot()
        _expand(included, folder, (*chain, target.resolve()))
        kept.extend(included)
    element[:] = kept
