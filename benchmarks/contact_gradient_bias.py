"""Bias and variance of first-order window gradients through contact: the Pusher, as Suh et al.

Suh, Simchowitz, Zhang and Tedrake (ICML 2022, "Do Differentiable Simulators Give Better
Policy Gradients?") compare, on a smoothed objective ``F(theta) = E_w f(theta + w)``,
``w ~ N(0, sigma^2 I)``, the first-order estimate (the mean of ``grad f(theta + w_i)``,
what pathgrad backpropagates) with the zeroth-order one (the mean of
``(f(theta + w_i) - f(theta - w_i)) w_i / (2 sigma^2)``, which never differentiates the
dynamics): first-order gradients are biased where ``f`` jumps (contact switching) and of
high variance where it is stiff. This script measures both on Gymnasium's Pusher on Newton.

Set-up (one thread; Newton's float32):

- **A pushing start.** The object at ``qpos[7:9] = (-0.25, -0.1)`` (0.27 m from the goal),
  the arm placed by inverse kinematics (Adam on pathgrad's differentiable forward
  kinematics) with the wrist's bar behind the object, facing the goal.
- **A nominal that pushes.** A joint PD controller (``--kp``, ``--kd``) tracks inverse
  kinematics targets that move the wrist toward the goal at 0.12 m/s; its actions are
  recorded and replayed open loop: over 32 steps the object moves 0.17 m, in contact all
  along.
- **theta** is a constant offset added to the window's actions (7 numbers, what a
  policy's output bias sees); ``f(theta)`` is the window's return (v5's rewards summed over
  ``H`` steps from the pushing start). Keeping ``theta`` 7-dimensional for every ``H``
  keeps the zeroth-order reference as precise at 32 steps as at one.

Per window length ``H``:

- reference: the zeroth-order mean of ``--reference-pairs`` antithetic pairs (unbiased for
  ``grad F``; its relative standard error is printed as ``ref. s.e.``);
- first order: ``--samples`` gradients ``g_i``; ``FO bias`` is ``|mean g - ref| / |ref|``,
  ``noise`` what that number would be from sampling alone if the first-order estimate
  were unbiased (``sqrt(tr Cov g / N + (ref. s.e.)^2)``); ``cos`` is ``cos(mean g, ref)``;
- per-sample relative variances ``tr Cov / |ref|^2`` of both estimators (about the samples
  needed for a signal-to-noise ratio of 1);
- the errors against the reference of ``N``-sample first-order, zeroth-order and
  alpha-order estimates (Suh et al.'s interpolation ``alpha = v_0 / (v_0 + v_1)`` of the
  two by their empirical variances, falling back to zeroth order where the two means
  differ by more than ``--gamma`` standard errors);
- ``FD err``: the unsmoothed gradient ``grad f(0)`` against central differences of step
  ``--eps``.

Run: ``OMP_NUM_THREADS=1 python benchmarks/contact_gradient_bias.py [--windows 1 2 4 8 16 32]
[--sigma 0.1] [--samples 128] [--reference-pairs 1024] [--held-normals] [--contact-ke KE
--contact-kd KD] [--json PATH]``. ``--held-normals`` holds contact normals fixed (pathgrad
before its turning normals); ``--contact-ke``/``--contact-kd`` soften the contact (the
Pusher configs' 250 and 5, with 33 substeps).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from typing import Any

import torch

from pathgrad.envs.newton.engine.kinematics import rotate
from pathgrad.envs.newton.robots.gymnasium_pusher import GymnasiumPusher

ARM_LOWER = (-2.2854, -0.5236, -1.5, -2.3213, -1.5, -1.094, -1.5)  # pusher_v5.xml's ranges
ARM_UPPER = (1.714602, 1.3963, 1.7, 0.0, 1.5, 0.0, 1.5)
OBJECT_QPOS = (-0.25, -0.1)  # obj_slidey, obj_slidex: inside v5's reset region
BAR_OFFSET = 0.075  # m from the object's axis to the wrist frame (radii 0.05 + 0.02, + gap)
BAR_HEIGHT = -0.27  # m: the wrist bar's centre, 5 mm above the object's mid-height
PUSH_SPEED = 0.12  # m/s of the inverse kinematics targets


class PushingNominal:
    """The pushing start and the nominal open-loop actions (see the module docstring)."""

    def __init__(self, steps: int, kp: float, kd: float, **env_kwargs: Any) -> None:
        self.env = GymnasiumPusher(1, **env_kwargs)
        self.env_kwargs = env_kwargs
        self.wrist = self.env.body_index("r_wrist_roll_link")
        self.object = torch.tensor([OBJECT_QPOS])
        self.lower, self.upper = torch.tensor(ARM_LOWER) + 0.05, torch.tensor(ARM_UPPER) - 0.05
        with torch.no_grad():
            positions = self._poses(torch.zeros(1, 7))[0][0]
        object_ = positions[self.env.body_index("object")]
        direction = positions[self.env.body_index("goal")] - object_
        direction[2] = 0.0
        self.direction = direction / direction.norm()
        start = object_ - BAR_OFFSET * self.direction
        start[2] = BAR_HEIGHT
        targets = [self._inverse_kinematics(start, torch.zeros(1, 7), 1500)]
        for step in range(1, steps + 1):
            target = start + self.direction * PUSH_SPEED * self.env.dt * step
            targets.append(self._inverse_kinematics(target, targets[-1], 300))
        self.joint_q, self.joint_qd = self._joint_state(targets[0])
        self.actions = self._tracking_actions(torch.cat(targets), kp, kd)

    def _joint_state(self, arm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        qpos = torch.cat([arm, self.object, torch.zeros(1, 2)], 1)
        return self.env.joint_state_from_mujoco(qpos, torch.zeros_like(qpos))

    def _poses(self, arm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        joint_q, joint_qd = self._joint_state(arm)
        return self.env.body_poses({"joint_q": joint_q, "joint_qd": joint_qd})

    def _inverse_kinematics(self, target: torch.Tensor, arm: torch.Tensor, iterations: int):
        """The arm's 7 angles that put the wrist at ``target``, its prongs toward the goal."""
        arm = arm.clone().requires_grad_()
        optimizer = torch.optim.Adam([arm], lr=0.02)
        for _ in range(iterations):
            positions, quats = self._poses(arm)
            prongs = rotate(quats[0, self.wrist], torch.tensor([1.0, 0.0, 0.0]))
            bar = rotate(quats[0, self.wrist], torch.tensor([0.0, 1.0, 0.0]))
            reach = (positions[0, self.wrist] - target).square().sum()
            facing = (prongs - self.direction).square().sum() + bar[2].square()
            loss = 10 * reach + 0.1 * facing
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                arm.copy_(torch.maximum(torch.minimum(arm, self.upper), self.lower))
        return arm.detach()

    def _tracking_actions(self, targets: torch.Tensor, kp: float, kd: float) -> torch.Tensor:
        env, actions = self.env, []
        state = {"joint_q": self.joint_q, "joint_qd": self.joint_qd}
        with torch.no_grad():
            for step in range(targets.shape[0] - 1):
                qpos, qvel = env.mujoco_from_joint_state(state["joint_q"], state["joint_qd"])
                action = (kp * (targets[step + 1] - qpos[:, :7]) - kd * qvel[:, :7]).clamp(-2, 2)
                actions.append(action[0])
                state = env._dynamics(state, action)
        return torch.stack(actions)


class WindowReturn:
    """``f(theta)``, batched: the return of ``H`` steps from the pushing start under the
    nominal actions plus the offset ``theta`` (one row per world)."""

    def __init__(self, nominal: PushingNominal, batch: int) -> None:
        self.env = GymnasiumPusher(batch, **nominal.env_kwargs)
        self.nominal, self.batch = nominal, batch

    def __call__(self, theta: torch.Tensor, steps: int) -> torch.Tensor:
        env, total = self.env, theta.new_zeros(theta.shape[0])
        rows = theta.shape[0]
        theta = torch.cat([theta, theta.new_zeros(self.batch - rows, 7)])
        env.state = {"joint_q": self.nominal.joint_q.expand(self.batch, -1).clone(),
                     "joint_qd": self.nominal.joint_qd.expand(self.batch, -1).clone()}  # fmt: skip
        env.elapsed_steps = torch.zeros(self.batch, dtype=torch.long)
        for step in range(steps):
            _, reward, *_ = env.step(self.nominal.actions[step] + theta)
            total = total + reward[:rows]
        env.detach_state()
        return total

    def values(self, theta: torch.Tensor, steps: int) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([self(chunk, steps) for chunk in theta.split(self.batch)])

    def gradients(self, theta: torch.Tensor, steps: int) -> torch.Tensor:
        rows = []
        for chunk in theta.split(self.batch):
            chunk = chunk.clone().requires_grad_()
            (grad,) = torch.autograd.grad(self(chunk, steps).sum(), chunk)
            rows.append(grad)
        return torch.cat(rows)


def zeroth_order(f: WindowReturn, noise: torch.Tensor, sigma: float, steps: int) -> torch.Tensor:
    """Per-pair antithetic zeroth-order estimates ``[pairs, 7]``."""
    values = f.values(torch.cat([noise, -noise]), steps)
    plus, minus = values.split(noise.shape[0])
    return (plus - minus)[:, None] * noise / (2 * sigma**2)


def trace_covariance(samples: torch.Tensor) -> float:
    return float(samples.var(dim=0).sum())


def alpha_order(first: torch.Tensor, zeroth: torch.Tensor, gamma: float) -> torch.Tensor:
    """Suh et al.'s alpha-order mean of two per-sample sets, with their robustness check."""
    v1, v0 = trace_covariance(first) / len(first), trace_covariance(zeroth) / len(zeroth)
    mean1, mean0 = first.mean(0), zeroth.mean(0)
    if float((mean1 - mean0).norm()) > gamma * math.sqrt(v1 + v0):
        return mean0  # the first-order mean is off by more than noise explains: biased
    alpha = v0 / (v1 + v0) if v1 + v0 > 0 else 1.0
    return alpha * mean1 + (1 - alpha) * mean0


def finite_difference_error(f: WindowReturn, steps: int, eps: float) -> float:
    """``|grad f(0) - central differences| / |central differences|``."""
    basis = torch.eye(7)
    values = f.values(torch.cat([eps * basis, -eps * basis]), steps)
    numeric = (values[:7] - values[7:]) / (2 * eps)
    analytic = f.gradients(torch.zeros(1, 7), steps)[0]
    return float((analytic - numeric).norm() / numeric.norm())


def measure(f: WindowReturn, steps: int, args: argparse.Namespace) -> dict[str, float]:
    generator = torch.Generator().manual_seed(steps)
    sigma, samples = args.sigma, args.samples
    reference_noise = sigma * torch.randn(args.reference_pairs, 7, generator=generator)
    reference_samples = zeroth_order(f, reference_noise, sigma, steps)
    reference = reference_samples.mean(0)
    scale = float(reference.norm())
    reference_se = math.sqrt(trace_covariance(reference_samples) / args.reference_pairs) / scale
    first = f.gradients(sigma * torch.randn(samples, 7, generator=generator), steps)
    zeroth = zeroth_order(f, sigma * torch.randn(samples, 7, generator=generator), sigma, steps)
    first_mean = first.mean(0)

    def error(estimate: torch.Tensor) -> float:
        return float((estimate - reference).norm()) / scale

    return {
        "H": steps,
        "|ref|": scale,
        "ref. s.e.": reference_se,
        "FO bias": error(first_mean),
        "noise": math.sqrt(trace_covariance(first) / samples / scale**2 + reference_se**2),
        "cos": float(torch.nn.functional.cosine_similarity(first_mean, reference, dim=0)),
        "FO rel. var.": trace_covariance(first) / scale**2,
        "ZO rel. var.": trace_covariance(reference_samples) / scale**2,
        "ZO err": error(zeroth.mean(0)),
        "AO err": error(alpha_order(first, zeroth, args.gamma)),
        "FD err": finite_difference_error(f, steps, args.eps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--sigma", type=float, default=0.1, help="smoothing of theta")
    parser.add_argument("--samples", type=int, default=128, help="N of each estimator")
    parser.add_argument("--reference-pairs", type=int, default=1024)
    parser.add_argument("--gamma", type=float, default=3.0, help="alpha-order's check")
    parser.add_argument("--eps", type=float, default=1e-3, help="central differences' step")
    parser.add_argument("--kp", type=float, default=10.0)
    parser.add_argument("--kd", type=float, default=1.0)
    parser.add_argument("--held-normals", action="store_true")
    parser.add_argument("--contact-ke", type=float, help="GymnasiumPusher's contact_ke")
    parser.add_argument("--contact-kd", type=float, help="GymnasiumPusher's contact_kd")
    parser.add_argument("--substeps", help="GymnasiumPusher's substeps (a number or auto)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the file's light goal body; the substeps chosen
    if args.held_normals:
        from pathgrad.envs.newton.engine.turning_normals import TurningNormals

        TurningNormals.for_model = classmethod(lambda *_: None)
    torch.set_num_threads(1)
    started = time.time()
    env_kwargs = {"contact_ke": args.contact_ke, "contact_kd": args.contact_kd}
    if args.substeps is not None:
        env_kwargs["substeps"] = args.substeps if args.substeps == "auto" else int(args.substeps)
    nominal = PushingNominal(max(args.windows), args.kp, args.kd, **env_kwargs)
    f = WindowReturn(nominal, args.samples)
    rows = []
    for steps in args.windows:
        rows.append(measure(f, steps, args))
        print(json.dumps({k: round(v, 4) for k, v in rows[-1].items()}), flush=True)
    model = nominal.env.simulation.model
    print(f"\nGymnasiumPusher, sigma {args.sigma}, N {args.samples}, reference pairs "
          f"{args.reference_pairs}, normals {'held' if args.held_normals else 'turning'}, "
          f"contact ke {model.shape_material_ke.numpy().max():g}, kd "
          f"{model.shape_material_kd.numpy().max():g}, substeps "
          f"{nominal.env.simulation_options['substeps']}, "
          f"one thread, {time.time() - started:.0f} s\n")  # fmt: skip
    print("| " + " | ".join(rows[0]) + " |\n|" + "---:|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(f"{v:.3g}" for v in row.values()) + " |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
