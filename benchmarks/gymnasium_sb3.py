"""Stable-Baselines3 PPO and SAC on Gymnasium's MuJoCo tasks on Newton, at the rl-zoo's settings.

The model-free baselines of docs/benchmarks.md "Gymnasium's MuJoCo tasks on Newton": each
trains through ``pathgrad.envs.to_sb3`` on exactly the pathgrad env the first-order methods
differentiate (``GymnasiumHopper`` ...: Gymnasium's file, v5's task, Newton's dynamics) and is
evaluated as ``pathgrad train`` evaluates (``benchmarks/baselines.py``'s ``_evaluate``: 16
episodes, deterministic actions, separate envs, a fixed seed; observations through the run's
``VecNormalize`` statistics where the settings normalize). The curve (env steps, training
seconds without evaluation, evaluation return) is rewritten after every evaluation, so a run
stopped early keeps what it measured.

Settings (facts of rl-baselines3-zoo's ``hyperparams/ppo.yml`` and ``sac.yml`` for the
MuJoCo tasks): PPO on Hopper: one env, normalized observations and rewards, n_steps 512,
batch 32, 5 epochs, gamma 0.999, GAE 0.99, lr 9.80828e-5, clip 0.2, entropy 0.00229519, value
0.835671, grad norm 0.7, ReLU [256, 256] with log_std_init -2 and no orthogonal init; PPO on
Walker2d: one env, normalized, n_steps 512, batch 32, 20 epochs, gamma 0.99, GAE 0.95, lr
5.05041e-5, clip 0.1, entropy 0.000585045, value 0.871923, grad norm 1; other tasks: SB3's
defaults (CleanRL's MuJoCo PPO) with normalization. SAC: SB3's defaults with 10,000 random
steps first (the zoo's ``learning_starts`` for the MuJoCo tasks).

Run: ``python benchmarks/gymnasium_sb3.py --task GymnasiumHopper --method ppo --seed 0
--steps 1000000 --out DIR [--env-cfg joint_limits=mujoco]`` (one thread; writes
``DIR/<task>_<method>_s<seed>.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baselines import _evaluate_metrics  # noqa: E402

PPO_SETTINGS = {
    "GymnasiumHopper": dict(
        n_steps=512, batch_size=32, n_epochs=5, gamma=0.999, gae_lambda=0.99,
        learning_rate=9.80828e-5, clip_range=0.2, ent_coef=0.00229519, vf_coef=0.835671,
        max_grad_norm=0.7, policy_kwargs="hopper",
    ),
    "GymnasiumWalker2d": dict(
        n_steps=512, batch_size=32, n_epochs=20, gamma=0.99, gae_lambda=0.95,
        learning_rate=5.05041e-5, clip_range=0.1, ent_coef=0.000585045, vf_coef=0.871923,
        max_grad_norm=1.0,
    ),
}  # fmt: skip
SAC_LEARNING_STARTS = 10_000


class NormalizedPolicy:
    """An SB3 model (and its ``VecNormalize`` statistics) behind ``evaluate_episodes``."""

    def __init__(self, model, normalizer=None) -> None:
        self.model, self.normalizer, self.training = model, normalizer, False

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def get_action(self, obs, deterministic: bool = True):
        import torch

        observation = obs.cpu().numpy()
        if self.normalizer is not None:
            observation = self.normalizer.normalize_obs(observation)
        action, _ = self.model.predict(observation, deterministic=deterministic)
        return torch.as_tensor(action, dtype=obs.dtype)


def build_model(task: str, method: str, seed: int, env_cfg: dict | None = None):
    """The SB3 model on a one-row pathgrad env, and its ``VecNormalize`` (or None)."""
    import torch
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.vec_env import VecNormalize

    import pathgrad

    env = pathgrad.envs.to_sb3(
        pathgrad.build_learning_env(task, num_envs=1, device="cpu", seed=seed, **(env_cfg or {}))
    )
    if method == "sac":
        model = SAC("MlpPolicy", env, learning_starts=SAC_LEARNING_STARTS, seed=seed,
                    device="cpu")  # fmt: skip
        return model, None
    settings = dict(PPO_SETTINGS.get(task, {}))
    if settings.get("policy_kwargs") == "hopper":
        settings["policy_kwargs"] = dict(
            log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
            net_arch=dict(pi=[256, 256], vf=[256, 256]),
        )  # fmt: skip
    normalizer = VecNormalize(env, norm_obs=True, norm_reward=True)
    model = PPO("MlpPolicy", normalizer, seed=seed, device="cpu", **settings)
    return model, normalizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="a registered Gymnasium task on Newton")
    parser.add_argument("--method", choices=["ppo", "sac"], required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=50_000, metavar="STEPS")
    parser.add_argument("--hours", type=float, default=None, help="stop after this wall time")
    parser.add_argument("--out", type=Path, default=Path("gymnasium_sb3"))
    parser.add_argument("--env-cfg", nargs="*", default=[], metavar="KEY=VALUE",
                        help="env options, as env.cfg in a config")  # fmt: skip
    args = parser.parse_args()
    from pathgrad.runs.config_sources import merge_layers

    env_cfg = merge_layers({}, {}, args.env_cfg)  # key=value as a config's overrides read them

    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.task}_{args.method}_s{args.seed}.json"
    model, normalizer = build_model(args.task, args.method, args.seed, env_cfg)
    record = {"task": args.task, "method": args.method, "seed": args.seed, "label": "",
              "env_cfg": env_cfg,
              "settings": "rl-zoo", "curve": [], "wall_time": 0.0}  # fmt: skip
    start = time.time()

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval, self.paused = args.eval_every, 0.0

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                began = time.time()
                seconds = began - start - self.paused  # training time, evaluations left out
                metrics = _evaluate_metrics(NormalizedPolicy(model, normalizer), args.task,
                                            args.seed, env_cfg=env_cfg)  # fmt: skip
                value = float(metrics["eval/avg_reward"])
                self.paused += time.time() - began
                record["curve"].append([self.num_timesteps, seconds, value])
                others = {key.removeprefix("eval/"): float(number)
                          for key, number in metrics.items()
                          if key not in ("eval/avg_reward", "eval/avg_length")
                          and isinstance(number, (int, float))}  # fmt: skip
                record.setdefault("metrics", []).append([self.num_timesteps, others])
                record["wall_time"] = time.time() - start
                path.write_text(json.dumps(record))
                shown = " ".join(f"{key} {number:.3g}" for key, number in others.items())
                print(f"{self.num_timesteps:>9} steps {seconds:7.0f} s  eval {value:8.1f} {shown}",
                      flush=True)  # fmt: skip
                self.next_eval += args.eval_every
            out_of_time = args.hours is not None and time.time() - start > args.hours * 3600
            return not out_of_time

    model.learn(total_timesteps=args.steps, callback=Evaluate())
    record["wall_time"] = time.time() - start
    path.write_text(json.dumps(record))


if __name__ == "__main__":
    main()
