"""Contact constants of a Newton scene: checked, applied to every shape and the ground."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import newton

from pathgrad.envs.base import check_constants

__all__ = ["contact_model_with", "ground_shape_config", "set_contact_materials"]


def contact_model_with(
    defaults: Mapping[str, float],
    overrides: Mapping[str, float] | None,
) -> dict[str, float]:
    """``defaults`` with ``overrides`` applied, each entry checked.

    Raises:
        ValueError: Naming an override that is not a key of ``defaults``, or an
            entry that is negative or NaN.
    """
    entries = list(defaults)
    unknown = sorted(set(overrides or {}) - set(entries))
    if unknown:
        raise ValueError(
            f"contact_model has no entry {unknown[0]!r}; entries: {', '.join(entries)}."
        )
    model = {**defaults, **(overrides or {})}
    check_constants(non_negative=model)
    return model


def set_contact_materials(builder: Any, model: dict[str, float]) -> None:
    """Every shape of ``builder`` gets the contact constants of ``model``."""
    for shape in range(builder.shape_count):
        builder.shape_material_ke[shape] = model["contact_ke"]
        builder.shape_material_kd[shape] = model["contact_kd"]
        builder.shape_material_kf[shape] = model["contact_kf"]
        builder.shape_material_mu[shape] = model["mu"]


def ground_shape_config(model: dict[str, float]) -> Any:
    """The ground's shape configuration with the contact constants of ``model``."""
    return newton.ModelBuilder.ShapeConfig(
        ke=model["contact_ke"], kd=model["contact_kd"], kf=model["contact_kf"], mu=model["mu"]
    )
