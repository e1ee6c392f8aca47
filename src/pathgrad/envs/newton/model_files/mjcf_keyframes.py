"""An MJCF file's ``<keyframe>``s: the poses its author saved (a robot's ``home`` stance).

``NewtonEnv(keyframe="home")`` (or the key's index) starts every reset from that key's
``qpos`` and ``qvel`` instead of ``qpos0``, as ``mj_resetDataKeyframe`` does; entries the key
leaves out are ``qpos0``'s and zeros, as in MuJoCo.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pathgrad.envs.newton.model_files.mjcf_file import parse_mjcf

__all__ = ["keyframe_state", "read_keyframe"]


def keyframe_state(env: Any, key: str | int) -> tuple[torch.Tensor, torch.Tensor]:
    """``env``'s (a NewtonEnv on an MJCF file) ``joint_q`` and ``joint_qd`` of one world at
    the file's key ``key``.

    Raises:
        ValueError: For a model not read from an MJCF file with MuJoCo's meaning, or a key
            :func:`read_keyframe` rejects.
    """
    if env.mujoco_coordinates is None:
        raise ValueError(f"keyframe {key!r} needs an MJCF model_file read with MuJoCo's "
                         f"meaning (model_file: {env.model_file!r}).")  # fmt: skip
    qpos0, _ = env.mujoco_from_joint_state(env.default_joint_q[None], env.default_joint_qd[None])
    qpos, qvel = read_keyframe(env.model_file, key, qpos0[0].double().numpy(),
                               env.mujoco_coordinates.nv)  # fmt: skip
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos, dtype=torch.float32)[None], torch.tensor(qvel, dtype=torch.float32)[None]
    )
    return joint_q[0].to(env.default_joint_q.device), joint_qd[0].to(env.default_joint_q.device)


def read_keyframe(
    path: str | Path, key: str | int, qpos0: np.ndarray, nv: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``qpos`` and ``qvel`` of the file's key ``key`` (its name, or its index in the
    file), ``qpos0`` and zeros where the key gives none.

    Raises:
        ValueError: Naming the file's keys, for a key it does not have or one whose qpos or
            qvel is not of the model's size.
    """
    keys = [k for frame in parse_mjcf(path).findall("keyframe") for k in frame.findall("key")]
    names = [k.get("name") or f"#{i}" for i, k in enumerate(keys)]
    if isinstance(key, int) or str(key).isdigit():
        chosen = keys[int(key)] if 0 <= int(key) < len(keys) else None
    else:
        chosen = next((k for k in keys if k.get("name") == key), None)
    if chosen is None:
        raise ValueError(f"keyframe {key!r}: model_file '{Path(path).name}' has "
                         f"{', '.join(names) if names else 'no keyframes'}.")  # fmt: skip
    qpos = _numbers(chosen, "qpos", np.asarray(qpos0, dtype=np.float64), key)
    qvel = _numbers(chosen, "qvel", np.zeros(nv), key)
    return qpos, qvel


def _numbers(element: Any, attribute: str, default: np.ndarray, key: str | int) -> np.ndarray:
    text = element.get(attribute)
    if text is None:
        return default
    values = np.array([float(v) for v in text.split()])
    if values.shape != default.shape:
        raise ValueError(f"keyframe {key!r}: its {attribute} has {values.size} numbers, the "
                         f"model's {default.size}.")  # fmt: skip
    return values
