"""Step a batched pathgrad env and one Gymnasium env per row with the same actions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch


def assert_matches_gymnasium(env, env_id: str, state_keys: list[str], actions: np.ndarray) -> int:
    """Compare observations (as float32), rewards and flags step for step, bit for bit.

    ``actions`` is ``[T, N, A]`` float32, what Gymnasium receives. Each row is
    compared until its Gymnasium episode ends. Returns the number of steps compared.
    """
    num_envs = env.num_envs
    references = [gym.make(env_id) for _ in range(num_envs)]
    for row, reference in enumerate(references):
        reference.reset(seed=row)
        reference.unwrapped.state = np.array([env.state[key][row].item() for key in state_keys])
    finished = [False] * num_envs
    compared = 0
    for step, step_actions in enumerate(actions):
        _, reward, terminated, truncated, info = env.step(torch.from_numpy(step_actions).double())
        ours = info["final_observation"].numpy().astype(np.float32)
        for row, reference in enumerate(references):
            if finished[row]:
                continue
            obs, ref_reward, ref_terminated, ref_truncated, _ = reference.step(step_actions[row])
            where = f"{env_id} step {step} row {row}"
            assert ours[row].tobytes() == obs.tobytes(), f"{where}: {ours[row]} != {obs}"
            assert reward[row].item() == ref_reward, (
                f"{where}: {reward[row].item()} != {ref_reward}"
            )
            assert bool(terminated[row]) == ref_terminated, where
            assert bool(truncated[row]) == ref_truncated, where
            finished[row] = ref_terminated or ref_truncated
            compared += 1
    return compared
