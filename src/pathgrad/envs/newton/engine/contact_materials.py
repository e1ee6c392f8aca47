"""Contact constants of a Newton scene: checked, applied to every shape and the ground."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import newton

from pathgrad.envs.base import check_constants

__all__ = [
    "contact_model_with",
    "ground_shape_config",
    "override_contact_constants",
    "set_contact_materials",
]


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


def override_contact_constants(
    builder: Any, ground: Any, contact_ke: float | None, contact_kd: float | None,
    contact_kf: float | None = None,
) -> Any:
    """Every shape of ``builder``, and the ground's configuration ``ground`` (a
    ``ShapeConfig``, or ``None`` for Newton's default), with the stiffness ``contact_ke``
    (N/m), damping ``contact_kd`` (N s/m) and friction slope ``contact_kf`` (N s/m: the
    viscous friction below the Coulomb cap) given; ``None`` keeps a constant as it is.
    Returns the ground's configuration (``ground`` itself where nothing is given).

    Raises:
        ValueError: Naming ``contact_ke`` where it is not positive and finite, or
            ``contact_kd`` or ``contact_kf`` where it is negative or not finite.
    """
    checks = (("contact_ke", contact_ke, "positive", "N/m"),
              ("contact_kd", contact_kd, "non-negative", "N s/m"),
              ("contact_kf", contact_kf, "non-negative", "N s/m"))  # fmt: skip
    for name, value, low, unit in checks:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a {low} number ({unit}), got {value!r}.")
        if not math.isfinite(value) or value < 0 or (value == 0 and low == "positive"):
            raise ValueError(f"{name} must be {low} and finite, got {value}.")
    given = {name: float(value) for name, value in
             (("ke", contact_ke), ("kd", contact_kd), ("kf", contact_kf)) if value is not None}
    if not given:
        return ground
    ground = ground if ground is not None else newton.ModelBuilder.ShapeConfig()
    for name, value in given.items():
        values = getattr(builder, f"shape_material_{name}")
        values[:] = [value] * builder.shape_count
        setattr(ground, name, value)
    return ground
