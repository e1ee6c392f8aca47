"""An MJCF file as MuJoCo reads it: ``<include>``s and ``<replicate>``s expanded, one
top-level ``<default>``.

MuJoCo replaces each ``<include file="..."/>`` by the children of the included file's
``<mujoco>`` element (its path relative to the main file's folder, or where nothing is
there, to the including file's), so a robot maker's ``scene.xml`` that includes
``robot.xml`` is one model. Every reader of
a file's joints, options, actuators and tendons here parses it through
:func:`parse_mjcf`, so what it reads is what Newton's importer (which expands
includes too) built.

Asset files (meshes, height fields, textures) are found as MuJoCo finds them: relative to
the main file's folder joined with the model's ``<compiler meshdir>`` (``texturedir``;
``assetdir`` sets both), one value for the whole model, the last ``<compiler>`` that sets it
winning, whichever file it came from; where nothing is there, relative to the folder of the
file that names the asset (:func:`asset_files`; both orders checked against MuJoCo 3).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from pathgrad.envs.newton.model_files.mjcf_flags import apply_disabled_flags
from pathgrad.envs.newton.model_files.mjcf_replicate import expand_replicates

__all__ = ["asset_files", "parse_mjcf", "path_resolver_beside", "resolve_asset_files"]

_ASSET_DIRS = {"mesh": "meshdir", "hfield": "meshdir", "texture": "texturedir"}
# An included file's asset elements carry their file's folder here until
# resolve_asset_files writes their paths (a name no MJCF attribute has)
_OWN_FOLDER = "pathgrad-included-from"


def parse_mjcf(path: str | Path) -> ElementTree.Element:
    """The root ``<mujoco>`` element of ``path`` with its includes expanded (recursively;
    as in MuJoCo, an include's path is relative to the main file's folder) and its
    replicates (:mod:`.mjcf_replicate`), what its disabled flags switch off taken out
    (:mod:`.mjcf_flags`).

    Raises:
        ElementTree.ParseError: For a file (or an included one) that is not XML.
        OSError: For a file that cannot be read.
        ValueError: For an include that does not exist or includes itself again, or a file
            in global coordinates.
    """
    path = Path(path)
    root = ElementTree.parse(path).getroot()
    try:
        _expand(root, path.parent, path.parent, (path.resolve(),))
        expand_replicates(root)
    except ValueError as error:
        raise ValueError(f"model_file '{path}': {error}") from None
    if any(c.get("coordinate") == "global" for c in root.iter("compiler")):
        raise ValueError(
            f"model_file '{path}': <compiler coordinate=\"global\"> places bodies in world "
            "coordinates, which MuJoCo reads no more (since 2.3.3) and Newton reads as local: "
            "convert the file (load and save it in MuJoCo 2.3.2 or older)."
        )
    _merge_top_defaults(root)
    apply_disabled_flags(root)
    return root


def _merge_top_defaults(root: ElementTree.Element) -> None:
    """One top-level ``<default>``, as MuJoCo reads several: each (unnamed or
    ``class="main"``, often one per included file) sets the attributes of the one top class,
    ``main``, later ones overriding earlier ones tag by tag, and their classes are main's.
    (MuJoCo copies a class's parent when it reads the class, so a later top-level default
    does not reach a class read before it; here it does where the class leaves the
    attribute unset: no file seen does that.)"""
    tops = root.findall("default")
    if len(tops) < 2 and all(top.get("class") is None for top in tops):
        return
    merged = ElementTree.Element("default")
    for top in tops:
        for child in top:
            own = merged.find(child.tag) if child.tag != "default" else None
            if own is None:
                merged.append(child)
            else:
                own.attrib.update(child.attrib)
    where = list(root).index(tops[0])
    for top in tops:
        root.remove(top)
    root.insert(where, merged)


def _expand(
    element: ElementTree.Element, folder: Path, own: Path, chain: tuple[Path, ...]
) -> None:
    """Replace ``element``'s includes by the included files' contents, in place (``folder``:
    the main file's, ``own``: the folder of the file that holds ``element``)."""
    kept: list[ElementTree.Element] = []
    for child in list(element):
        if child.tag != "include":
            if own != folder and child.tag in _ASSET_DIRS and child.get("file"):
                child.set(_OWN_FOLDER, str(own))
            _expand(child, folder, own, chain)
            kept.append(child)
            continue
        name = child.get("file", "")
        target = folder / name
        if not target.is_file() and (own / name).is_file():
            target = own / name
        if not target.is_file():
            where = (f"'{target}' does not exist" if own == folder
                     else f"neither '{folder / name}' nor '{own / name}' exists")  # fmt: skip
            raise ValueError(f"<include file='{name}'>: {where}.")
        if target.resolve() in chain:
            raise ValueError(f"<include file='{name}'> includes a file that includes it.")
        included = ElementTree.parse(target).getroot()
        _expand(included, folder, target.parent, (*chain, target.resolve()))
        kept.extend(included)
    element[:] = kept


def asset_files(
    root: ElementTree.Element, path: str | Path
) -> list[tuple[ElementTree.Element, Path]]:
    """Each ``<mesh>``, ``<hfield>`` and ``<texture>`` of ``root`` (``path``'s tree, includes
    expanded) that names a file, with the path MuJoCo reads it from. URIs are left out."""
    folder, directories, strip = Path(path).parent, {"meshdir": "", "texturedir": ""}, False
    for compiler in root.iter("compiler"):  # MuJoCo: later elements override earlier ones
        if "assetdir" in compiler.attrib:
            directories = dict.fromkeys(directories, compiler.get("assetdir", ""))
        for key in directories:
            directories[key] = compiler.get(key, directories[key])
        strip = compiler.get("strippath", str(strip)).strip().lower() in ("true", "1")
    found = []
    for element in root.iter():
        name = element.get("file") if element.tag in _ASSET_DIRS else None
        if not name or "://" in name:
            continue
        name = Path(name.replace("\\", "/")).name if strip else name
        location = folder / directories[_ASSET_DIRS[element.tag]] / name
        own = element.get(_OWN_FOLDER)
        if own is not None and not location.is_file() and (Path(own) / name).is_file():
            location = Path(own) / name  # MuJoCo's second place: beside the naming file
        found.append((element, location))
    return found


def resolve_asset_files(root: ElementTree.Element, path: str | Path) -> None:
    """Write every asset file of ``root`` as the absolute path MuJoCo reads it from, and drop
    the compilers' asset folders, so that an importer reading the tree finds what MuJoCo
    finds (Newton's resolves each included file's assets from that file's own ``<compiler>``)."""
    for element, location in asset_files(root, path):
        element.set("file", str(location.resolve()))
    for element in root.iter():
        element.attrib.pop(_OWN_FOLDER, None)
    for compiler in root.iter("compiler"):
        for key in ("assetdir", "meshdir", "texturedir", "strippath"):
            compiler.attrib.pop(key, None)


def path_resolver_beside(path: str | Path) -> Any:
    """Newton's ``path_resolver`` for ``path``'s tree given as text: its includes and assets
    where the file is."""
    home = str(Path(path).resolve().parent)

    def resolve(base_dir: str | None, file_path: str) -> str:
        return file_path if os.path.isabs(file_path) else os.path.abspath(
            os.path.join(base_dir or home, file_path))  # fmt: skip

    return resolve
