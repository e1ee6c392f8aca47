"""DiffRLAnt beside NewtonAnt: window-gradient growth, throughput, mass-matrix caching, contact.

Sections (all by default, or those named):

- ``--gradients``: norm of d(window return)/d(first action) per env, for windows
  of 1..32 steps from the state after 30 random steps (median and max over envs).
- ``--speed``: env-steps/s of a 16-step window, forward (no graph) and forward +
  backward.
- ``--mass-matrix``: DiffRLAnt with the mass matrix once per step (16) against
  every substep (1): max abs difference of torso height and x velocity over 100
  steps of a fixed action sequence (raw dynamics, no resets), and after one
  step from the same states.
- ``--contact``: 300 steps of sine-wave actions (two amplitudes) at mu and
  sqrt(2) mu (Newton's disc friction limit and the disc around dflex's box
  limit, which bracket dflex's law): torso height, speed and distance.

Run: ``OMP_NUM_THREADS=1 python benchmarks/diffrl_ant_probe.py``.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from pathgrad.envs.newton import DiffRLAnt, NewtonAnt

WINDOWS = (1, 2, 4, 8, 16, 32)


def _make(name: str, num_envs: int, **kwargs) -> NewtonAnt:
    env = {"DiffRLAnt": DiffRLAnt, "NewtonAnt": NewtonAnt}[name](num_envs, seed=0, **kwargs)
    env.reset(seed=0)
    return env


def _random_actions(steps: int, num_envs: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return 2.0 * torch.rand(steps, num_envs, 8, generator=generator) - 1.0


def _sine_actions(steps: int, num_envs: int, dt: float, amplitude: float = 0.8) -> torch.Tensor:
    """A trot-like pattern: hips and ankles at 1.5 Hz, diagonal legs in phase."""
    time_s = torch.arange(steps).unsqueeze(-1) * dt
    phase = torch.tensor([0.0, 0.5, 1.0, 1.5, 0.0, 0.5, 1.0, 1.5]) * math.pi
    phase[4:] += math.pi
    wave = amplitude * torch.sin(2.0 * math.pi * 1.5 * time_s + phase)
    return wave.unsqueeze(1).expand(steps, num_envs, 8)


def _snapshot(env: NewtonAnt) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    state = {key: value.detach().clone() for key, value in env.state.items()}
    return state, env.elapsed_steps.clone(), env.generator.get_state()


def _restore(env: NewtonAnt, snapshot) -> None:
    state, elapsed, generator = snapshot
    env.state = {key: value.clone() for key, value in state.items()}
    env.elapsed_steps = elapsed.clone()
    env.generator.set_state(generator)


def window_gradients(name: str, num_envs: int = 16) -> dict[int, tuple[float, float]]:
    """Median and max over envs of |d(window return)/d(first action)| per window length."""
    env = _make(name, num_envs)
    with torch.no_grad():
        for action in _random_actions(30, num_envs, seed=1):
            env.step(action)
    start = _snapshot(env)
    later = _random_actions(max(WINDOWS), num_envs, seed=2)
    result = {}
    for window in WINDOWS:
        _restore(env, start)
        first = later[0].clone().requires_grad_()
        total = torch.zeros(())
        for step in range(window):
            total = total + env.step(first if step == 0 else later[step])[1].sum()
        (grad,) = torch.autograd.grad(total, first)
        norms = torch.linalg.vector_norm(grad, dim=-1)
        result[window] = (float(norms.median()), float(norms.max()))
    return result


def speed(name: str, num_envs: int = 64, window: int = 16, repeats: int = 3) -> tuple[float, float]:
    """Env-steps/s of forward (no autograd graph) and of forward + backward windows."""
    env = _make(name, num_envs)
    actions = _random_actions(window, num_envs, seed=3)
    start = _snapshot(env)

    def forward() -> None:
        _restore(env, start)
        with torch.no_grad():
            for action in actions:
                env.step(action)

    def forward_backward() -> None:
        _restore(env, start)
        leaf = actions.clone().requires_grad_()
        total = torch.zeros(())
        for action in leaf:
            total = total + env.step(action)[1].sum()
        total.backward()

    rates = []
    for run in (forward, forward_backward):
        run()  # warm-up: graph capture
        began = time.perf_counter()
        for _ in range(repeats):
            run()
        rates.append(repeats * window * num_envs / (time.perf_counter() - began))
    return rates[0], rates[1]


def _trajectory(env: NewtonAnt, actions: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """The states after each step of the raw dynamics (no resets)."""
    states = [{key: value.clone() for key, value in env.state.items()}]
    with torch.no_grad():
        for action in actions:
            states.append(env._dynamics_and_reward(states[-1], action)[0])
    return states[1:]


def _height_and_speed(states: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.stack([state["joint_q"][:, 2] for state in states]),
            torch.stack([state["joint_qd"][:, 0] for state in states]))  # fmt: skip


def mass_matrix_difference(num_envs: int = 16, steps: int = 100) -> None:
    envs = {n: _make("DiffRLAnt", num_envs, mass_matrix_interval=n) for n in (16, 1)}
    actions = _sine_actions(steps, num_envs, envs[1].dt)
    runs = {}
    for interval, env in envs.items():
        began = time.perf_counter()
        runs[interval] = _trajectory(env, actions)
        print(f"  interval {interval:2d}: {steps} steps x {num_envs} envs in "
              f"{time.perf_counter() - began:.2f} s")  # fmt: skip
    (h16, v16), (h1, v1) = _height_and_speed(runs[16]), _height_and_speed(runs[1])
    print(f"  trajectories: max |height difference| {float((h16 - h1).abs().max()):.4f} m "
          f"(heights {float(h1.min()):.3f}..{float(h1.max()):.3f} m), max |x-velocity "
          f"difference| {float((v16 - v1).abs().max()):.4f} m/s (|x velocity| up to "
          f"{float(v1.abs().max()):.3f} m/s)")  # fmt: skip
    for at in (1, 10, 25, 50, 100):
        height = float((h16[at - 1] - h1[at - 1]).abs().max())
        speed_ = float((v16[at - 1] - v1[at - 1]).abs().max())
        print(f"    after {at:3d} steps: height {height:.4f} m, x velocity {speed_:.4f} m/s")
    # One step of each from the same states (those of the interval-1 run): the local error.
    starts = [envs[1].state, *runs[1][:-1]]
    local = _trajectory_from(envs[16], starts, actions)
    lh, lv = _height_and_speed(local)
    for label, got, want, unit in (("height", lh, h1, "m"), ("x velocity", lv, v1, "m/s")):
        error = (got - want).abs().flatten()
        print(f"  one step from the same states, |{label} difference| ({unit}): median "
              f"{float(error.median()):.1e}, 99th percentile {float(error.quantile(0.99)):.1e}, "
              f"max {float(error.max()):.1e}")  # fmt: skip


def _trajectory_from(env: NewtonAnt, starts: list, actions: torch.Tensor) -> list:
    with torch.no_grad():
        return [env._dynamics_and_reward(s, a)[0] for s, a in zip(starts, actions, strict=True)]


def contact_rollouts(num_envs: int = 16, steps: int = 300) -> None:
    print(f"  {'friction limit':>22} {'amplitude':>9} {'height mean':>11} {'min':>6} "
          f"{'<0.27':>6} {'x speed':>8} {'speed':>6} {'distance':>9} {'lateral':>8}")  # fmt: skip
    for amplitude in (0.4, 0.8):
        for label, mu in (("disc mu (Newton)", 0.75), ("disc sqrt2 mu", 0.75 * math.sqrt(2))):
            env = _make("DiffRLAnt", num_envs, contact_model={"mu": mu})
            start = env.state["joint_q"][:, :2].clone()
            states = _trajectory(env, _sine_actions(steps, num_envs, env.dt, amplitude))
            heights, speeds = _height_and_speed(states)
            planar = torch.stack([s["joint_qd"][:, :2].norm(dim=-1) for s in states])
            forward, lateral = (states[-1]["joint_q"][:, :2] - start).unbind(-1)
            low = float((heights < 0.27).float().mean())
            print(f"  {label:>16} {mu:5.3f} {amplitude:9.1f} {float(heights.mean()):11.3f} "
                  f"{float(heights.min()):6.3f} {low:6.1%} {float(speeds.mean()):8.3f} "
                  f"{float(planar.mean()):6.3f} {float(forward.mean()):9.3f} "
                  f"{float(lateral.abs().mean()):8.3f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for section in ("gradients", "speed", "mass-matrix", "contact"):
        parser.add_argument(f"--{section}", action="store_true", help=f"run the {section} section")
    args = parser.parse_args()
    chosen = [name for name in ("gradients", "speed", "mass_matrix", "contact") if vars(args)[name]]
    chosen = chosen or ["gradients", "speed", "mass_matrix", "contact"]
    torch.set_num_threads(1)
    names = ("DiffRLAnt", "NewtonAnt")
    if "gradients" in chosen:
        print("(a) |d window return / d first action| per env, 16 envs after 30 random steps")
        results = {name: window_gradients(name) for name in names}
        header = " ".join(f"{n + ' median':>17} {n + ' max':>14}" for n in names)
        print(f"  {'window':>6} {header}")
        for window in WINDOWS:
            cells = " ".join(f"{results[n][window][0]:17.4g} {results[n][window][1]:14.4g}"
                             for n in names)  # fmt: skip
            print(f"  {window:6d} {cells}")
    if "speed" in chosen:
        print("(b) env-steps/s, 16-step window, 64 envs, one thread")
        print(f"  {'env':>10} {'forward':>10} {'fwd+bwd':>10}")
        for name in names:
            forward, both = speed(name)
            print(f"  {name:>10} {forward:10.0f} {both:10.0f}")
    if "mass_matrix" in chosen:
        print("(c) DiffRLAnt, mass matrix once per step (16) vs every substep (1), sine actions")
        mass_matrix_difference()
    if "contact" in chosen:
        print("(d) DiffRLAnt, 300 steps of sine-wave actions, 16 envs (raw dynamics, no resets)")
        contact_rollouts()


if __name__ == "__main__":
    main()
