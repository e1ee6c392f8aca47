"""NewtonAnt: the Ant of Newton's ``nv_ant.xml`` runs forward on the ground (SHAC's Ant task)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from typing import Any

import newton
import newton.examples
import torch

from pathgrad.envs.base import State, check_constants
from pathgrad.envs.newton.base import NewtonEnv
from pathgrad.envs.newton.engine.contact_materials import (
    contact_model_with,
    ground_shape_config,
    set_contact_materials,
)

__all__ = ["ANT_CONTACT_MODEL", "NewtonAnt"]

# Stable at 8 substeps of dt 1/60 (rest height within 16 mm of a 64-substep run); the
# MJCF's own settings go NaN within 5-10 steps at this step size.
ANT_CONTACT_MODEL = {
    "armature": 0.05,  # on every DOF, the free joint's too (kg m^2; kg on its translations)
    "limit_ke": 1.0e3,  # joint-limit stiffness (N m / rad) and damping
    "limit_kd": 10.0,
    "contact_ke": 2.5e3,  # ground contact stiffness (N/m), damping, friction slope
    "contact_kd": 30.0,
    "contact_kf": 20.0,
    "mu": 1.5,
}
# init_qpos of nv_ant.xml (not applied by the importer): hips 0, ankles +-1 rad.
REST_JOINT_ANGLES = (0.0, 1.0, 0.0, -1.0, 0.0, -1.0, 0.0, 1.0)


class NewtonAnt(NewtonEnv):
    """Run along +x with the four-legged Ant of Newton's bundled ``nv_ant.xml``.

    The MJCF is read from the installed ``newton`` package without its floor;
    Newton's ground plane is added instead, with the contact model of
    :data:`ANT_CONTACT_MODEL` (the MJCF's settings diverge at this step size).
    ``contact_model`` overrides entries of it. Collision detection is not
    differentiable: the contact set is fixed within a substep, the contact
    forces are differentiated.

    Action (8): hinge torques, ``gear`` = 15 N m per unit (the MJCF's motors).
    Reward, as SHAC's Ant: forward velocity of the torso + 0.1 up alignment +
    heading alignment (toward +x) + (torso height - ``termination_height``)
    - ``control_cost`` |a|^2. The episode terminates when the torso falls
    below ``termination_height`` = 0.27 m. Observation (37): torso height,
    orientation (xyzw), linear and angular velocity, hinge angles, 0.1 x hinge
    velocities, up and heading alignment, the previous action. Initial state:
    torso at 0.75 m (+-0.05), orientation within +-0.1 rad per axis, hinges at
    ``init_qpos`` +-0.2 rad, velocities +-0.25. Metrics: ``forward_velocity``
    (m/s), ``distance`` (x of the torso, m; episodes start at 0) and
    ``average_forward_velocity`` (distance over the episode's duration, m/s);
    the state keeps the episode's ``time`` (s) for it. 1000 steps of 1/60 s, 8
    Featherstone substeps each.
    """

    # Newton's limit constants and explicit damping: what its results were measured with
    joint_limits, implicit_damping, contact_softness = "newton", False, "newton"

    observation_dim = 37
    action_dim = 8
    default_max_episode_steps = 1000
    # Contacts between the robot's own shapes (not only with the ground).
    self_collisions = True

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        gear: float = 15.0,
        control_cost: float = 0.005,
        termination_height: float = 0.27,
        dt: float = 1.0 / 60.0,
        substeps: int = 8,
        contact_model: Mapping[str, float] | None = None,
        solver: str = "featherstone",
        solver_options: dict[str, Any] | None = None,
        capture: bool = True,
        dtype: str | torch.dtype = "float32",
        max_episode_steps: int | None = None,
        seed: int | None = None,
        armature: float | Sequence[float] | None = None,
        joint_damping: float | Sequence[float] | None = None,
        contact_signal_frame: str | None = None,
    ) -> None:
        check_constants(
            positive={"gear": gear, "termination_height": termination_height},
            non_negative={"control_cost": control_cost},
        )
        self.contact_model = contact_model_with(ANT_CONTACT_MODEL, contact_model)
        self.control_cost = float(control_cost)
        self.termination_height = float(termination_height)
        super().__init__(
            num_envs,
            device,
            dt=dt,
            substeps=substeps,
            action_scale=gear,
            contacts=True,
            solver_options=solver_options,
            solver=solver,
            capture=capture,
            dtype=dtype,
            max_episode_steps=max_episode_steps,
            seed=seed,
            armature=armature,
            joint_damping=joint_damping,
            contact_signal_frame=contact_signal_frame,
        )
        rest = self.default_joint_q.clone()
        rest[:7] = torch.tensor([0.0, 0.0, 0.75, 0.0, 0.0, 0.0, 1.0])
        rest[7:] = torch.tensor(REST_JOINT_ANGLES)
        self.default_joint_q = rest

    # Model ---------------------------------------------------------------------------

    def model_xml(self) -> ElementTree.Element:
        """The element tree of ``nv_ant.xml`` without its floor (subclasses may edit it)."""
        root = ElementTree.parse(newton.examples.get_asset("nv_ant.xml")).getroot()
        worldbody = root.find("worldbody")
        for geom in worldbody.findall("geom"):
            if geom.get("type") == "plane":
                worldbody.remove(geom)
        return root

    def build_world(self, builder: Any) -> None:
        """:meth:`model_xml`; the tuned armature and limits on every DOF."""
        xml = ElementTree.tostring(self.model_xml(), encoding="unicode")
        builder.add_mjcf(xml, parse_visuals=False, enable_self_collisions=self.self_collisions)
        model = self.contact_model
        for dof in range(builder.joint_dof_count):
            builder.joint_armature[dof] = model["armature"]
            builder.joint_limit_ke[dof] = model["limit_ke"]
            builder.joint_limit_kd[dof] = model["limit_kd"]
        set_contact_materials(builder, model)

    def ground_config(self) -> Any:
        return ground_shape_config(self.contact_model)

    # Task ----------------------------------------------------------------------------

    def _sample_initial_state(self, num: int) -> State:
        joint_q = self.default_joint_q.expand(num, -1).clone()
        joint_q[:, 2] += self._uniform(-0.05, 0.05, num)
        joint_q[:, 3:7] = _quaternion_from_rotation_vector(self._uniform(-0.1, 0.1, num, 3))
        joint_q[:, 7:] += self._uniform(-0.2, 0.2, num, 8)
        return {
            "joint_q": joint_q,
            "joint_qd": self._uniform(-0.25, 0.25, num, self.dofs),
            "action": torch.zeros(num, self.action_dim, dtype=self.dtype, device=self.device),
            "time": torch.zeros(num, dtype=self.dtype, device=self.device),
        }

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        return {
            **super()._dynamics(state, action),
            "action": action,
            "time": state["time"].detach() + self.dt,
        }

    def _alignment(self, joint_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Up (z of the torso's z axis) and heading (x of its x axis) alignment."""
        x, y, z, w = joint_q[:, 3:7].unbind(-1)
        up = 1.0 - 2.0 * (x * x + y * y)
        heading = 1.0 - 2.0 * (y * y + z * z)
        return up, heading

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        joint_q, joint_qd = next_state["joint_q"], next_state["joint_qd"]
        up, heading = self._alignment(joint_q)
        return (
            joint_qd[:, 0]
            + 0.1 * up
            + heading
            + (joint_q[:, 2] - self.termination_height)
            - self.control_cost * action.square().sum(-1)
        )

    def _observe(self, state: State) -> torch.Tensor:
        joint_q, joint_qd = state["joint_q"], state["joint_qd"]
        up, heading = self._alignment(joint_q)
        return torch.cat(
            [
                joint_q[:, 2:7],
                joint_qd[:, :6],
                joint_q[:, 7:],
                0.1 * joint_qd[:, 6:],
                up.unsqueeze(-1),
                heading.unsqueeze(-1),
                state["action"],
            ],
            dim=-1,
        )

    def _terminated(self, state: State) -> torch.Tensor:
        height = state["joint_q"][:, 2]
        return (height < self.termination_height) | ~torch.isfinite(height)

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        return {
            "forward_velocity": state["joint_qd"][:, 0].detach(),
            "distance": state["joint_q"][:, 0].detach(),
            "average_forward_velocity": (
                state["joint_q"][:, 0].detach() / state["time"].clamp_min(self.dt)
            ),
        }


def _quaternion_from_rotation_vector(rotation: torch.Tensor) -> torch.Tensor:
    """Unit quaternions ``[N, 4]`` (xyzw) of rotation vectors ``[N, 3]`` (rad)."""
    angle = torch.linalg.vector_norm(rotation, dim=-1, keepdim=True)
    half = 0.5 * angle
    scale = torch.where(angle > 1e-8, torch.sin(half) / angle.clamp_min(1e-8), 0.5)
    return torch.cat([rotation * scale, torch.cos(half)], dim=-1)
