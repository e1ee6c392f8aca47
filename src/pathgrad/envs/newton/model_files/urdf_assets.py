"""A URDF's mesh files found where its author's tools find them.

A URDF names a mesh by a path relative to its own folder or by a ``package://NAME/rest``
URI. Newton's importer resolves the URI through a folder named ``NAME`` above the URDF
(a ROS package's layout; or ``resolve-robotics-uri-py`` where installed) and otherwise
leaves the shape out with a warning, so a robot written for PyBullet, whose
``package://meshes/...`` means the ``meshes`` folder beside the file, loaded with no
geometry. :func:`urdf_with_resolved_meshes` writes every mesh as the file it finds, in
that order: the ROS layout first, then the folder beside the URDF.
"""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

__all__ = ["missing_collision_meshes", "package_mesh_file", "urdf_with_resolved_meshes"]

PACKAGE = "package://"


def package_mesh_file(uri: str, urdf: Path) -> Path | None:
    """The file of a ``package://NAME/rest`` URI of the URDF ``urdf``, or None where neither
    a folder ``NAME`` above the URDF (ROS's layout, Newton's rule) nor one beside it
    (PyBullet's reading) holds ``rest``."""
    name, _, rest = uri[len(PACKAGE):].partition("/")
    folder = urdf.resolve().parent
    for ancestor in (folder, *folder.parents):
        if ancestor.name == name and (ancestor / rest).is_file():
            return ancestor / rest
    beside = folder / name / rest
    return beside if beside.is_file() else None


def _meshes(root: ElementTree.Element) -> list[tuple[ElementTree.Element, bool]]:
    """Every ``<mesh>`` of the file with whether it is a collision mesh."""
    found = [(mesh, True) for part in root.iter("collision") for mesh in part.iter("mesh")]
    found += [(mesh, False) for part in root.iter("visual") for mesh in part.iter("mesh")]
    return found


def missing_collision_meshes(root: ElementTree.Element, urdf: Path) -> list[str]:
    """The ``package://`` collision meshes of the URDF that no rule finds (a body without
    its collision shape: no contact)."""
    return [mesh.get("filename", "") for mesh, collision in _meshes(root)
            if collision and mesh.get("filename", "").startswith(PACKAGE)
            and package_mesh_file(mesh.get("filename", ""), urdf) is None]  # fmt: skip


def urdf_with_resolved_meshes(urdf: Path) -> str | None:
    """The URDF's text with every mesh written as an absolute path (the ``package://`` ones
    that :func:`package_mesh_file` finds, and relative paths from the URDF's folder), or
    None where it names no ``package://`` mesh (Newton then reads the file itself)."""
    root = ElementTree.parse(urdf).getroot()
    meshes = _meshes(root)
    if not any(mesh.get("filename", "").startswith(PACKAGE) for mesh, _ in meshes):
        return None
    folder = urdf.resolve().parent
    for mesh, _ in meshes:
        name = mesh.get("filename", "")
        if name.startswith(PACKAGE):
            found = package_mesh_file(name, urdf)
            if found is not None:
                mesh.set("filename", str(found))
        elif name and "://" not in name and not Path(name).is_absolute():
            mesh.set("filename", str(folder / name))
    return ElementTree.tostring(root, encoding="unicode")
