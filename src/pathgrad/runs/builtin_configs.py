"""The configs that ship with pathgrad (package data), found by name from any folder.

``pathgrad train reacher`` trains ``pathgrad/configs/reacher.yaml``; so does
``pathgrad train configs/reacher.yaml`` where no such file is in the working
directory (the clone's ``configs/`` is this folder), so the documented
commands work after ``pip install`` anywhere. A file that exists always wins.
"""

from __future__ import annotations

from pathlib import Path

import yaml

__all__ = ["CONFIG_FOLDER", "builtin_config_names", "describe_builtin_configs", "resolve_config"]

CONFIG_FOLDER = Path(__file__).parent.parent / "configs"


def builtin_config_names() -> list[str]:
    """Names of the shipped configs (file stems), sorted."""
    return sorted(path.stem for path in CONFIG_FOLDER.glob("*.yaml"))


def resolve_config(argument: str) -> Path | None:
    """The file ``argument`` names: itself when it exists, else a shipped config.

    ``reacher``, ``reacher.yaml`` and ``configs/reacher.yaml`` name the shipped
    ``reacher.yaml`` when no such file is here; ``None`` when nothing matches.
    """
    path = Path(argument)
    if path.is_file():
        return path
    if path.suffix not in ("", ".yaml") or path.parent not in (Path("."), Path("configs")):
        return None
    shipped = CONFIG_FOLDER / f"{path.stem}.yaml"
    return shipped if shipped.is_file() else None


def describe_builtin_configs() -> list[tuple[str, str, str]]:
    """``(name, env, algorithm)`` of every shipped config."""
    rows = []
    for name in builtin_config_names():
        try:
            data = yaml.safe_load((CONFIG_FOLDER / f"{name}.yaml").read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            data = None
        data = data if isinstance(data, dict) else {}
        env = (data.get("env") or {}).get("name", "PointMass")
        algorithm = (data.get("algorithm") or {}).get("name", "apg")
        rows.append((name, str(env), str(algorithm)))
    return rows
