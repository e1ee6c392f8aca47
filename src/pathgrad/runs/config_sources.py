"""Where a run config's values come from: YAML files, defaults and ``key=value`` overrides.

The layers are merged in order (the defaults of every section, the file, the
overrides) by OmegaConf, so an override such as ``algorithm.cfg.gamma=0.95``
changes one value of the section it names and keeps the rest, whether a file
is given or not. ``${...}`` interpolations are resolved. When a layer sets one
budget (``trainer.total_updates`` or ``trainer.total_timesteps``) and not the
other, the other is cleared: the last budget given wins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = ["ConfigError", "merge_layers", "model_files_beside", "read_yaml"]

BUDGETS = ("total_updates", "total_timesteps")


class ConfigError(ValueError):
    """A config problem; the message names the key path and what is expected."""


class _Loader(yaml.SafeLoader):
    """YAML loader that also reads ``1e-3`` (no dot) as a float and refuses a key given twice.

    PyYAML keeps the last of two equal keys, so a second ``trainer:`` section
    would drop the first one's settings without a word.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may repeat keys
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                line = first_lines.get(key)
            except TypeError:  # an unhashable key: the constructor names it
                continue
            if line is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{key}' is given twice (first at line {line + 1})",
                    key_node.start_mark,
                )  # fmt: skip
            first_lines[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.VERBOSE,
    ),
    list("-+0123456789."),
)


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read config file '{path}': {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"config file '{path}' is not UTF-8 text (byte {error.start}: {error.reason})."
        ) from error
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        kind = (
            "YAML error"
            if isinstance(error, yaml.constructor.ConstructorError)
            else "YAML syntax error"
        )
        raise ConfigError(f"{kind} in '{path}'{where}: {problem}") from error
    if data is None:  # an empty or comment-only file would silently train the default task
        advice = (
            "a run's config.yaml is written by `pathgrad train`: restore it from a copy (each "
            "checkpoint holds the config it was trained with, under its 'config' key)"
            if (path.parent / "checkpoints").is_dir()
            else "give it at least one section (env, algorithm, trainer, ...), or leave the "
            "file out to train the default task"
        )
        raise ConfigError(
            f"config file '{path}' holds no sections (it is empty or only comments); {advice}."
        )
    if not isinstance(data, dict):
        raise ConfigError(f"'{path}' must hold a mapping of sections, got {type(data).__name__}.")
    cycle = _self_containing(data, [], {})
    if cycle is not None:
        raise ConfigError(
            f"YAML error in '{path}': the value of '{cycle}' contains itself (an anchor '&' "
            "used by an alias '*' inside its own value)."
        )
    return data


def _self_containing(value: Any, keys: list[str], open_values: dict[int, str]) -> str | None:
    """The dotted key of the first mapping or list that contains itself; ``None`` if none."""
    if not isinstance(value, (dict, list)):
        return None
    if id(value) in open_values:
        return open_values[id(value)]
    open_values[id(value)] = ".".join(keys) or "(the document)"
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        found = _self_containing(item, [*keys, str(key)], open_values)
        if found is not None:
            return found
    del open_values[id(value)]
    return None


def merge_layers(
    defaults: dict[str, dict[str, Any]], data: dict[str, Any], overrides: Sequence[str]
) -> dict[str, Any]:
    """The config document: ``defaults`` under the file's ``data`` under the ``overrides``.

    ``defaults`` fill the keys a file section leaves out, one level deep (a
    section value the file gives, such as ``algorithm.cfg``, is taken whole, as
    the file means it); overrides then change single values at any depth.

    Raises:
        ConfigError: For a malformed override or a failed interpolation.
    """
    _refuse_joined_key(data, "the config file")
    for override in overrides:
        _refuse_joined_key(_parse_override(override), f"the override '{override}'")
    data = _clearing_the_other_budget(data)
    document = dict(data)
    for section, values in defaults.items():
        given = document.get(section, {})
        if isinstance(given, dict):
            document[section] = {**values, **given}
    merged: DictConfig = OmegaConf.create(document)
    for override in overrides:
        key, _, text = override.partition("=")
        if key.strip() in defaults and not isinstance(_parse_override(override)[key.strip()], dict):
            raise ConfigError(  # a later override into it would make it a mapping again
                f"{key.strip()}: a section takes keys ({key.strip()}.KEY=VALUE), not the value "
                f"'{text}'."
            )
        merged = _apply_override(merged, override)
    try:
        result = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as error:
        raise ConfigError(f"cannot resolve an interpolation: {_first_line(error)}") from error
    return result  # type: ignore[return-value]


def _refuse_joined_key(value: Any, source: str, path: str = "") -> None:
    """Raise where YAML read ``{key:value}`` (no space after the colon) as one key.

    In a flow mapping ``{name:Pendulum}`` is the key ``'name:Pendulum'`` with no
    value, which would otherwise surface as an unknown key.
    """
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        if isinstance(key, str) and item is None and re.fullmatch(r"[^:\s]+:[^:\s].*", key):
            name, _, text = key.partition(":")
            raise ConfigError(
                f"{path}{key}: YAML reads '{key}' in {source} as one key without a value; "
                f"write '{name}: {text}' (a space after the colon)."
            )
        _refuse_joined_key(item, source, f"{path}{key}.")


def _clearing_the_other_budget(layer: dict[str, Any]) -> dict[str, Any]:
    """``layer`` where a trainer section that sets one budget also clears the other."""
    trainer = layer.get("trainer")
    if not isinstance(trainer, dict):
        return layer
    given = [key for key in BUDGETS if trainer.get(key) is not None]
    if len(given) != 1:
        return layer
    other = BUDGETS[1 - BUDGETS.index(given[0])]
    return {**layer, "trainer": {other: None, **trainer}}


def _parse_override(override: str) -> dict[str, Any]:
    key, separator, text = override.partition("=")
    if not separator or not key or any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"override '{override}' must look like section.key=value.")
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist([override]))  # type: ignore[return-value]
    except (OmegaConfBaseException, yaml.YAMLError) as error:
        raise ConfigError(
            f"{key}: cannot parse the value '{text}' of the override: {_first_line(error)}"
        ) from error


def _apply_override(merged: DictConfig, override: str) -> DictConfig:
    """``merged`` with one ``key=value`` override applied (see ``merge_layers``)."""
    parsed = _parse_override(override)
    key = override.partition("=")[0].strip()
    try:
        if _mapping_value(key, parsed):  # set means set: the old mapping's keys go
            OmegaConf.update(merged, key, {}, merge=False, force_add=True)
        layer = _clearing_the_other_budget(parsed)
        return OmegaConf.merge(merged, OmegaConf.create(layer))  # type: ignore[return-value]
    except (OmegaConfBaseException, TypeError, ValueError) as error:  # e.g. a key under a list
        raise ConfigError(
            f"{key}: cannot apply the override '{override}' (each part of the key but the"
            f" last must name a mapping): {_first_line(error)}"
        ) from error


def _mapping_value(dotted_key: str, layer: dict[str, Any]) -> bool:
    """Whether the one-override ``layer`` sets ``dotted_key`` to a mapping."""
    value: Any = layer
    for key in dotted_key.split("."):
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return isinstance(value, dict)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def model_files_beside(data: dict[str, Any], folder: Path) -> list[tuple[str, str]]:
    """A relative ``model_file`` of a config file that lies beside it names that file.

    (Where the working directory has no such file; the run's ``config.yaml``
    then records the absolute path, so ``resume`` finds it from anywhere.)
    Returns the ``(section, model_file)`` found in neither place.
    """
    env = data.get("env") if isinstance(data, dict) else None
    missing = []
    for section in ("cfg", "train_cfg"):
        cfg = env.get(section) if isinstance(env, dict) else None
        value = cfg.get("model_file") if isinstance(cfg, dict) else None
        if isinstance(value, str) and not Path(value).is_absolute() and not Path(value).exists():
            beside = folder / value
            if beside.is_file():
                cfg["model_file"] = str(beside.resolve())
            else:
                missing.append((section, value))
    return missing
