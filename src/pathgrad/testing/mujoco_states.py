"""States of a compiled MuJoCo model (``mujoco.MjModel``) to compare an env against MuJoCo.

Used by the tests that hold pathgrad's MJCF import to MuJoCo's meaning and by
``benchmarks/mjcf_against_mujoco.py``. Neither function imports ``mujoco``: they read
the model's arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["inside_the_ranges", "random_state"]

_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3  # mujoco.mjtJoint


def random_state(model: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``qpos0`` plus normal noise of 0.5 (quaternions renormalised) and a normal ``qvel``."""
    qpos = model.qpos0 + 0.5 * rng.standard_normal(model.nq)
    for joint in range(model.njnt):
        start = model.jnt_qposadr[joint]
        quaternion = {_FREE: slice(start + 3, start + 7), _BALL: slice(start, start + 4)}
        part = quaternion.get(int(model.jnt_type[joint]))
        if part is not None:
            qpos[part] /= np.linalg.norm(qpos[part])
    return qpos, rng.standard_normal(model.nv)


def inside_the_ranges(model: Any, rng: np.random.Generator) -> np.ndarray:
    """MuJoCo's ``qpos0`` with every hinge and slide moved a little, inside its range (where
    no limit acts: MuJoCo's limits are constraints, Newton's penalty springs)."""
    qpos = model.qpos0.copy()
    for joint in range(model.njnt):
        if model.jnt_type[joint] in (_SLIDE, _HINGE):
            start = model.jnt_qposadr[joint]
            low, high = model.jnt_range[joint] if model.jnt_limited[joint] else (-1e9, 1e9)
            margin = 0.05 * min(high - low, 1.0)
            qpos[start] = np.clip(qpos[start] + 0.1 * rng.standard_normal(), low + margin,
                                  high - margin)  # fmt: skip
    return qpos
