"""Window gradient norms of AnymalVelocity against the friction slope ``contact_kf``.

From ``reset(seed=0)``, 16 envs take actions of std 0.3 (a fresh policy's spread) for a
window of H steps; the gradient of the window's summed reward (``only_positive_rewards``
off) with respect to the actions is taken per env. Reported per slope: the substep, the
friction term's stable substep (``stiff_terms``), and the median and largest per-env
gradient norm for H = 4, 8, 16, 32, 64 (inf or nan where it overflowed), and the base
height after 3 s of zero actions from the stance at 0.62 m (a foot creeps at ``f_t / kf``:
the legs splay and the base sinks where the slope is low).

Run: ``OMP_NUM_THREADS=1 python benchmarks/friction_slope_gradients.py [--contact-kf 1000
300 100] [--substeps 4] [--armature A]``
"""

from __future__ import annotations

import argparse

import torch

from pathgrad.envs.newton.engine.stability import stiff_terms
from pathgrad.envs.newton.robots.anymal_velocity import DEFAULT_STANCE, AnymalVelocity

WINDOWS = (4, 8, 16, 32, 64)


def window_norms(env: AnymalVelocity, horizon: int) -> torch.Tensor:
    """Per-env norms of d(window reward)/d(actions)."""
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(1)
    actions = (0.3 * torch.randn(horizon, env.num_envs, 12, generator=generator))
    actions.requires_grad_(True)
    total = 0.0
    for step in range(horizon):
        total = total + env.step(actions[step])[1].sum()
    total.backward()
    return actions.grad.norm(dim=(0, 2))


@torch.no_grad()
def stance_height(env: AnymalVelocity, seconds: float = 3.0) -> float:
    """Mean base height after ``seconds`` of zero actions from the stance, level, at rest."""
    qpos = torch.zeros(env.num_envs, 19)
    qpos[:, 2], qpos[:, 3], qpos[:, 7:] = 0.62, 1.0, torch.tensor(DEFAULT_STANCE)
    state = env._sample_initial_state(env.num_envs)
    state["joint_q"], state["joint_qd"] = env.joint_state_from_mujoco(
        qpos, torch.zeros(env.num_envs, 18)
    )
    for _ in range(round(seconds / env.dt)):
        state = env._dynamics(state, torch.zeros(env.num_envs, 12))
    return float(state["joint_q"][:, 2].mean())  # the free joint's z: the base's origin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contact-kf", type=float, nargs="+", default=[1000.0, 300.0, 100.0])
    parser.add_argument("--substeps", type=int, default=4, help="per PD step of 5 ms")
    parser.add_argument("--armature", type=float, help="added to every joint's (kg m^2)")
    args = parser.parse_args()
    columns = " | ".join(f"H={h}" for h in WINDOWS)
    print(f"| kf | substep | friction bound | {columns} | stance after 3 s |")
    print("|---:|---:|---:|" + "---:|" * (len(WINDOWS) + 1))
    for slope in args.contact_kf:
        options = {} if args.armature is None else {"armature": args.armature}
        env = AnymalVelocity(16, seed=0, only_positive_rewards=False, contact_kf=slope,
                             substeps=args.substeps, **options)  # fmt: skip
        bound = min(b for b, text in stiff_terms(env) if "friction slope" in text)
        cells = []
        for horizon in WINDOWS:
            norms = window_norms(env, horizon)
            cells.append(f"{norms.median().item():.3g} / {norms.max().item():.3g}")
        substep = env.simulation.substep_dt
        print(f"| {slope:g} | {substep * 1e3:.3g} ms | {bound * 1e3:.3g} ms | "
              + " | ".join(cells) + f" | {stance_height(env):.3f} m |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
