"""AnymalVelocity: ANYmal C follows velocity commands on flat ground, legged_gym's task.

The robot is pathgrad's model file ``assets/anymal_c.xml`` (published facts; PD position
actuators of kp 80, kd 2, 80 N m). The task is legged_gym's flat-terrain ANYmal C
(``anymal_c_flat_config.py`` over ``legged_robot_config.py``; facts in
docs/research/legged_gym_facts.md), per policy step of 0.02 s (4 PD steps of 0.005 s):

- **Action** (12): joint targets ``default + 0.5 action`` (the default stance: HAA 0, HFE
  +-0.4, KFE -+0.8), tracked by the PD law, torques clipped to 80 N m.
- **Commands** ``(vx, vy, yaw rate)``: vx, vy ~ U(-1, 1) m/s, yaw rate ~ U(-1.5, 1.5) rad/s,
  drawn again every 4 s; a planar command of norm 0.2 or less is zeroed.
- **Observation** (48): base linear velocity (body frame) x 2, angular velocity (body
  frame) x 0.25, gravity in the body frame, the commands x (2, 2, 0.25), joint angles
  minus the default, joint velocities x 0.05, the previous action.
- **Reward**, each term x 0.02 s, summed and clipped at 0 from below
  (``only_positive_rewards``): tracking of the planar velocity 1.0 x exp(-|error|^2 /
  0.25), of the yaw rate 0.5 x exp(-error^2 / 0.25); vertical velocity -2 x v_z^2;
  roll-pitch rates -0.05 x |w_xy|^2; orientation -5 x |g_xy|^2; torques -2.5e-5 x
  |tau|^2; joint accelerations -2.5e-7 x |dqd / dt|^2; feet air time 2.0 x sum over feet
  touching down of (air time - 0.5 s), while |command_xy| > 0.1; knee collisions -1 per
  knee on the ground (``smooth_collisions``: by depth, so that it has a gradient); action
  rate -0.01 x |a - a_prev|^2; termination 0 x (1 at a step that ends with the base on the
  ground). ``reward_scales`` replaces any of these scales.
- **Metrics**: the tracking errors (m/s, rad/s) and each term's scaled share of the reward
  (``reward_<term>``), as means over the episode's steps (what an evaluation reports is the
  whole episode's), and the command.
- **Termination**: the base touches the ground; **truncation** after 1000 steps (20 s).
- **Reset**: joints at default x U(0.5, 1.5) at rest, the base at 0.6 m, level, with each
  of its 6 velocities ~ U(-0.5, 0.5).

Where it differs from legged_gym: the PD law instead of ANYmal C's actuator network;
Newton's penalty contact (``contact_ke`` 2e4 N/m, ``contact_kd`` 200 N s/m, mu 1, Newton's
friction slope ``contact_kf`` 1000 N s/m) and an armature of 0.3 kg m^2 on every leg joint
(the drives' reflected inertia, which the model file leaves out; a modelling choice, no
published figure): Newton's friction is viscous below its cap, stable per substep only
below 2 m_t / kf, and the bare foot meets m_t = 0.161 kg (0.32 ms at kf 1000, against
substeps of 1.25 ms: the window gradient overflows within 8-16 steps while the rollout
stays finite); with the armature it meets 1.14 kg (2.3 ms;
``benchmarks/friction_slope_gradients.py``). A loaded foot still creeps at ``f_t / kf``
(no static friction), so the stance sinks unless the policy holds it (zero actions: 0.42
m after 3 s, 0.47 m with a grippy floor; with kf 500 and armature 0.1 the legs splay to
0.31 m, with kf 100 to 0.25 m in a second); a foot
touches when its sphere is within 5 mm of the ground, a knee collides when its centre is
within 5 cm, its drive's radius (legged_gym reads contact forces); no observation noise,
friction or mass randomization and no pushes; commands after the first are a fixed low-discrepancy
sequence from the episode's first draw (each uniform over the same ranges), so that steps
use no random numbers. ``command=(vx, vy, yaw_rate)`` holds one command in every row
(``pathgrad eval``/``render`` with ``env.cfg.command``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
from gymnasium.spaces import Box

from pathgrad.envs.base import State
from pathgrad.envs.newton.base import NewtonEnv
from pathgrad.envs.newton.engine.kinematics import quat_conjugate, rotate

__all__ = ["AnymalVelocity"]

LEGS = ("LF", "RF", "LH", "RH")
DEFAULT_STANCE = (0.0, 0.4, -0.8, 0.0, 0.4, -0.8, 0.0, -0.4, 0.8, 0.0, -0.4, 0.8)
COMMAND_RANGE = (1.0, 1.0, 1.5)  # vx, vy (m/s), yaw rate (rad/s): U(-r, r)
COMMAND_STEP = ((math.sqrt(5.0) - 1.0) / 2.0, math.sqrt(2.0) - 1.0, math.sqrt(3.0) - 1.0)
RESAMPLE_STEPS = 200  # 4 s
# Substeps per PD step of 0.005 s: a foot's contact (ke 2e4, kd 200) on the shank's light
# end (about 0.3 kg) is stable below about 3 ms; "auto" bounds it on the shank's centre
# (2.8 kg) and takes 2, where kd 1e3 turned NaN within 20 steps. 4 (1.25 ms) holds.
SUBSTEPS = 4
DRIVE_ARMATURE = 0.3  # kg m^2 on each leg joint (see the module docstring)
FOOT_RADIUS, TOUCH, KNEE_HEIGHT = 0.03, 0.005, 0.05  # m; the knee drives' radius 0.05
SCALES = {"tracking_lin_vel": 1.0, "tracking_ang_vel": 0.5, "lin_vel_z": -2.0,
          "ang_vel_xy": -0.05, "orientation": -5.0, "torques": -2.5e-5, "dof_acc": -2.5e-7,
          "feet_air_time": 2.0, "collision": -1.0, "action_rate": -0.01,
          "termination": 0.0}  # fmt: skip
BASE_BOXES = ((0.0, 0.29), (0.4695, 0.055), (-0.4695, 0.055))  # (x centre, half length)
BASE_HALF = (0.07, 0.09)  # half width, half height of every base box


class AnymalVelocity(NewtonEnv):
    """legged_gym's flat-terrain velocity tracking on ANYmal C (see the module docstring).

    Args:
        num_envs: Number of worlds.
        device: Torch device.
        command: ``(vx, vy, yaw_rate)`` held in every row, or ``None`` (sampled).
        only_positive_rewards: Clip each step's reward at 0 from below (legged_gym's).
        reward_scales: Scales that replace legged_gym's, by term name (``termination``,
            1 at a step that ends on the ground, has 0 there, as on ANYmal C).
        smooth_collisions: Count a knee by how deep its drive (radius 5 cm) has sunk
            below the ground plane's level, as a fraction of its radius (0 at first
            touch, 1 with its centre on the ground), instead of legged_gym's 1 per
            touching knee, whose gradient is 0: a sagging robot then learns to lift.
        **kwargs: NewtonEnv's (``contact_ke``, ``contact_kd``, ``contact_kf``, ``substeps``,
            ``seed``, ...).
    """

    # Newton's limit constants and explicit damping: what its results were measured with
    joint_limits, implicit_damping, contact_softness = "newton", False, "newton"

    default_model_file = "assets/anymal_c.xml"
    observation_dim = 48
    default_max_episode_steps = 1000
    action_scale_targets = 0.5

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", *,
                 command: Sequence[float] | None = None, only_positive_rewards: bool = True,
                 reward_scales: dict[str, float] | None = None,
                 smooth_collisions: bool = False, **kwargs: Any) -> None:  # fmt: skip
        if command is not None and len(command) != 3:
            raise ValueError(f"command must be (vx, vy, yaw_rate), got {command!r}.")
        self.fixed_command = None if command is None else tuple(float(c) for c in command)
        self.only_positive_rewards = bool(only_positive_rewards)
        self.smooth_collisions = bool(smooth_collisions)
        unknown = sorted(set(reward_scales or {}) - set(SCALES))
        if unknown:
            raise ValueError(f"reward_scales has no term {unknown[0]!r}; terms: "
                             f"{', '.join(SCALES)}.")  # fmt: skip
        for name, value in (reward_scales or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):  # fmt: skip
                raise ValueError(f"reward_scales.{name} must be a finite number, got {value!r}.")
        self.reward_scales = {**SCALES, **{k: float(v) for k, v in (reward_scales or {}).items()}}
        kwargs.setdefault("contact_ke", 2.0e4)
        kwargs.setdefault("contact_kd", 200.0)
        kwargs.setdefault("armature", [0.0] * 6 + [DRIVE_ARMATURE] * 12)  # legs only
        kwargs.setdefault("substeps", SUBSTEPS)
        super().__init__(num_envs, device, contacts=True, dt=0.02, **kwargs)
        self.single_action_space = Box(-2.0, 2.0, (12,))  # targets within 1 rad of the stance
        self._feet = [self.body_index(f"{leg}_SHANK") for leg in LEGS]
        self._base = self.body_index("base")
        model = self.simulation.model
        labels = [str(label).rsplit("/", 1)[-1] for label in model.shape_label]
        transforms = model.shape_transform.numpy()
        feet = [labels.index(f"{leg}_FOOT") for leg in LEGS]
        self._foot_offsets = torch.as_tensor(  # each foot sphere's centre in its shank's frame
            transforms[feet, :3], dtype=torch.float32, device=self.device)

    def _constant(self, values: Any) -> torch.Tensor:
        return torch.as_tensor(values, dtype=torch.float32, device=self.device)

    @functools.cached_property
    def _stance(self) -> torch.Tensor:
        return self._constant(DEFAULT_STANCE)

    @functools.cached_property
    def _base_corners(self) -> torch.Tensor:
        """The bottom corners ``[12, 3]`` of the base's boxes, in its frame."""
        return self._constant([[centre + sx * half, sy * BASE_HALF[0], -BASE_HALF[1]]
                               for centre, half in BASE_BOXES
                               for sx in (-1.0, 1.0) for sy in (-1.0, 1.0)])  # fmt: skip

    def joint_forces(self, state: State, action: torch.Tensor) -> torch.Tensor:
        """The PD actuators' torques toward ``default + 0.5 action``."""
        targets = self._stance + self.action_scale_targets * action
        return super().joint_forces(state, targets)

    # State ----------------------------------------------------------------------------

    def _commands(self, draws: torch.Tensor) -> torch.Tensor:
        """Commands of draws in [-1, 1]: the ranges, the planar part zeroed at 0.2 or less."""
        if self.fixed_command is not None:
            return self._constant(self.fixed_command).expand(draws.shape[0], 3)
        command = draws * self._constant(COMMAND_RANGE)
        small = command[:, :2].norm(dim=-1, keepdim=True) <= 0.2
        return torch.cat([torch.where(small, 0.0, command[:, :2]), command[:, 2:]], -1)

    def _sample_initial_state(self, num: int) -> State:
        stance = self._constant(DEFAULT_STANCE)
        joints = stance * self._uniform(0.5, 1.5, num, 12)
        base = self._constant([0.0, 0.0, 0.6, 1.0, 0.0, 0.0, 0.0])  # level, MuJoCo's w x y z
        qpos = torch.cat([base.expand(num, 7), joints], -1)
        qvel = torch.cat([self._uniform(-0.5, 0.5, num, 6), torch.zeros_like(joints)], -1)
        joint_q, joint_qd = self.joint_state_from_mujoco(qpos, qvel)
        return {"joint_q": joint_q, "joint_qd": joint_qd,
                "command_draws": self._uniform(-1.0, 1.0, num, 3),
                "steps": torch.zeros(num, device=self.device),
                "previous_action": torch.zeros(num, 12, device=self.device),
                "air_time": torch.zeros(num, 4, device=self.device),
                "touching": torch.ones(num, 4, device=self.device),
                "episode_sums": torch.zeros(num, len(SCALES) + 2, device=self.device)}  # fmt: skip

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        steps = state["steps"] + 1.0
        draws = state["command_draws"]
        due = (torch.remainder(steps, RESAMPLE_STEPS) == 0)[:, None]
        following = torch.remainder(draws + 1.0 + self._constant(COMMAND_STEP), 2.0) - 1.0
        next_state = super()._dynamics(state, action)
        touching = self._touching(next_state).to(action.dtype)
        air = (state["air_time"] + self.dt) * (1.0 - torch.maximum(touching, state["touching"]))
        return {**next_state, "command_draws": torch.where(due, following, draws),
                "steps": steps, "previous_action": action, "air_time": air,
                "touching": touching}  # fmt: skip

    # Kinematics -----------------------------------------------------------------------

    def _base_motion(self, state: State) -> tuple[torch.Tensor, ...]:
        """The base's quaternion (x y z w), and its linear and angular velocity and gravity
        direction in its own frame."""
        _, qvel = self.mujoco_from_joint_state(state["joint_q"], state["joint_qd"])
        quat = state["joint_q"][:, 3:7]
        inverse = quat_conjugate(quat)
        linear = rotate(inverse, qvel[:, :3])  # MuJoCo's: world frame, the base origin
        gravity = rotate(inverse, self._constant([0.0, 0.0, -1.0]).expand_as(linear))
        return quat, linear, qvel[:, 3:6], gravity  # MuJoCo's angular velocity: body frame

    def _touching(self, state: State) -> torch.Tensor:
        positions, quats = self.body_poses(state)
        offsets = self._foot_offsets.expand(positions.shape[0], 4, 3)
        feet = positions[:, self._feet] + rotate(quats[:, self._feet], offsets)
        return feet[..., 2] < FOOT_RADIUS + TOUCH

    # Task -----------------------------------------------------------------------------

    def _observe(self, state: State) -> torch.Tensor:
        _, linear, angular, gravity = self._base_motion(state)
        scale = self._constant([2.0, 2.0, 0.25])
        return torch.cat([2.0 * linear, 0.25 * angular, gravity,
                          self._commands(state["command_draws"]) * scale,
                          state["joint_q"][:, 7:] - self._stance,
                          0.05 * state["joint_qd"][:, 6:],
                          state["previous_action"]], -1)  # fmt: skip

    def reward_terms(self, state: State, action: torch.Tensor, next_state: State) -> dict:
        """Each of legged_gym's terms (before its scale and dt) at this step."""
        return self._terms_and_errors(state, action, next_state)[0]

    def _terms_and_errors(self, state: State, action: torch.Tensor,
                          next_state: State) -> tuple[dict, torch.Tensor]:  # fmt: skip
        """:meth:`reward_terms`, and ``[N, 2]`` the planar velocity's error (m/s) and the
        yaw rate's (rad/s) against the command (no gradient), from one base motion."""
        _, linear, angular, gravity = self._base_motion(next_state)
        command = self._commands(next_state["command_draws"])
        errors = torch.stack([(command[:, :2] - linear[:, :2]).norm(dim=-1),
                              (command[:, 2] - angular[:, 2]).abs()], -1).detach()  # fmt: skip
        q, qd = state["joint_q"][:, 7:], state["joint_qd"][:, 6:]
        targets = self._stance + self.action_scale_targets * action
        torques = (80.0 * (targets - q) - 2.0 * qd).clamp(-80.0, 80.0)
        landing = next_state["touching"] * (1.0 - state["touching"])
        moving = (command[:, :2].norm(dim=-1) > 0.1).to(action.dtype)
        positions, quats = self.body_poses(next_state)  # once: the knees and the base
        depth = (KNEE_HEIGHT - positions[:, self._feet, 2]) / KNEE_HEIGHT
        knees = (depth.clamp(0.0, 1.0) if self.smooth_collisions
                 else (depth > 0.0).to(action.dtype)).sum(-1)  # fmt: skip
        terms = {
            "tracking_lin_vel": torch.exp(-(command[:, :2] - linear[:, :2]).square().sum(-1)
                                          / 0.25),  # fmt: skip
            "tracking_ang_vel": torch.exp(-(command[:, 2] - angular[:, 2]).square() / 0.25),
            "lin_vel_z": linear[:, 2].square(),
            "ang_vel_xy": angular[:, :2].square().sum(-1),
            "orientation": gravity[:, :2].square().sum(-1),
            "torques": torques.square().sum(-1),
            "dof_acc": ((qd - next_state["joint_qd"][:, 6:]) / self.dt).square().sum(-1),
            "feet_air_time": ((state["air_time"] + self.dt - 0.5) * landing).sum(-1) * moving,
            "collision": knees,
            "action_rate": (action - state["previous_action"]).square().sum(-1),
            "termination": self._on_ground(positions, quats).to(action.dtype),
        }
        return terms, errors

    def _scaled(self, terms: dict) -> dict:
        return {name: self.reward_scales[name] * self.dt * value for name, value in terms.items()}

    def _total(self, scaled: dict) -> torch.Tensor:
        reward = sum(scaled.values())
        return reward.clamp_min(0.0) if self.only_positive_rewards else reward

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        return self._total(self._scaled(self.reward_terms(state, action, next_state)))

    def _dynamics_and_reward(self, state: State, action: torch.Tensor) -> tuple[State, Any]:
        """The step, with the episode's sums of each term's scaled share of the reward and
        of the tracking errors kept in the state (detached) for ``info["metrics"]``
        (legged_gym logs its terms per episode too)."""
        next_state = self._dynamics(state, action)
        terms, errors = self._terms_and_errors(state, action, next_state)
        scaled = self._scaled(terms)
        shares = torch.stack([scaled[name].detach() for name in SCALES], -1)
        sums = state["episode_sums"] + torch.cat([shares, errors], -1)
        return {**next_state, "episode_sums": sums}, self._total(scaled)

    def _terminated(self, state: State) -> torch.Tensor:
        return self._on_ground(*self.body_poses(state))

    def _on_ground(self, positions: torch.Tensor, quats: torch.Tensor) -> torch.Tensor:
        """Rows whose base touches the ground (a corner of its boxes below it), of the body
        poses; no gradient."""
        base, quat = positions[:, self._base].detach(), quats[:, self._base].detach()
        corners = self._base_corners.expand(base.shape[0], -1, -1)
        heights = base[:, None, 2] + rotate(quat[:, None].expand(-1, 12, -1), corners)[..., 2]
        return heights.min(-1).values < 0.0

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        """The tracking errors and each reward term's scaled share, as means over the
        episode's steps so far (an episode's last step reports the whole episode's), and
        the command now."""
        command = self._commands(state["command_draws"])
        means = state["episode_sums"] / state["steps"].clamp_min(1.0)[:, None]
        return {
            "linear_velocity_error": means[:, len(SCALES)],
            "yaw_rate_error": means[:, len(SCALES) + 1],
            "command_vx": command[:, 0],
            "command_vy": command[:, 1],
            "command_yaw_rate": command[:, 2],
            **{f"reward_{name}": means[:, index] for index, name in enumerate(SCALES)},
        }  # fmt: skip
