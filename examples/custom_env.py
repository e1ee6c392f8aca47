"""Write, check, register and train your own differentiable env (see docs/custom_env.md).

The env: a mass on a spring that must be held at a random target height.
Run: ``python examples/custom_env.py [--updates N]``.
"""

from __future__ import annotations

import argparse

import torch

import pathgrad
from pathgrad.envs import BatchedDifferentiableEnv
from pathgrad.evaluation import evaluate_episodes
from pathgrad.testing import check_env_gradients


class SpringMass(BatchedDifferentiableEnv):
    """A 1 kg mass on a spring (k = 4 N/m, damping 0.2 1/s), pushed by up to 1 N.

    State: height ``x`` (m), velocity ``v`` (m/s), target ``g`` (m).
    Step (semi-implicit Euler, dt = 0.05 s): ``v' = v + dt (a - k x - c v)``,
    ``x' = x + dt v'``. Reward: ``-(x' - g)^2 - 0.01 a^2``. Observation:
    ``[x, v, g - x]``. Episodes: 100 steps, no termination.
    """

    observation_dim = 3
    action_dim = 1
    default_max_episode_steps = 100

    def __init__(self, num_envs: int, device="cpu", *, stiffness: float = 4.0, **kwargs) -> None:
        if not stiffness >= 0.0:
            raise ValueError(f"stiffness cannot be negative, got {stiffness}.")
        self.stiffness = float(stiffness)
        self.dt = 0.05
        super().__init__(num_envs, device, **kwargs)

    # Everything below is a pure tensor function of a batch of states: no Python
    # loop over envs, no .item(), no in-place writes to state tensors.
    def _sample_initial_state(self, num: int) -> dict[str, torch.Tensor]:
        return {
            "x": self._uniform(-1.0, 1.0, num),
            "v": torch.zeros(num, device=self.device, dtype=self.dtype),
            "goal": self._uniform(-0.5, 0.5, num),
        }

    def _dynamics(self, state, action):
        force = action[:, 0] - self.stiffness * state["x"] - 0.2 * state["v"]
        v = state["v"] + self.dt * force
        return {"x": state["x"] + self.dt * v, "v": v, "goal": state["goal"]}

    def _reward(self, state, action, next_state):
        return -((next_state["x"] - next_state["goal"]) ** 2) - 0.01 * action[:, 0] ** 2

    def _observe(self, state):
        return torch.stack([state["x"], state["v"], state["goal"] - state["x"]], dim=-1)

    def _metrics(self, state):
        error = (state["x"] - state["goal"]).abs().detach()
        return {"final_error": error, "success": (error < 0.05).to(self.dtype)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=150)
    args = parser.parse_args()

    # 1. Check the gradients: float64, one step and a 5-step chain through an
    #    auto-reset, against central finite differences.
    assert check_env_gradients(SpringMass(3, dtype="float64"), 1)
    assert check_env_gradients(SpringMass(3, dtype="float64", max_episode_steps=3), 5)
    print("gradients agree with finite differences")

    # 2. Register it: it can now be built by name (and named in configs).
    pathgrad.register_learning_env("SpringMass", SpringMass, override=True)
    torch.manual_seed(0)
    env = pathgrad.build_learning_env("SpringMass", num_envs=64, device="cpu", seed=0)
    eval_env = pathgrad.build_learning_env("SpringMass", num_envs=32, device="cpu", seed=1)

    # 3. Train it with APG.
    policy = pathgrad.GaussianMLPPolicy.from_spaces(
        env.single_observation_space, env.single_action_space, hidden_sizes=(32, 32)
    )
    algorithm = pathgrad.APG(
        pathgrad.APGCfg(optimizer=pathgrad.OptimizerCfg(learning_rate=3e-3)), policy
    )
    trainer = pathgrad.DifferentiableTrainer(
        pathgrad.DifferentiableTrainerCfg(segment_length=32), env, policy, algorithm
    )

    def evaluate() -> dict[str, float]:
        return evaluate_episodes(policy, eval_env, num_episodes=32, device="cpu", seed=0)

    before = evaluate()
    trainer.train(total_updates=args.updates)
    after = evaluate()
    print(
        f"return {before['eval/avg_reward']:.2f} -> {after['eval/avg_reward']:.2f}, "
        f"final error {before['eval/metrics/final_error']:.3f} -> "
        f"{after['eval/metrics/final_error']:.3f} m"
    )


if __name__ == "__main__":
    main()
